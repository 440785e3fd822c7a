"""MiniCPM-V 4.6: NaViT-packed image slices through a SigLIP-style tower, merged 2x2 into any
text decoder (Qwen3.5's hybrid one on the hub).

The tower (:mod:`._minicpm_vision`) merges each slice's 2x2 windows after layer
``insert_layer_id`` when ``downsample_mode`` is ``"16x"`` (``"4x"`` skips it and keeps
four times the tokens); then ``merger`` concatenates each slice's 2x2 blocks, row-major,
through ``pre_norm``, ``linear_1``, GELU and ``linear_2`` to the decoder's width. The
image features are every slice's tokens in the processor's order (an image's overview,
then its slices), one per image placeholder.

The vision graph takes what the processor gives: ``pixel_values [1, channels, patch,
patches * patch]`` (every slice's patches in one row; transformers reads the first row
only) and ``target_sizes [slices, 2]``, each slice's patch grid, as int64 (transformers'
processor gives int32; mobius' processor gives int64, as for every grid input).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig, composed_config
from mobius_vision.models._minicpm_vision import (
    KERNEL,
    MiniCPMVisionConfig,
    MiniCPMVisionTower,
    window_order,
)
from mobius_vision.models._vl import VisionLanguageModel, text_decoder

#: transformers' token reductions: the window merger and the merger (16x), or the merger (4x).
DOWNSAMPLE_MODES = ("16x", "4x")


@dataclass
class MiniCPMV4_6Config(VisionLanguageConfig):
    downsample_mode: str = "16x"

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        name = hf_config.model_type
        vision = MiniCPMVisionConfig.from_hf(hf_config.vision_config)
        # the top level's insert_layer_id wins, as transformers copies it down
        vision = dataclasses.replace(vision, insert_layer_id=int(hf_config.insert_layer_id))
        mode = hf_config.downsample_mode
        if mode not in DOWNSAMPLE_MODES:
            raise ConfigError(f"{name}: downsample_mode {mode!r} is not 16x or 4x")
        if mode == "16x" and not 0 <= vision.insert_layer_id < vision.num_hidden_layers:
            raise ConfigError(
                f"{name}: insert_layer_id {vision.insert_layer_id} is not a layer of the "
                f"{vision.num_hidden_layers}-layer tower (the 16x window merger follows it)"
            )
        if list(hf_config.merge_kernel_size) != [KERNEL, KERNEL] or hf_config.merger_times != 1:
            raise ConfigError(
                f"{name}: merge_kernel_size {hf_config.merge_kernel_size!r} and merger_times "
                f"{hf_config.merger_times!r}: the processor counts one 2x2 merge"
            )
        image_token = getattr(hf_config, "image_token_id", None)
        if isinstance(image_token, bool) or not isinstance(image_token, int):
            raise ConfigError(f"{name}: image_token_id {image_token!r} is not a token id")
        return dict(
            model_type=name,
            vision=vision,
            text=composed_config(cls.text_hf_config(hf_config)),
            image_token_id=image_token,
            downsample_mode=mode,
        )


class MiniCPMDownsampleMLP(nn.Module):
    """``linear_2(gelu(linear_1(pre_norm(x))))`` over a 2x2 block's four tokens concatenated."""

    def __init__(self, hidden: int, out: int) -> None:
        super().__init__()
        merged = hidden * KERNEL * KERNEL
        self.pre_norm = LayerNorm(merged, 1e-6)
        self.linear_1 = Linear(merged, merged, bias=True)
        self.act = get_activation("gelu")
        self.linear_2 = Linear(merged, out, bias=True)

    def forward(self, op, x):
        return self.linear_2(op, self.act(op, self.linear_1(op, self.pre_norm(op, x))))


class MiniCPMMerger(nn.Module):
    """``merger``: each slice's 2x2 blocks (:func:`window_order`) through ``mlp.0``."""

    def __init__(self, hidden: int, out: int) -> None:
        super().__init__()
        self.mlp = nn.ModuleList([MiniCPMDownsampleMLP(hidden, out)])
        self.width = hidden * KERNEL * KERNEL

    def forward(self, op, x, sizes):
        blocks = op.Gather(x, window_order(op, sizes), axis=0)  # [tokens, hidden]
        return self.mlp[0](op, op.Reshape(blocks, op.Constant(value_ints=[-1, self.width])))


class MiniCPMV4_6ForConditionalGeneration(VisionLanguageModel):
    """``vision_tower``, ``merger`` and ``language_model``."""

    config_class = MiniCPMV4_6Config
    renames = {
        "model.vision_tower.": "vision_tower.",
        "model.merger.": "merger.",
        "model.language_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def __init__(self, config: MiniCPMV4_6Config) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.use_window_merger = config.downsample_mode == "16x"
        self.vision_tower = MiniCPMVisionTower(config.vision, self.use_window_merger)
        self.merger = MiniCPMMerger(config.vision.hidden_size, config.text.hidden_size)
        self.language_model = self.make_decoder(config)

    def make_decoder(self, config: MiniCPMV4_6Config) -> nn.Module:
        """The causal LM mobius registers for the text config's type."""
        return text_decoder(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        vision = self.config.vision
        patch = vision.patch_size
        return [
            # one row of packed patches ("packs" is 1; no images: 0)
            ("pixel_values", dtype, ["packs", vision.num_channels, patch, "packed_width"]),
            ("target_sizes", ir.DataType.INT64, ["num_slices", 2]),
        ]

    def vision_modules(self) -> list[nn.Module]:
        return [self.vision_tower, self.merger]

    def image_features(self, op, pixel_values, target_sizes):
        first_pack = op.Slice(pixel_values, [0], [1], [0])  # transformers reads row 0 only
        x, sizes = self.vision_tower(op, first_pack, target_sizes)  # [1, tokens, hidden]
        return self.merger(op, op.Squeeze(x, [0]), sizes)  # [image_tokens, text_hidden]

    @property
    def ignored(self) -> tuple[str, ...]:
        unused = () if self.use_window_merger else ("vision_tower.vit_merger.*",)
        return (*super().ignored, *unused)


MODEL_TYPES = {"minicpmv4_6": MiniCPMV4_6ForConditionalGeneration}
