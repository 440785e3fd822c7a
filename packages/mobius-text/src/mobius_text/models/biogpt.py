"""BioGPT: embeddings scaled by ``sqrt(hidden)``, OPT's learned positions (offset 2), and
pre-norm fairseq layers; the head is ``output_projection``."""

from __future__ import annotations

from mobius_text.models._gpt_common import (
    FairseqDecoderConfig,
    FairseqPreNormDecoder,
    GPTForCausalLM,
    OffsetEmbedding,
)


class BioGptConfig(FairseqDecoderConfig):
    """The fairseq decoder's fields, as BioGPT's config names them."""


class BioGptModel(FairseqPreNormDecoder):
    def make_positions(self, config: BioGptConfig):
        return OffsetEmbedding(config.max_position_embeddings, config.hidden_size, offset=2)

    def embed(self, op, input_ids, position_ids):
        return op.Add(self.embed_tokens(op, input_ids), self.embed_positions(op, position_ids))


class BioGptForCausalLM(GPTForCausalLM):
    config_class = BioGptConfig
    model_class = BioGptModel
    backbone_name = "biogpt"
    head_name = "output_projection"

    def input_embedding(self):
        return self.backbone.embed_tokens


MODEL_TYPES = {"biogpt": BioGptForCausalLM}
