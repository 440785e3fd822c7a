"""BertGeneration's decoder (``BertGenerationDecoder``): BERT run as a causal LM, its own LM head.

The encoder is BERT's without token types (``bert.*``) and without a pooler; the head is
``lm_head``, a bare projection onto the vocabulary: tied, the word embeddings plus
``lm_head.bias``; untied, ``lm_head.decoder`` with its own bias. transformers builds the
decoder only with ``is_decoder=True`` (causal self-attention over a KV cache).
"""

from __future__ import annotations

from mobius_text.models._bert_common import EncoderForFeatureExtraction, MaskedLMHead
from mobius_text.models.bert import BertConfig, BertLMHeadModel


class BertGenerationOnlyLMHead(MaskedLMHead):
    """``decoder(x)``: no transform before the vocabulary projection."""

    def __init__(self, config: BertConfig, embeddings) -> None:
        super().__init__(
            config.hidden_size, config.vocab_size, embeddings, config.tie_word_embeddings
        )

    def forward(self, op, x):
        return self.decode(op, x)


class BertGenerationDecoder(BertLMHeadModel):
    lm_head_name = "lm_head"
    head_names = ("lm_head",)
    pretraining_heads = ()
    tied_copies = ("lm_head.decoder.weight", "lm_head.decoder.bias")
    untied_unused = ("lm_head.bias",)

    def __init__(self, config: BertConfig) -> None:
        EncoderForFeatureExtraction.__init__(self, config)  # not BERT's: one head, ``lm_head``
        self.uses_token_type_ids = False
        embeddings = self.base_model.embeddings.word_embeddings
        self.lm_head = BertGenerationOnlyLMHead(config, embeddings)


MODEL_TYPES = {"bert-generation": BertGenerationDecoder}
