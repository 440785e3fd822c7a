"""Decoder backbones used as text encoders: the bare ``LlamaModel``, ``Gemma2Model``... classes.

Diffusion pipelines condition on a decoder's token states instead of its logits:
Sana reads ``Gemma2Model``'s last hidden state, Lumina 2 and CogView4 the input
of the last layer (``hidden_states[-2]`` of ``Gemma2Model`` / ``GlmModel``), Z-Image
``Qwen3Model``'s ``hidden_states[-2]``, HiDream every layer's output of Llama 3,
Qwen-Image the last state of Qwen2.5-VL's language model, Flux.2 layers 10, 20
and 30 of Mistral 3's.
Their ``text_encoder`` folders name the bare class in ``config.json``'s
``architectures``, which is the registration key here (the ``model_type`` stays
the causal LM's). A ``*ForCausalLM`` checkpoint builds the same way with
``--model-type LlamaModel``.

The graph is the family's own backbone (its module class, unchanged) run once
over the whole prompt, as transformers runs the bare model: no cache inputs, no
``lm_head``, position ids ``0..sequence-1`` whatever the padding, attention
causal and over the real tokens of ``attention_mask``. The task
(:mod:`mobius_text.text_encoder`) adds the ``hidden_states.{i}`` outputs that
``--hidden-states`` asks for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import onnx_ir as ir

from mobius.components import Linear, TiedLMHead, last_real_token, module_scope
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_text.models.gemma2 import Gemma2Config, Gemma2Model
from mobius_text.models.glm import GlmConfig, GlmModel
from mobius_text.models.llama import LlamaConfig, LlamaModel
from mobius_text.models.mistral import MistralConfig
from mobius_text.models.qwen import Qwen2Model, Qwen3Model, QwenConfig


@dataclass
class TextEncoderFields:
    """What a text-encoder build adds to its family's config.

    ``hidden_states`` holds indices of transformers' ``hidden_states`` tuple, from 0
    (the embeddings) to ``num_hidden_layers`` (the final-normed last state); the task
    sets them from ``--hidden-states``. ``head``, ``pooling`` and ``normalize`` are the
    feature-extraction contract's: ``none``, or ``sentence-embedding`` (a decoder
    embedder). ``score_token_ids`` (yes, no) make a yes/no reranker: ``head`` is then
    ``sequence-classification`` with one label, ``logit(yes) - logit(no)`` at the
    last real token (sentence-transformers' ``LogitScore``).
    """

    hidden_states: tuple[int, ...] = ()
    head: str = "none"
    pooling: str = "mean"
    normalize: bool = False
    num_labels: int = 1
    score_token_ids: tuple[int, ...] = ()


@dataclass
class LlamaTextEncoderConfig(TextEncoderFields, LlamaConfig):
    """Llama's fields and the text-encoder build's."""


@dataclass
class QwenTextEncoderConfig(TextEncoderFields, QwenConfig):
    """Qwen2/3's fields and the text-encoder build's."""


@dataclass
class Gemma2TextEncoderConfig(TextEncoderFields, Gemma2Config):
    """Gemma 2's fields and the text-encoder build's."""


@dataclass
class GlmTextEncoderConfig(TextEncoderFields, GlmConfig):
    """GLM's fields and the text-encoder build's."""


class DecoderTextEncoder(Model):
    """A decoder family's backbone (``backbone_class``) as ``model``, run without cache or head.

    The backbone must compute as :class:`LlamaModel` does (its ``forward``, with the
    family's embeddings, layers, masks and rotary tables): this class runs those
    pieces in the same order and keeps each layer's output. Checkpoints may hold the
    backbone bare (``embed_tokens.*``, ``layers.*``, ``norm.*``: a diffusers pipeline's
    ``text_encoder``) or under ``model.`` with an ``lm_head`` (a causal LM), which is
    ignored by name.
    """

    task = "text-encoder"
    config_class: ClassVar[type] = LlamaTextEncoderConfig
    backbone_class: ClassVar[type[LlamaModel]] = LlamaModel
    ignored = ("lm_head.weight",)

    def __init__(self, config) -> None:
        super().__init__()
        if self.backbone_class.forward is not LlamaModel.forward:
            raise TypeError(
                f"{self.backbone_class.__name__} computes otherwise than LlamaModel; "
                "it needs a text encoder of its own"
            )
        self.config = config
        self.model = self.backbone_class(config)
        if config.score_token_ids:  # a yes/no reranker reads two rows of the LM head
            if config.tie_word_embeddings:
                self.lm_head = TiedLMHead(self.model.embed_tokens)
            else:
                self.lm_head = Linear(config.hidden_size, config.vocab_size)
                self.ignored = tuple(n for n in self.ignored if n != "lm_head.weight")

    def output_shapes(self) -> dict[str, list]:
        """One ``hidden_states.{i}`` output per selected index, each like ``last_hidden_state``."""
        shape = ["batch", "sequence", self.config.hidden_size]
        return {f"hidden_states.{i}": shape for i in self.config.hidden_states}

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        with module_scope(op, self.model):  # the backbone's pieces keep their ``model.`` names
            states = self.token_states(op, input_ids, attention_mask)
        outputs = {"last_hidden_state": states[-1]}
        outputs.update({f"hidden_states.{i}": states[i] for i in self.config.hidden_states})
        if self.config.score_token_ids:
            logits = self.lm_head(op, last_real_token(op, states[-1], attention_mask))
            yes, no = (op.Gather(logits, [i], axis=1) for i in self.config.score_token_ids)
            outputs["logits"] = op.Sub(yes, no)  # [batch, 1]
        return outputs

    def token_states(
        self, op, input_ids, attention_mask, inputs_embeds=None, position_ids=None
    ) -> list:
        """transformers' ``hidden_states``: the embeddings, then each layer's output, the
        last one through the final norm. ``inputs_embeds`` (images merged in) and
        ``position_ids`` (M-RoPE's) replace the token embeddings and ``0..seq-1``."""
        backbone, config = self.model, self.config
        x = backbone.embed_tokens(op, input_ids) if inputs_embeds is None else inputs_embeds
        shape = op.Shape(input_ids)  # [batch, seq]
        seq_len = op.Squeeze(op.Slice(shape, [1], [2]), [0])
        if position_ids is None:
            # transformers counts positions from 0 on every row when no cache is given.
            position_ids = op.Expand(op.Unsqueeze(op.Range(0, seq_len, 1), [0]), shape)
        rope = backbone.position_embeddings(op, position_ids)
        biases = {
            kind: backbone.layer_bias(op, kind, attention_mask, seq_len, x.dtype)
            for kind in dict.fromkeys(config.layer_types)
        }
        # An empty cache makes each layer the causal LM's prefill, the path its parity checks.
        empty = op.ConstantOfShape(
            op.Concat(
                op.Slice(shape, [0], [1]),
                op.Constant(value_ints=[config.num_key_value_heads, 0, config.head_dim]),
                axis=0,
            ),
            value=ir.tensor(np.zeros(1, dtype=x.dtype.numpy())),
        )
        states = [x]
        for i, layer in enumerate(backbone.layers):
            kind = config.layer_types[i]
            position = rope[kind] if backbone.layer_uses_rope(i) else None
            x, _ = layer(op, x, position, biases[kind], empty, empty)
            states.append(x)
        states[-1] = backbone.norm(op, x)
        return states

    def sanitize(self, weights: dict) -> dict:
        """Bare backbone names (a pipeline's ``text_encoder``) get the ``model.`` prefix."""
        return {
            name if name.startswith(("model.", "lm_head.")) else f"model.{name}": tensor
            for name, tensor in weights.items()
        }


class Qwen2TextEncoder(DecoderTextEncoder):
    """``Qwen2Model``: biased q/k/v projections."""

    config_class = QwenTextEncoderConfig
    backbone_class = Qwen2Model


class Qwen3TextEncoder(DecoderTextEncoder):
    """``Qwen3Model`` (Z-Image): per-head RMS-normalised queries and keys."""

    config_class = QwenTextEncoderConfig
    backbone_class = Qwen3Model


@dataclass
class Qwen2_5_VLTextEncoderConfig(QwenTextEncoderConfig):
    """The text model's fields: a Qwen2.5-VL checkpoint's ``text_config``."""

    @classmethod
    def hf_fields(cls, hf_config):
        return super().hf_fields(getattr(hf_config, "text_config", None) or hf_config)


class Qwen2_5_VLTextEncoder(Qwen2TextEncoder):
    """Qwen2.5-VL's language model on text alone (Qwen-Image's ``text_encoder``).

    Built from the whole ``Qwen2_5_VLForConditionalGeneration`` folder with
    ``--model-type Qwen2_5_VLTextModel``: the text config is read, the decoder taken
    under ``model.`` (as transformers saves the class) or ``model.language_model.``
    (its names in memory), and the vision tower (``visual.*``, ``model.visual.*``)
    and ``lm_head`` ignored by name.
    On text, the multimodal RoPE gives every section the same position, which is
    Qwen2's RoPE.
    """

    config_class = Qwen2_5_VLTextEncoderConfig
    ignored = (*DecoderTextEncoder.ignored, "visual.*")

    def sanitize(self, weights: dict) -> dict:
        """The decoder under ``model.`` (transformers 5 nests it in ``model.language_model.``)."""
        renamed = {}
        for name, tensor in weights.items():
            if name.startswith("model.visual."):
                name = name.removeprefix("model.")
            renamed[name.replace("model.language_model.", "model.", 1)] = tensor
        return renamed


@dataclass
class Mistral3TextEncoderConfig(TextEncoderFields, MistralConfig):
    """The language model's fields: a Mistral 3 checkpoint's ``text_config`` (a Mistral)."""

    @classmethod
    def hf_fields(cls, hf_config):
        text = getattr(hf_config, "text_config", None) or hf_config
        if text.model_type != "mistral":
            # Ministral 3 scales its queries by position: not LlamaModel's computation.
            raise ConfigError(
                f"Mistral3TextModel builds a Mistral language model; this text_config "
                f"is a {text.model_type!r}"
            )
        return super().hf_fields(text)


class Mistral3TextEncoder(DecoderTextEncoder):
    """Mistral 3's language model on text alone (Flux.2's ``text_encoder``).

    Built from the whole ``Mistral3ForConditionalGeneration`` folder with
    ``--model-type Mistral3TextModel``: the text config is read, the decoder taken
    under ``language_model.model.`` (as transformers saves the class) or
    ``model.language_model.`` (its names in memory), and the Pixtral vision tower,
    the multimodal projector and ``lm_head`` ignored by name.
    """

    config_class = Mistral3TextEncoderConfig
    ignored = (*DecoderTextEncoder.ignored, "vision_tower.*", "multi_modal_projector.*")

    def sanitize(self, weights: dict) -> dict:
        """Either layout to the graph's ``model.*``; the parts left out lose their ``model.``."""
        prefixes = {
            "language_model.model.": "model.",
            "model.language_model.": "model.",
            "language_model.lm_head.": "lm_head.",
            "model.vision_tower.": "vision_tower.",
            "model.multi_modal_projector.": "multi_modal_projector.",
        }
        renamed = {}
        for name, tensor in weights.items():
            for old, new in prefixes.items():
                if name.startswith(old):
                    name = new + name.removeprefix(old)
                    break
            renamed[name] = tensor
        return renamed


@dataclass
class MistralTextEncoderConfig(TextEncoderFields, MistralConfig):
    """Mistral's fields and the text-encoder build's."""


class MistralTextEncoder(DecoderTextEncoder):
    """``MistralModel`` (e5-mistral's embedder): Llama without biases, windowed attention."""

    config_class = MistralTextEncoderConfig


class Gemma2TextEncoder(DecoderTextEncoder):
    """``Gemma2Model`` (Sana, Lumina 2): scaled embeddings, soft-capped, windowed attention."""

    config_class = Gemma2TextEncoderConfig
    backbone_class = Gemma2Model


class GlmTextEncoder(DecoderTextEncoder):
    """``GlmModel`` (CogView4): interleaved partial RoPE and a fused MLP."""

    config_class = GlmTextEncoderConfig
    backbone_class = GlmModel


MODEL_TYPES = {
    "LlamaModel": DecoderTextEncoder,
    "Qwen2Model": Qwen2TextEncoder,
    "Qwen3Model": Qwen3TextEncoder,
    "Qwen2_5_VLTextModel": Qwen2_5_VLTextEncoder,
    "Mistral3TextModel": Mistral3TextEncoder,
    "MistralModel": MistralTextEncoder,
    "Gemma2Model": Gemma2TextEncoder,
    "GlmModel": GlmTextEncoder,
}
