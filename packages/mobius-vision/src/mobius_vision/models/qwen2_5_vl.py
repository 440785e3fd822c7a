"""Qwen2.5-VL: Qwen2-VL with an RMS-normed, gated-MLP tower and window attention.

Blocks not in ``fullatt_block_indexes`` attend within windows of
``window_size // spatial_merge_size // patch_size`` merge blocks square (per image frame).
transformers permutes the patches window by window, attends over each window's run and
permutes back after the merger; every step but attention is per patch (the merger per
run of ``merge^2`` patches, which the permutation keeps together), so the same result
comes from the processor's order with a mask that keeps each patch in its window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import GatedMLP, RMSNorm
from mobius.errors import ConfigError
from mobius_vision.models.qwen2_vl import (
    PatchMerger,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLVisionBlock,
    Qwen2VLVisionConfig,
    Qwen2VLVisionTower,
    same_group,
)


@dataclass
class Qwen2_5_VLVisionConfig(Qwen2VLVisionConfig):
    intermediate_size: int = 3420
    window_size: int = 112
    fullatt_block_indexes: tuple[int, ...] = ()

    @classmethod
    def from_hf(cls, hf: Any) -> Qwen2_5_VLVisionConfig:
        # Qwen2-VL's names: the tower's width is hidden_size, the merger's out_hidden_size
        proxy = dict(vars(hf), embed_dim=hf.hidden_size, hidden_size=hf.out_hidden_size)
        proxy.update(mlp_ratio=0, num_heads=hf.num_heads, depth=hf.depth, model_type=hf.model_type)
        fields = vars(Qwen2VLVisionConfig.from_hf(_Attributes(proxy)))
        window = int(hf.window_size) // fields["spatial_merge_size"] // fields["patch_size"]
        if window < 1:
            raise ConfigError(f"window_size {hf.window_size}: under one merge block")
        return cls(
            **fields,
            intermediate_size=hf.intermediate_size,
            window_size=int(hf.window_size),
            fullatt_block_indexes=tuple(int(i) for i in hf.fullatt_block_indexes),
        )

    @property
    def window_blocks(self) -> int:
        """A window's side in merge blocks."""
        return self.window_size // self.spatial_merge_size // self.patch_size


class _Attributes:
    def __init__(self, values: dict) -> None:
        self.__dict__.update(values)


class Qwen2_5_VLVisionBlock(Qwen2VLVisionBlock):
    def make_norm(self, dim: int) -> nn.Module:
        return RMSNorm(dim, 1e-6)

    def make_mlp(self, config: Qwen2_5_VLVisionConfig) -> nn.Module:
        return GatedMLP(config.embed_dim, config.intermediate_size, config.hidden_act, bias=True)


class Qwen2_5_VLPatchMerger(PatchMerger):
    def make_norm(self, dim: int) -> nn.Module:
        return RMSNorm(dim, 1e-6)


class Qwen2_5_VLVisionTower(Qwen2VLVisionTower):
    """Qwen2-VL's tower with window attention outside ``fullatt_block_indexes``."""

    block_class = Qwen2_5_VLVisionBlock

    def make_merger(self, config: Qwen2_5_VLVisionConfig) -> nn.Module:
        return Qwen2_5_VLPatchMerger(
            config.hidden_size, config.embed_dim, config.spatial_merge_size
        )

    def block_masks(self, op, segment, row, col) -> list:
        side = op.Constant(value_int=self.config.window_blocks * self.config.spatial_merge_size)
        full = same_group(op, segment)
        window = same_group(op, segment, op.Div(row, side), op.Div(col, side))
        keep = self.config.fullatt_block_indexes
        return [full if i in keep else window for i in range(len(self.blocks))]


@dataclass
class Qwen2_5_VLConfig(Qwen2VLConfig):
    vision_config_class = Qwen2_5_VLVisionConfig


class Qwen2_5_VLForConditionalGeneration(Qwen2VLForConditionalGeneration):
    config_class = Qwen2_5_VLConfig
    tower_class = Qwen2_5_VLVisionTower


MODEL_TYPES = {"qwen2_5_vl": Qwen2_5_VLForConditionalGeneration}
