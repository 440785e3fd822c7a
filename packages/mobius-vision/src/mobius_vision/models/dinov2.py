"""DINOv2: a ViT with layer scale, an MLP sized by ``mlp_ratio`` (or SwiGLU), and CLS pooling.

Checkpoint keys as transformers saves them (``dinov2.encoder.layer.0.norm1``,
``attention.attention.query``, ``layer_scale1.lambda1``, ``mlp.fc1`` or SwiGLU's
``mlp.weights_in``/``weights_out``). The position table is built for the config's
image size, so no interpolation happens; transformers interpolates whenever the
image is not square, so non-square sizes are refused. ``pooler_output`` is the
final class token; the classifier reads ``[cls, mean(patches)]``.

:class:`Dinov2Backbone` is transformers' ``Dinov2Backbone`` under a dense head (Depth
Anything, DPT): the hidden states of ``out_indices``, layer-normed and reshaped to maps
as the backbone config says, at any image size (its positions are resized bicubically
to the image's patch grid, as transformers' ``interpolate_pos_encoding`` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._common import torch_bicubic_resize
from mobius_vision.models.vit import (
    ViTAttention,
    ViTConfig,
    ViTEmbeddings,
    ViTForImageClassification,
    ViTModel,
)


@dataclass
class Dinov2Config(ViTConfig):
    layer_norm_eps: float = 1e-6
    use_swiglu_ffn: bool = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = VisionConfig.hf_fields.__func__(cls, hf_config)
        height, width = fields["image_size"]
        if height != width:
            raise ConfigError(
                f"{hf_config.model_type}: image_size {height}x{width} is not square; "
                "transformers interpolates its positions there, which mobius does not build"
            )
        return dict(
            fields,
            hidden_size=hf_config.hidden_size,
            intermediate_size=int(hf_config.hidden_size * hf_config.mlp_ratio),
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=hf_config.num_attention_heads,
            patch_size=hf_config.patch_size,
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
            qkv_bias=bool(hf_config.qkv_bias),
            pooler=False,
            use_swiglu_ffn=bool(hf_config.use_swiglu_ffn),
        )


class Dinov2LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lambda1 = nn.Parameter([dim])

    def forward(self, op, x):
        return op.Mul(x, self.lambda1)


class Dinov2MLP(nn.Module):
    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        self.fc1 = Linear(config.hidden_size, config.intermediate_size, bias=True)
        self.fc2 = Linear(config.intermediate_size, config.hidden_size, bias=True)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, x)))


class Dinov2SwiGLUFFN(nn.Module):
    """``weights_out(silu(gate) * up)`` with ``[gate; up] = weights_in(x)``."""

    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        hidden = (int(config.intermediate_size * 2 / 3) + 7) // 8 * 8
        self.weights_in = Linear(config.hidden_size, 2 * hidden, bias=True)
        self.weights_out = Linear(hidden, config.hidden_size, bias=True)

    def forward(self, op, x):
        gate, up = op.Split(self.weights_in(op, x), axis=-1, num_outputs=2, _outputs=2)
        return self.weights_out(op, op.Mul(op.Mul(gate, op.Sigmoid(gate)), up))


class Dinov2Layer(nn.Module):
    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.norm1 = LayerNorm(d, eps)
        self.attention = ViTAttention(config)
        self.layer_scale1 = Dinov2LayerScale(d)
        self.norm2 = LayerNorm(d, eps)
        self.mlp = Dinov2SwiGLUFFN(config) if config.use_swiglu_ffn else Dinov2MLP(config)
        self.layer_scale2 = Dinov2LayerScale(d)

    def forward(self, op, x):
        x = op.Add(x, self.layer_scale1(op, self.attention(op, self.norm1(op, x))))
        return op.Add(x, self.layer_scale2(op, self.mlp(op, self.norm2(op, x))))


class Dinov2Encoder(nn.Module):
    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        self.layer = nn.ModuleList([Dinov2Layer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, op, x):
        for layer in self.layer:
            x = layer(op, x)
        return x


class Dinov2Model(ViTModel):
    def __init__(self, config: Dinov2Config) -> None:
        super().__init__(config)
        self.encoder = Dinov2Encoder(config)
        self.pools = config.head == "none"  # the bare model's pooler_output: the class token

    def forward(self, op, pixel_values):
        x = self.layernorm(op, self.encoder(op, self.embeddings(op, pixel_values)))
        return x, op.Gather(x, op.Constant(value_int=0), axis=1) if self.pools else None


@dataclass
class Dinov2BackboneConfig(Dinov2Config):
    """DINOv2 as a backbone: which hidden states it returns (0 is the embeddings), and how."""

    out_indices: tuple[int, ...] = ()
    apply_layernorm: bool = True
    reshape_hidden_states: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        layers = fields["num_hidden_layers"]
        out_indices = getattr(hf_config, "out_indices", None) or [layers]
        if not all(isinstance(i, int) and -layers - 1 <= i <= layers for i in out_indices):
            raise ConfigError(
                f"{hf_config.model_type} backbone: out_indices {out_indices!r} must be hidden-state "
                f"indices in [0, {layers}]"
            )
        return dict(
            fields,
            out_indices=tuple(i % (layers + 1) for i in out_indices),
            apply_layernorm=bool(getattr(hf_config, "apply_layernorm", True)),
            reshape_hidden_states=bool(getattr(hf_config, "reshape_hidden_states", True)),
        )


def patch_grid(op, pixel_values, patch_size: int):
    """``[height // patch, width // patch]`` of ``pixel_values`` (int64, from its shape)."""
    return op.Div(op.Shape(pixel_values, start=2, end=4), op.Constant(value_ints=[patch_size]))


class Dinov2BackboneEmbeddings(ViTEmbeddings):
    """``[cls, patches] + positions``, the patch positions resized to the image's grid."""

    def __init__(self, config: Dinov2BackboneConfig) -> None:
        super().__init__(config)
        self.hidden_size = config.hidden_size
        self.patch_size = config.patch_size
        self.table_side = config.image_size[0] // config.patch_size

    def positions(self, op, pixel_values):
        """transformers' ``interpolate_pos_encoding``: bicubic, ``align_corners=False``
        (a resize to the table's own size is the identity, so it is always applied)."""
        side, dim = self.table_side, self.hidden_size
        table = self.position_embeddings
        cls_position = op.Slice(table, [0], [1], [1])
        grid = op.Reshape(op.Slice(table, [1], [2**62], [1]), [1, side, side, dim])
        grid = op.Transpose(grid, perm=[0, 3, 1, 2])  # [1, dim, side, side]
        sizes = op.Concat(
            op.Constant(value_ints=[1, dim]), patch_grid(op, pixel_values, self.patch_size), axis=0
        )
        grid = torch_bicubic_resize(op, grid, sizes)
        grid = op.Reshape(op.Transpose(grid, perm=[0, 2, 3, 1]), [1, -1, dim])
        return op.Concat(cls_position, grid, axis=1)

    def forward(self, op, pixel_values):
        patches = self.patch_embeddings(op, pixel_values)  # [batch, patches, hidden]
        batch = op.Shape(pixel_values, start=0, end=1)
        cls = op.Expand(self.cls_token, op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0))
        x = op.Concat(cls, patches, axis=1)
        return op.Add(x, self.positions(op, pixel_values))


class Dinov2BackboneEncoder(Dinov2Encoder):
    """The encoder returning every hidden state: the embeddings, then each layer's output."""

    def forward(self, op, x) -> list:
        hidden_states = [x]
        for layer in self.layer:
            hidden_states.append(layer(op, hidden_states[-1]))
        return hidden_states


class Dinov2Backbone(nn.Module):
    """transformers' ``Dinov2Backbone``: ``feature_maps``, one per ``out_indices`` entry.

    Each is the hidden state after that many layers, layer-normed with ``apply_layernorm``;
    with ``reshape_hidden_states`` the class token is dropped and the patches become a
    ``[batch, hidden, height // patch, width // patch]`` map, else ``[batch, tokens, hidden]``.
    """

    config_class = Dinov2BackboneConfig

    def __init__(self, config: Dinov2BackboneConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Dinov2BackboneEmbeddings(config)
        self.encoder = Dinov2BackboneEncoder(config)
        self.layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    @property
    def unused(self) -> tuple[str, ...]:
        """Checkpoint tensors of the backbone its graph does not read (relative names)."""
        return ("embeddings.mask_token",) + (
            () if self.config.apply_layernorm else ("layernorm.*",)
        )

    def forward(self, op, pixel_values) -> list:
        config = self.config
        hidden_states = self.encoder(op, self.embeddings(op, pixel_values))
        maps = []
        for index in config.out_indices:
            x = hidden_states[index]
            if config.apply_layernorm:
                x = self.layernorm(op, x)
            if config.reshape_hidden_states:
                x = op.Transpose(op.Slice(x, [1], [2**62], [1]), perm=[0, 2, 1])
                shape = op.Concat(
                    op.Shape(x, start=0, end=2),
                    patch_grid(op, pixel_values, config.patch_size),
                    axis=0,
                )
                x = op.Reshape(x, shape)
            maps.append(x)
        return maps


class Dinov2ForImageClassification(ViTForImageClassification):
    """The classifier on ``[cls, mean of the patch tokens]`` (``2 * hidden`` features)."""

    config_class = Dinov2Config
    base_model_prefix = "dinov2"
    model_class = Dinov2Model
    #: What a dense head (Depth Anything, DPT) puts under itself (:mod:`._backbone`).
    backbone_class = Dinov2Backbone

    def __init__(self, config: Dinov2Config) -> None:
        super().__init__(config)
        if self.classifier is not None:
            self.classifier = Linear(2 * config.hidden_size, config.num_labels, True)

    def classify(self, op, hidden):
        first = self.base_model.embeddings.extra_tokens  # patches follow the prefix tokens
        patches = op.Slice(hidden, [first], [2**62], [1])
        mean = op.ReduceMean(patches, op.Constant(value_ints=[1]), keepdims=0)
        cls = op.Gather(hidden, op.Constant(value_int=0), axis=1)
        return self.classifier(op, op.Concat(cls, mean, axis=-1))


MODEL_TYPES = {"dinov2": Dinov2ForImageClassification}
