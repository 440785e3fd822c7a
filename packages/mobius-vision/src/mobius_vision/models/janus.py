"""Janus (``janus``): image understanding only — a SigLIP-like tower, an MLP aligner, a Llama.

The tower (HF ``JanusVisionModel``) is SigLIP's: patches with learned positions,
pre-norm layers, ``post_layernorm`` on every token; its attention names the output
projection ``projection_layer``, its q/k/v biases follow ``attention_bias``, and its
MLP width is ``hidden_size * mlp_ratio``. Every patch is one image token, mapped by
the aligner (``fc1``, then ``depth - 1`` times ``act -> linear``) to the text width.

Janus also generates images (a VQ-VAE, ``generation_*`` embeddings, aligner and head):
that path never produces text, so mobius builds the understanding path alone and leaves
those tensors unread.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear, bidirectional_attention, get_activation
from mobius.config import first_of
from mobius.errors import ConfigError
from mobius_text.models.clip_text import CLIPEncoder, CLIPEncoderLayer
from mobius_vision.config import VisionLanguageConfig, composed_config
from mobius_vision.models._vl import text_decoder
from mobius_vision.models.deepseek_vl import DeepseekVLForConditionalGeneration
from mobius_vision.models.siglip_vision import SiglipVisionConfig, SiglipVisionTransformer


@dataclass
class JanusVisionConfig(SiglipVisionConfig):
    attention_bias: bool = True
    projection_dim: int = 2048
    depth: int = 2

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if hf_config.use_qk_norm:
            # transformers norms [.., heads, head_dim] with a LayerNorm of hidden_size:
            # that only runs with one head, and no Janus checkpoint sets it
            raise ConfigError("janus: use_qk_norm is not supported")
        depth = hf_config.depth
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ConfigError(f"janus: vision_config.depth {depth!r} is not a positive int")
        ratio = hf_config.mlp_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0:
            raise ConfigError(f"janus: vision_config.mlp_ratio {ratio!r} is not positive")
        sized = copy.copy(hf_config)  # SigLIP's fields read intermediate_size
        sized.intermediate_size = int(hf_config.hidden_size * ratio)
        return dict(
            super().hf_fields(sized),
            vision_use_head=False,
            attention_bias=bool(hf_config.attention_bias),
            projection_dim=int(hf_config.projection_dim),
            depth=depth,
        )


class JanusVisionAttention(nn.Module):
    """Bidirectional multi-head attention; the output projection is ``projection_layer``."""

    def __init__(self, hidden_size: int, num_heads: int, bias: bool) -> None:
        super().__init__()
        self.q_proj = Linear(hidden_size, hidden_size, bias=bias)
        self.k_proj = Linear(hidden_size, hidden_size, bias=bias)
        self.v_proj = Linear(hidden_size, hidden_size, bias=bias)
        self.projection_layer = Linear(hidden_size, hidden_size, bias=True)
        self.num_heads, self.scale = num_heads, (hidden_size // num_heads) ** -0.5

    def forward(self, op, x, bias):
        q, k, v = self.q_proj(op, x), self.k_proj(op, x), self.v_proj(op, x)
        y = bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)
        return self.projection_layer(op, y)


class JanusVisionEncoderLayer(CLIPEncoderLayer):
    """CLIP's pre-norm layer with :class:`JanusVisionAttention`."""

    def __init__(self, config: JanusVisionConfig) -> None:
        c = config
        super().__init__(
            c.hidden_size,
            c.num_attention_heads,
            c.intermediate_size,
            c.hidden_act,
            c.layer_norm_eps,
        )
        self.self_attn = JanusVisionAttention(
            c.hidden_size, c.num_attention_heads, c.attention_bias
        )


class JanusVisionEncoder(CLIPEncoder):
    """CLIP's encoder (every layer's output) over :class:`JanusVisionEncoderLayer`."""

    def __init__(self, config: JanusVisionConfig) -> None:
        nn.Module.__init__(self)
        self.layers = nn.ModuleList(
            [JanusVisionEncoderLayer(config) for _ in range(config.num_hidden_layers)]
        )


class JanusVisionTransformer(SiglipVisionTransformer):
    """SigLIP's tower (no pooling head) over :class:`JanusVisionEncoder`."""

    def __init__(self, config: JanusVisionConfig) -> None:
        super().__init__(config)
        self.encoder = JanusVisionEncoder(config)


class JanusVisionAlignerMLP(nn.Module):
    """``fc1``, then ``act -> hidden_layers[i]`` for each of the ``depth - 1`` layers."""

    def __init__(self, config: JanusVisionConfig) -> None:
        super().__init__()
        width = config.projection_dim
        self.fc1 = Linear(config.hidden_size, width, bias=True)
        self.hidden_layers = nn.ModuleList(
            [Linear(width, width, bias=True) for _ in range(config.depth - 1)]
        )
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        x = self.fc1(op, x)
        for layer in self.hidden_layers:
            x = layer(op, self.act(op, x))
        return x


@dataclass
class JanusConfig(VisionLanguageConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # the tower is built here: janus_vision_model is no standalone type of the registry
        vision = JanusVisionConfig.from_hf(hf_config.vision_config)
        text = composed_config(cls.text_hf_config(hf_config))
        if vision.projection_dim != text.hidden_size:
            raise ConfigError(
                f"janus: the aligner's projection_dim {vision.projection_dim} differs from the "
                f"text hidden_size {text.hidden_size}"
            )
        return dict(
            model_type=hf_config.model_type,
            vision=vision,
            text=text,
            image_token_id=int(first_of(hf_config, "image_token_id", "image_token_index")),
        )


class JanusForConditionalGeneration(DeepseekVLForConditionalGeneration):
    """DeepSeek-VL's path (``post_layernorm`` states through the aligner) over Janus's tower."""

    config_class = JanusConfig

    def __init__(self, config: JanusConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = JanusVisionTransformer(config.vision)
        self.multi_modal_projector = JanusVisionAlignerMLP(config.vision)
        self.language_model = text_decoder(config.text)

    @property
    def ignored(self) -> tuple[str, ...]:
        # the image-generation path: it never produces text
        generation = ("model.vqmodel.*", "model.generation_*")
        return (*super().ignored, *generation)


MODEL_TYPES = {"janus": JanusForConditionalGeneration}
