"""Text-only causal LMs read from vision–language checkpoints (transformers' ``*ForCausalLM``).

transformers' causal-LM table maps the composite ``model_type`` of some multimodal
checkpoints to their text decoder alone: ``AutoModelForCausalLM`` on a Qwen3.5 checkpoint
builds ``Qwen3_5ForCausalLM`` from ``config.text_config`` and drops the towers. These
classes do the same, registered under the transformers class name, so that
``mobius build --model-type Qwen3_5ForCausalLM <dir> <out>`` builds the decoder of the
``*ForConditionalGeneration`` checkpoint the hub holds (whose ``architectures`` names the
wrapper, so only ``--model-type`` picks them; the composite ``model_type`` stays the
vision–language build). Each reads the text config (or a plain text config as it is),
finds the decoder under the family's own prefixes and ignores the family's towers by name;
any other tensor still fails the build.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import attention_bias
from mobius_text.models.dots3_note_text import Dots3NoteForCausalLM, Dots3NoteTextConfig
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM
from mobius_text.models.llama4 import Llama4ForCausalLM, Llama4TextConfig
from mobius_text.models.mllama_text import MllamaTextConfig, MllamaTextForCausalLM, MllamaTextModel
from mobius_text.models.qwen3_5 import (
    Qwen3_5ForCausalLM,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
)


class TextConfigOf:
    """Config mixin: the fields of ``hf_config.text_config`` when the config is composite.

    The wrapper ties its head by its own ``tie_word_embeddings`` (a tied checkpoint has no
    ``lm_head.weight``), whatever the text config says: that flag is what the checkpoint holds.
    """

    @classmethod
    def hf_fields(cls, hf_config):
        text = getattr(hf_config, "text_config", None)
        if text is None:
            return super().hf_fields(hf_config)
        fields = super().hf_fields(text)
        tied = getattr(hf_config, "tie_word_embeddings", None)
        if tied is not None:
            fields["tie_word_embeddings"] = bool(tied)
        return fields


class TextOfVLM:
    """Model mixin: the decoder's tensors renamed from the wrapper's prefixes (``renames``)."""

    #: checkpoint prefix -> the text model's (the first that matches a name applies)
    renames: tuple[tuple[str, str], ...] = ()

    def sanitize(self, weights: dict) -> dict:
        renamed = {}
        for name, tensor in weights.items():
            for old, new in self.renames:
                if name.startswith(old):
                    name = new + name[len(old) :]
                    break
            renamed[name] = tensor
        return super().sanitize(renamed)


# -- Qwen3.5: the decoder under model.language_model, the tower under model.visual -------------


@dataclass
class Qwen3_5VLMTextConfig(TextConfigOf, Qwen3_5TextConfig):
    pass


@dataclass
class Qwen3_5MoeVLMTextConfig(TextConfigOf, Qwen3_5MoeTextConfig):
    pass


class Qwen3_5TextOnlyForCausalLM(TextOfVLM, Qwen3_5ForCausalLM):
    """``Qwen3_5ForCausalLM`` of a ``Qwen3_5ForConditionalGeneration`` checkpoint."""

    config_class = Qwen3_5VLMTextConfig
    renames = (("model.language_model.", "model."),)
    # the vision tower; the multi-token-prediction head, which generation does not read
    ignored = ("model.visual.*", "mtp.*")


class Qwen3_5MoeTextOnlyForCausalLM(TextOfVLM, Qwen3_5MoeForCausalLM):
    """``Qwen3_5MoeForCausalLM`` of a ``Qwen3_5MoeForConditionalGeneration`` checkpoint."""

    config_class = Qwen3_5MoeVLMTextConfig
    renames = Qwen3_5TextOnlyForCausalLM.renames
    ignored = Qwen3_5TextOnlyForCausalLM.ignored


#: Llama 4's and Mllama's tower and projector, as saved and as transformers 5 names them
VISION_MODEL_AND_PROJECTOR = (
    "vision_model.*",
    "multi_modal_projector.*",
    "model.vision_model.*",
    "model.multi_modal_projector.*",
)


# -- Llama 4: saved as language_model.{model,lm_head}; transformers 5 names it model.language_model


@dataclass
class Llama4VLMTextConfig(TextConfigOf, Llama4TextConfig):
    pass


class Llama4TextOnlyForCausalLM(TextOfVLM, Llama4ForCausalLM):
    """``Llama4ForCausalLM`` of a ``Llama4ForConditionalGeneration`` checkpoint."""

    config_class = Llama4VLMTextConfig
    renames = (
        ("language_model.model.", "model."),
        ("language_model.lm_head.", "lm_head."),
        ("model.language_model.", "model."),
    )
    ignored = VISION_MODEL_AND_PROJECTOR


# -- Dots 3 Note: the decoder already under model., the towers beside it -----------------------


@dataclass
class Dots3NoteVLMTextConfig(TextConfigOf, Dots3NoteTextConfig):
    pass


class Dots3NoteTextOnlyForCausalLM(TextOfVLM, Dots3NoteForCausalLM):
    """``Dots3NoteForCausalLM`` of a ``Dots3NoteForConditionalGeneration`` checkpoint."""

    config_class = Dots3NoteVLMTextConfig
    renames = (("model.language_model.", "model."),)

    @property
    def ignored(self) -> tuple[str, ...]:
        """The vision and audio towers, and what transformers skips on load: the
        multi-token-prediction head (``model.mtp``) and the layer stored after the decoder."""
        n = self.config.num_hidden_layers
        towers = ("vision_encoder.*", "audio_encoder.*")
        return (*super().ignored, *towers, "model.mtp.*", f"model.layers.{n}.*")


# -- Emu3: a Llama decoder, saved as text_model.{model,lm_head} beside the VQ-VAE (vqmodel) --------


@dataclass
class Emu3TextConfig(TextConfigOf, LlamaConfig):
    pass


class Emu3ForCausalLM(TextOfVLM, LlamaForCausalLM):
    """``Emu3ForCausalLM``: Llama (its extra dropout is off at inference) of an
    ``Emu3ForConditionalGeneration`` checkpoint; the image tokenizer is not read."""

    config_class = Emu3TextConfig
    renames = (
        ("text_model.model.", "model."),
        ("text_model.lm_head.", "lm_head."),
        ("model.text_model.", "model."),
    )
    ignored = ("vqmodel.*", "model.vqmodel.*")


# -- Mllama: text alone skips the cross-attention layers -----------------------------------------


@dataclass
class MllamaVLMTextConfig(TextConfigOf, MllamaTextConfig):
    pass


class CrossAttentionSlot(nn.Module):
    """The place of a cross-attention layer, which a decoder without an image skips."""


class MllamaTextOnlyModel(MllamaTextModel):
    """Mllama's decoder without image: transformers skips a cross-attention layer when it has
    neither vision states nor their cache, so only the self-attention layers run."""

    def make_layer(self, config: MllamaTextConfig, layer_idx: int):
        if layer_idx in config.cross_attention_layers:
            return CrossAttentionSlot()
        return super().make_layer(config, layer_idx)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        """``past_key_values``: one ``(key, value)`` per self-attention layer, in order."""
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        cos_sin = self.rotary_emb(op, position_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        bias = attention_bias(op, attention_mask, seq_len, x.dtype)
        cross = self.config.cross_attention_layers
        layers = [layer for i, layer in enumerate(self.layers) if i not in cross]
        presents = []
        for layer, (past_key, past_value) in zip(layers, past_key_values, strict=True):
            x, present = layer(op, x, cos_sin, bias, past_key, past_value)
            presents.append(present)
        return self.norm(op, x), presents


class MllamaTextOnlyForCausalLM(TextOfVLM, MllamaTextForCausalLM):
    """``MllamaForCausalLM`` of a ``MllamaForConditionalGeneration`` checkpoint: a causal-LM
    cache for the self-attention layers only (numbered in order)."""

    config_class = MllamaVLMTextConfig
    model_class = MllamaTextOnlyModel
    renames = Llama4TextOnlyForCausalLM.renames

    @property
    def ignored(self) -> tuple[str, ...]:
        """The vision model and projector, and the cross-attention layers (text alone skips them)."""
        cross = tuple(f"model.layers.{i}.*" for i in self.config.cross_attention_layers)
        return (*VISION_MODEL_AND_PROJECTOR, *cross)

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        c = self.config
        return [(c.num_key_value_heads, c.head_dim, c.head_dim)] * len(self.self_attention_layers())

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        hidden, presents = self.model(op, input_ids, attention_mask, position_ids, past_key_values)
        return self.lm_head(op, hidden), presents


MODEL_TYPES = {
    "Qwen3_5ForCausalLM": Qwen3_5TextOnlyForCausalLM,
    "Qwen3_5MoeForCausalLM": Qwen3_5MoeTextOnlyForCausalLM,
    "Llama4ForCausalLM": Llama4TextOnlyForCausalLM,
    "Dots3NoteForCausalLM": Dots3NoteTextOnlyForCausalLM,
    "Emu3ForCausalLM": Emu3ForCausalLM,
    "MllamaForCausalLM": MllamaTextOnlyForCausalLM,
}
