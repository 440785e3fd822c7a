"""SegFormer: a Mix Transformer encoder (PVTv2's stages) and an all-MLP decode head.

The module tree follows ``SegformerForSemanticSegmentation`` checkpoints
(``segformer.encoder.patch_embeddings.0.proj``, ``...block.0.0.attention.self.sr``,
``...block.0.0.mlp.dwconv.dwconv``, ``segformer.encoder.layer_norm.0``,
``decode_head.linear_c.0.proj``, ``decode_head.linear_fuse``). The encoder is PVTv2's
without linear attention: overlapping patch embeddings, spatial-reduction attention
(its conv named ``sr``) and a Mix-FFN, every LayerNorm at torch's default eps (transformers
ignores ``layer_norm_eps`` here). The decode head projects each stage's map to
``decoder_hidden_size`` channels, upsamples them bilinearly to stage 0's grid, fuses the
concatenation (last stage first) with a 1x1 conv, BatchNorm and ReLU, and classifies each
position: ``logits`` ``[batch, num_labels, H/4, W/4]`` (the semantic-segmentation contract).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius.config import first_of
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.config import VisionConfig, image_size_pair
from mobius_vision.models._conv import BATCHNORM_COUNTERS, BatchNorm2d, Conv2d
from mobius_vision.models._pyramid import grid_to_tokens, tokens_to_grid
from mobius_vision.models.mobilevit import resize
from mobius_vision.models.pvt import PvtDense, PvtEfficientSelfAttention, PvtLayer
from mobius_vision.models.pvt_v2 import (
    PvtV2Config,
    PvtV2ConvFeedForwardNetwork,
    PvtV2OverlapPatchEmbeddings,
)

#: ``torch.nn.LayerNorm``'s default eps: every SegFormer LayerNorm uses it.
TORCH_LAYER_NORM_EPS = 1e-5
#: SegformerImageProcessor's default size, for a config that names none.
DEFAULT_IMAGE_SIZE = 512


@dataclass
class SegformerConfig(PvtV2Config):
    decoder_hidden_size: int = 256
    layer_norm_eps: float = TORCH_LAYER_NORM_EPS

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        n, t = hf_config.num_encoder_blocks, hf_config.model_type
        architectures = getattr(hf_config, "architectures", None) or []
        if architectures and not any(a.endswith("ForSemanticSegmentation") for a in architectures):
            raise ConfigError(
                f"{t}: a {architectures[0]} checkpoint has no decode head; mobius builds "
                "SegformerForSemanticSegmentation only"
            )
        if not all(isinstance(p, int) for p in hf_config.patch_sizes[:n]):
            raise ConfigError(f"{t}: only square (int) patch_sizes are supported")
        stages = dict(
            hidden_sizes=hf_config.hidden_sizes,
            depths=hf_config.depths,
            patch_sizes=hf_config.patch_sizes,
            strides=hf_config.strides,
            sr_ratios=hf_config.sr_ratios,
            num_attention_heads=hf_config.num_attention_heads,
            mlp_ratios=hf_config.mlp_ratios,
        )
        result = dict(
            VisionConfig.hf_fields(hf_config),
            image_size=image_size_pair(first_of(hf_config, "image_size", default=None) or 512),
            **{name: tuple(values[:n]) for name, values in stages.items()},
            hidden_act=hf_config.hidden_act,
            decoder_hidden_size=int(hf_config.decoder_hidden_size),
        )
        config = cls(**result)
        config.check()
        if not getattr(hf_config, "reshape_last_stage", True):
            h, w = config.grids()[-1]
            if h != w:  # transformers' head reshapes a flat last stage as a square
                raise ConfigError(f"{t}: reshape_last_stage=False needs a square last grid")
        return result


class SegformerEfficientSelfAttention(PvtEfficientSelfAttention):
    reduction_name = "sr"


class SegformerAttention(nn.Module):
    """PVT's attention block (``self``, ``output``) over SegFormer's ``sr_ratios``."""

    def __init__(self, config: SegformerConfig, i: int, grid) -> None:
        super().__init__()
        dim, ratio = config.hidden_sizes[i], config.sr_ratios[i]
        kernel = ratio if ratio > 1 else None
        heads = config.num_attention_heads[i]
        self.self = SegformerEfficientSelfAttention(config, dim, heads, kernel, grid)
        self.output = PvtDense(dim)

    def forward(self, op, x):
        return self.output(op, self.self(op, x))


class SegformerLayer(PvtLayer):
    attention_class = SegformerAttention
    mlp_class = PvtV2ConvFeedForwardNetwork


class SegformerEncoder(nn.Module):
    """Every stage's map ``[batch, C_i, h_i, w_i]``, in order."""

    def __init__(self, config: SegformerConfig) -> None:
        super().__init__()
        n, eps = len(config.depths), config.layer_norm_eps
        self.grids, self.hidden_sizes = config.grids(), config.hidden_sizes
        self.patch_embeddings = nn.ModuleList(
            [PvtV2OverlapPatchEmbeddings(config, i) for i in range(n)]
        )
        self.block = nn.ModuleList(
            [
                nn.ModuleList([SegformerLayer(config, i, self.grids[i]) for _ in range(depth)])
                for i, depth in enumerate(config.depths)
            ]
        )
        self.layer_norm = nn.ModuleList([LayerNorm(d, eps) for d in config.hidden_sizes])

    def forward(self, op, x):
        maps = []
        for i, (embeddings, layers, norm) in enumerate(
            zip(self.patch_embeddings, self.block, self.layer_norm, strict=True)
        ):
            x = embeddings(op, x)  # [batch, tokens, C]
            for layer in layers:
                x = layer(op, x)
            x = tokens_to_grid(op, norm(op, x), self.hidden_sizes[i], *self.grids[i])
            maps.append(x)
        return maps


class SegformerModel(nn.Module):
    def __init__(self, config: SegformerConfig) -> None:
        super().__init__()
        self.encoder = SegformerEncoder(config)

    def forward(self, op, pixel_values):
        return self.encoder(op, pixel_values)


class SegformerMLP(nn.Module):
    """A per-position linear projection of a ``[batch, C, h, w]`` map to the decoder width."""

    def __init__(self, in_dim: int, out_dim: int, grid) -> None:
        super().__init__()
        self.proj = Linear(in_dim, out_dim, bias=True)
        self.out_dim, self.grid = out_dim, grid

    def forward(self, op, x):
        return tokens_to_grid(op, self.proj(op, grid_to_tokens(op, x)), self.out_dim, *self.grid)


class SegformerDecodeHead(nn.Module):
    def __init__(self, config: SegformerConfig) -> None:
        super().__init__()
        d, grids = config.decoder_hidden_size, config.grids()
        self.linear_c = nn.ModuleList(
            [SegformerMLP(c, d, g) for c, g in zip(config.hidden_sizes, grids, strict=True)]
        )
        self.linear_fuse = Conv2d(d * len(grids), d, 1, bias=False)
        self.batch_norm = BatchNorm2d(d)
        self.classifier = Conv2d(d, config.num_labels, 1)
        self.size = grids[0]

    def forward(self, op, maps):
        projected = []
        for i, (x, mlp) in enumerate(zip(maps, self.linear_c, strict=True)):
            x = mlp(op, x)
            projected.append(x if i == 0 else resize(op, x, self.size))
        x = self.linear_fuse(op, op.Concat(*projected[::-1], axis=1))
        x = op.Relu(self.batch_norm(op, x))
        return self.classifier(op, x)


class SegformerForSemanticSegmentation(Model):
    """``pixel_values`` -> ``logits`` ``[batch, num_labels, h, w]`` at stage 0's grid."""

    config_class = SegformerConfig
    task = "semantic-segmentation"

    def __init__(self, config: SegformerConfig) -> None:
        super().__init__()
        self.config = config
        self.segformer = SegformerModel(config)
        self.decode_head = SegformerDecodeHead(config)

    ignored = (BATCHNORM_COUNTERS,)

    def output_shapes(self) -> dict[str, list]:
        return {"logits": ["batch", self.config.num_labels, *self.config.grids()[0]]}

    def forward(self, op, pixel_values):
        return {"logits": self.decode_head(op, self.segformer(op, pixel_values))}


MODEL_TYPES = {"segformer": SegformerForSemanticSegmentation}
