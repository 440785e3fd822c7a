"""GOT-OCR 2.0 (``got_ocr2``): a SAM-style ViTDet tower, two strided convs and a linear, over Qwen2.

The tower (HF ``GotOcr2VisionEncoder``) reads a fixed ``image_size`` square: a patch conv,
an absolute position table, layers whose attention runs within ``window_size`` windows
(the grid zero-padded to whole windows) except at ``global_attn_indexes``, with SAM's
decomposed relative positions (``rel_pos_h``/``rel_pos_w``, one row per query-key
offset, added to the logits), then a neck (1x1 conv, 3x3 conv, each channel-normed).
The projector halves the grid twice with 3x3 stride-2 convs and maps each cell to the
decoder's width: ``(grid / 4)^2`` image tokens per image.

Every size is static (the image size is fixed), so windows and offsets are constants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, LayerNorm, Linear, get_activation
from mobius.config import first_of
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig, composed_config, image_size_pair
from mobius_vision.models._conv import ChannelsLayerNorm
from mobius_vision.models._vl import VisionLanguageModel, flatten_images, text_decoder


@dataclass
class GotOcr2VisionConfig:
    model_type: str
    image_size: tuple[int, int]
    num_channels: int
    hidden_size: int
    output_channels: int
    num_hidden_layers: int
    num_attention_heads: int
    patch_size: int
    hidden_act: str
    layer_norm_eps: float
    qkv_bias: bool
    use_abs_pos: bool
    use_rel_pos: bool
    window_size: int
    global_attn_indexes: tuple[int, ...]
    mlp_dim: int

    @classmethod
    def from_hf(cls, hf: Any) -> GotOcr2VisionConfig:
        height, width = image_size_pair(hf.image_size)
        patch = hf.patch_size
        if isinstance(patch, (list, tuple)):
            if len(set(patch)) != 1:
                raise ConfigError(f"{hf.model_type}: patch_size {patch} is not square")
            patch = patch[0]
        patch = int(patch)
        if height != width or height % patch:
            raise ConfigError(
                f"{hf.model_type}: image_size {hf.image_size} is not a square of whole "
                f"{patch}-pixel patches"
            )
        if hf.hidden_size % hf.num_attention_heads:
            raise ConfigError(f"{hf.model_type}: hidden_size is not a multiple of the heads")
        return cls(
            model_type=hf.model_type,
            image_size=(height, width),
            num_channels=int(hf.num_channels),
            hidden_size=int(hf.hidden_size),
            output_channels=int(hf.output_channels),
            num_hidden_layers=int(hf.num_hidden_layers),
            num_attention_heads=int(hf.num_attention_heads),
            patch_size=patch,
            hidden_act=hf.hidden_act,
            layer_norm_eps=float(hf.layer_norm_eps),
            qkv_bias=bool(hf.qkv_bias),
            use_abs_pos=bool(hf.use_abs_pos),
            use_rel_pos=bool(hf.use_rel_pos),
            window_size=int(hf.window_size),
            global_attn_indexes=tuple(int(i) for i in hf.global_attn_indexes),
            mlp_dim=int(hf.mlp_dim),
        )

    @property
    def grid(self) -> int:
        """Patches per side."""
        return self.image_size[0] // self.patch_size


def relative_rows(size: int) -> np.ndarray:
    """``[size, size]``: the ``rel_pos`` row of each (query, key) pair, ``q - k + size - 1``."""
    index = np.arange(size)
    return (index[:, None] - index[None, :] + size - 1).astype(np.int64)


class GotOcr2VisionAttention(nn.Module):
    """Attention over one ``size x size`` grid (a window, or the whole grid)."""

    def __init__(self, config: GotOcr2VisionConfig, size: int) -> None:
        super().__init__()
        dim, heads = config.hidden_size, config.num_attention_heads
        self.qkv = Linear(dim, 3 * dim, bias=config.qkv_bias)
        self.proj = Linear(dim, dim, bias=True)
        self.heads, self.head_dim, self.dim, self.size = heads, dim // heads, dim, size
        self.rel_pos_h = self.rel_pos_w = None
        if config.use_rel_pos:
            self.rel_pos_h = nn.Parameter([2 * size - 1, self.head_dim])
            self.rel_pos_w = nn.Parameter([2 * size - 1, self.head_dim])

    def forward(self, op, x):
        """``x [n, size, size, dim]`` to the same shape."""
        s, length = self.size, self.size * self.size
        qkv = op.Reshape(
            self.qkv(op, x), op.Constant(value_ints=[-1, length, 3, self.heads, self.head_dim])
        )
        qkv = op.Transpose(qkv, perm=[2, 0, 3, 1, 4])  # [3, n, heads, length, head_dim]
        q, k, v = (op.Squeeze(t, [0]) for t in op.Split(qkv, num_outputs=3, axis=0, _outputs=3))
        scores = op.MatMul(
            op.Mul(q, op.CastLike(op.Constant(value_float=self.head_dim**-0.5), q)),
            op.Transpose(k, perm=[0, 1, 3, 2]),
        )  # [n, heads, length, length]
        if self.rel_pos_h is not None:
            scores = op.Add(scores, self.relative_logits(op, q))
        weights = op.Softmax(scores, axis=-1)
        y = op.MatMul(weights, v)  # [n, heads, length, head_dim]
        y = op.Reshape(y, op.Constant(value_ints=[-1, self.heads, s, s, self.head_dim]))
        y = op.Transpose(y, perm=[0, 2, 3, 1, 4])
        y = op.Reshape(y, op.Constant(value_ints=[-1, s, s, self.dim]))
        return self.proj(op, y)

    def relative_logits(self, op, q):
        """``[n, heads, length, length]``: the unscaled query against the row and column offsets."""
        s = self.size
        rows = op.Constant(value=ir.tensor(relative_rows(s)))
        table_h = op.Gather(self.rel_pos_h, rows, axis=0)  # [s (query row), s (key row), hd]
        table_w = op.Gather(self.rel_pos_w, rows, axis=0)
        grid_q = op.Reshape(q, op.Constant(value_ints=[-1, s, s, self.head_dim]))
        rel_h = op.Einsum(grid_q, table_h, equation="bhwc,hkc->bhwk")
        rel_w = op.Einsum(grid_q, table_w, equation="bhwc,wkc->bhwk")
        both = op.Add(op.Unsqueeze(rel_h, [4]), op.Unsqueeze(rel_w, [3]))  # [b, s, s, s, s]
        return op.Reshape(both, op.Constant(value_ints=[-1, self.heads, s * s, s * s]))


class GotOcr2MLPBlock(nn.Module):
    def __init__(self, config: GotOcr2VisionConfig) -> None:
        super().__init__()
        self.lin1 = Linear(config.hidden_size, config.mlp_dim, bias=True)
        self.lin2 = Linear(config.mlp_dim, config.hidden_size, bias=True)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.lin2(op, self.act(op, self.lin1(op, x)))


class GotOcr2VisionLayer(nn.Module):
    """Pre-norm attention (within windows of ``window`` patches unless 0) and MLP."""

    def __init__(self, config: GotOcr2VisionConfig, window: int) -> None:
        super().__init__()
        eps, dim = config.layer_norm_eps, config.hidden_size
        self.window, self.grid, self.dim = window, config.grid, dim
        self.layer_norm1 = LayerNorm(dim, eps)
        self.attn = GotOcr2VisionAttention(config, window or config.grid)
        self.layer_norm2 = LayerNorm(dim, eps)
        self.mlp = GotOcr2MLPBlock(config)

    def forward(self, op, x):
        """``x [b, grid * grid, dim]``: kept 3-D between layers (ORT fuses its norms so)."""
        g = self.grid
        h = op.Reshape(self.layer_norm1(op, x), op.Constant(value_ints=[-1, g, g, self.dim]))
        h = (
            self.unpartition(op, self.attn(op, self.partition(op, h)))
            if self.window
            else self.attn(op, h)
        )
        x = op.Add(x, op.Reshape(h, op.Constant(value_ints=[-1, g * g, self.dim])))
        return op.Add(x, self.mlp(op, self.layer_norm2(op, x)))

    @property
    def padded(self) -> int:
        return -(-self.grid // self.window) * self.window

    def partition(self, op, x):
        """``[b, grid, grid, dim]`` zero-padded to whole windows, as ``[b * windows, w, w, dim]``."""
        w, pad, count = self.window, self.padded - self.grid, self.padded // self.window
        if pad:
            x = op.Pad(x, op.Constant(value_ints=[0, 0, 0, 0, 0, pad, pad, 0]))
        x = op.Reshape(x, op.Constant(value_ints=[-1, count, w, count, w, self.dim]))
        x = op.Transpose(x, perm=[0, 1, 3, 2, 4, 5])
        return op.Reshape(x, op.Constant(value_ints=[-1, w, w, self.dim]))

    def unpartition(self, op, x):
        w, count = self.window, self.padded // self.window
        x = op.Reshape(x, op.Constant(value_ints=[-1, count, count, w, w, self.dim]))
        x = op.Transpose(x, perm=[0, 1, 3, 2, 4, 5])
        x = op.Reshape(x, op.Constant(value_ints=[-1, self.padded, self.padded, self.dim]))
        if self.padded == self.grid:
            return x
        return op.Slice(x, [0, 0], [self.grid, self.grid], [1, 2])


class GotOcr2PatchEmbeddings(nn.Module):
    def __init__(self, config: GotOcr2VisionConfig) -> None:
        super().__init__()
        patch = config.patch_size
        self.projection = Conv2d(config.num_channels, config.hidden_size, patch, stride=patch)

    def forward(self, op, pixel_values):
        return op.Transpose(self.projection(op, pixel_values), perm=[0, 2, 3, 1])  # [b, g, g, d]


class GotOcr2VisionNeck(nn.Module):
    def __init__(self, config: GotOcr2VisionConfig) -> None:
        super().__init__()
        out = config.output_channels
        self.grid, self.dim = config.grid, config.hidden_size
        self.conv1 = Conv2d(config.hidden_size, out, 1, bias=False)
        self.layer_norm1 = ChannelsLayerNorm(out, 1e-6)
        self.conv2 = Conv2d(out, out, 3, padding=1, bias=False)
        self.layer_norm2 = ChannelsLayerNorm(out, 1e-6)

    def forward(self, op, x):
        """``x [b, g * g, dim]`` to ``[b, output_channels, g, g]``."""
        g, dim = self.grid, self.dim
        x = op.Reshape(x, op.Constant(value_ints=[-1, g, g, dim]))
        x = op.Transpose(x, perm=[0, 3, 1, 2])  # [b, dim, g, g]
        x = self.layer_norm1(op, self.conv1(op, x))
        return self.layer_norm2(op, self.conv2(op, x))


class GotOcr2VisionEncoder(nn.Module):
    """``pixel_values [b, c, size, size]`` to the neck's ``[b, output_channels, g, g]``."""

    def __init__(self, config: GotOcr2VisionConfig) -> None:
        super().__init__()
        g = config.grid
        self.patch_embed = GotOcr2PatchEmbeddings(config)
        self.pos_embed = nn.Parameter([1, g, g, config.hidden_size]) if config.use_abs_pos else None
        self.layers = nn.ModuleList(
            [
                GotOcr2VisionLayer(
                    config, 0 if i in config.global_attn_indexes else config.window_size
                )
                for i in range(config.num_hidden_layers)
            ]
        )
        self.neck = GotOcr2VisionNeck(config)
        self.dim = config.hidden_size

    def hidden_states(self, op, pixel_values) -> list:
        """transformers' ``hidden_states``: the embedded patches, then each layer's output,
        each ``[b, g * g, dim]``."""
        x = self.patch_embed(op, pixel_values)
        if self.pos_embed is not None:
            x = op.Add(x, self.pos_embed)
        states = [op.Reshape(x, op.Constant(value_ints=[0, -1, self.dim]))]  # [b, g * g, dim]
        for layer in self.layers:
            states.append(layer(op, states[-1]))
        return states

    def forward(self, op, pixel_values):
        return self.neck(op, self.hidden_states(op, pixel_values)[-1])


class GotOcr2MultiModalProjector(nn.Module):
    def __init__(self, channels: int, text_hidden: int) -> None:
        super().__init__()
        self.conv_upsampler1 = Conv2d(channels, 2 * channels, 3, stride=2, padding=1, bias=False)
        self.conv_upsampler2 = Conv2d(2 * channels, text_hidden, 3, stride=2, padding=1, bias=False)
        self.multimodal_projector = Linear(text_hidden, text_hidden, bias=True)
        self.text_hidden = text_hidden

    def forward(self, op, x):
        x = self.conv_upsampler2(op, self.conv_upsampler1(op, x))  # [b, text, g/4, g/4]
        x = op.Reshape(x, op.Constant(value_ints=[0, self.text_hidden, -1]))
        return self.multimodal_projector(op, op.Transpose(x, perm=[0, 2, 1]))


@dataclass
class GotOcr2Config(VisionLanguageConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # the tower is built here: got_ocr2_vision is no standalone type of the registry
        return dict(
            model_type=hf_config.model_type,
            vision=GotOcr2VisionConfig.from_hf(hf_config.vision_config),
            text=composed_config(cls.text_hf_config(hf_config)),
            image_token_id=int(first_of(hf_config, "image_token_id", "image_token_index")),
        )


class GotOcr2ForConditionalGeneration(VisionLanguageModel):
    """The SAM-style tower, the conv projector and the text decoder (Qwen2 on the hub)."""

    config_class = GotOcr2Config
    tower_class = GotOcr2VisionEncoder

    def __init__(self, config: GotOcr2Config) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = self.tower_class(config.vision)
        self.multi_modal_projector = GotOcr2MultiModalProjector(
            config.vision.output_channels, config.text.hidden_size
        )
        self.language_model = text_decoder(config.text)

    def image_features(self, op, pixel_values):
        features = self.multi_modal_projector(op, self.vision_tower(op, pixel_values))
        return flatten_images(op, features)  # [image_tokens, text_hidden]


MODEL_TYPES = {"got_ocr2": GotOcr2ForConditionalGeneration}
