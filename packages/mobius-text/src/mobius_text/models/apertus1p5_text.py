"""Apertus 1.5 (text decoder): Apertus with an LM head that may be pruned to a vocabulary prefix.

The input embeddings cover the whole extended vocabulary (text plus visual and
audio codes, ``vocab_size``); the head may keep only the first
``output_vocab_size`` rows, and the logits are that wide. Here ``vocab_size`` is
the logits width (what the causal-LM contract declares) and
``input_vocab_size`` the embedding rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import Embedding
from mobius_text.models.apertus import ApertusForCausalLM, ApertusModel
from mobius_text.models.qwen import QwenConfig


@dataclass
class Apertus1p5TextConfig(QwenConfig):
    input_vocab_size: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.input_vocab_size:
            self.input_vocab_size = self.vocab_size

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        output_vocab = getattr(hf_config, "output_vocab_size", None) or hf_config.vocab_size
        if fields["tie_word_embeddings"] and output_vocab != hf_config.vocab_size:
            raise ValueError(
                "a pruned LM head (output_vocab_size) cannot be tied to the embeddings"
            )
        return {**fields, "vocab_size": output_vocab, "input_vocab_size": hf_config.vocab_size}


class Apertus1p5TextModel(ApertusModel):
    def __init__(self, config: Apertus1p5TextConfig) -> None:
        super().__init__(config)
        self.embed_tokens = Embedding(config.input_vocab_size, config.hidden_size)


class Apertus1p5TextForCausalLM(ApertusForCausalLM):
    """Apertus 1.5's causal LM: logits over the head's ``output_vocab_size`` rows."""

    config_class = Apertus1p5TextConfig
    model_class = Apertus1p5TextModel
    # Multimodal checkpoints carry the tokenizer towers, which the text model does not use
    # (transformers ignores them on load as well).
    ignored = ("model.vision_tokenizer.*", "model.audio_tokenizer.*")

    def sanitize(self, weights: dict) -> dict:
        """Multimodal checkpoints nest the decoder under ``model.language_model``, as transformers reads it."""
        prefix = "model.language_model."
        weights = {
            ("model." + name[len(prefix) :] if name.startswith(prefix) else name): tensor
            for name, tensor in weights.items()
        }
        return super().sanitize(weights)


MODEL_TYPES = {"apertus1p5_text": Apertus1p5TextForCausalLM}
