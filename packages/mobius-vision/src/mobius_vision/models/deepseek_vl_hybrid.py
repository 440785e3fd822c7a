"""DeepSeek-VL hybrid (``deepseek_vl_hybrid``): DeepSeek-VL's SigLIP path beside a SAM tower
reading the same image at a higher resolution, over a Llama decoder.

Each image comes twice: ``pixel_values`` (the SigLIP size) and ``high_res_pixel_values``
(the SAM size). The SAM tower (GOT-OCR 2.0's ViTDet, :mod:`.got_ocr2`) gives two maps:
its own neck over the last layer, and a second neck over the output of its first global
attention layer; each is resized (bilinear) to four times the SigLIP patch grid and
halved twice by stride-2 convs (``high_res_vision_proj``), and the second, scaled by the
learned ``high_res_vision_alpha``, is added to the first. Per SigLIP patch, the aligner
projects the SAM cell and the SigLIP token each to half the text width, concatenates
them (SAM first), and applies ``gelu -> proj``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d, Linear, get_activation, module_scope
from mobius.errors import ConfigError
from mobius_vision.models._vl import flatten_images
from mobius_vision.models.deepseek_vl import DeepseekVLConfig, DeepseekVLForConditionalGeneration
from mobius_vision.models.got_ocr2 import (
    GotOcr2VisionConfig,
    GotOcr2VisionEncoder,
    GotOcr2VisionNeck,
)


@dataclass
class DeepseekVLHybridConfig(DeepseekVLConfig):
    #: The SAM tower's config (``high_res_vision_config``).
    high_res: GotOcr2VisionConfig | None = None

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        high_res = GotOcr2VisionConfig.from_hf(hf_config.high_res_vision_config)
        if not high_res.global_attn_indexes:
            raise ConfigError("deepseek_vl_hybrid: the SAM tower has no global attention layer")
        first = high_res.global_attn_indexes[0]
        if not 0 <= first < high_res.num_hidden_layers:
            raise ConfigError(
                f"deepseek_vl_hybrid: global_attn_indexes[0] {first} is not a layer of the "
                f"{high_res.num_hidden_layers}-layer SAM tower"
            )
        vision, text = fields["vision"], fields["text"]
        if vision.image_size[0] != vision.image_size[1]:
            raise ConfigError("deepseek_vl_hybrid: the SigLIP image is not square")
        if text.hidden_size % 2:
            raise ConfigError("deepseek_vl_hybrid: the text hidden_size is odd (halves per tower)")
        return dict(fields, high_res=high_res)

    @property
    def grid(self) -> int:
        """SigLIP patches per side: the high-resolution map is brought to this grid."""
        return self.vision.image_size[0] // self.vision.patch_size


class DeepseekVLSamVisionProj(nn.Module):
    """``[b, c, g, g]`` resized to ``4 * size`` (bilinear), then two 3x3 stride-2 convs: ``[b, 4c, size, size]``."""

    def __init__(self, channels: int, size: int) -> None:
        super().__init__()
        self.conv1 = Conv2d(channels, 2 * channels, 3, stride=2, padding=1, bias=False)
        self.conv2 = Conv2d(2 * channels, 4 * channels, 3, stride=2, padding=1, bias=False)
        self.size = size

    def forward(self, op, x):
        side = 4 * self.size
        x = op.Resize(
            x,
            None,
            None,
            op.Constant(value_ints=[side, side]),
            axes=[2, 3],
            mode="linear",
            # interpolate(..., align_corners=False) as torch computes it
            coordinate_transformation_mode="pytorch_half_pixel",
        )
        return self.conv2(op, self.conv1(op, x))


class DeepseekVLHybridHighRes(nn.Module):
    """The SAM path: ``vision_model``, the second ``neck``, ``proj`` and ``alpha``."""

    def __init__(self, config: DeepseekVLHybridConfig) -> None:
        super().__init__()
        sam = config.high_res
        self.vision_model = GotOcr2VisionEncoder(sam)
        self.neck = GotOcr2VisionNeck(sam)
        self.proj = DeepseekVLSamVisionProj(sam.output_channels, config.grid)
        self.alpha = nn.Parameter([1])
        self.global_layer = sam.global_attn_indexes[0] + 1  # hidden_states[0] is the embedding

    def forward(self, op, pixel_values):
        """``[images, grid * grid, 4 * output_channels]``."""
        tower = self.vision_model
        with module_scope(op, tower):
            states = tower.hidden_states(op, pixel_values)
            last = tower.neck(op, states[-1])
        x = self.proj(op, last)
        extra = self.proj(op, self.neck(op, states[self.global_layer]))
        x = op.Add(x, op.Mul(extra, self.alpha))  # [b, 4c, grid, grid]
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, -1]))
        return op.Transpose(x, perm=[0, 2, 1])


class DeepseekVLHybridAligner(nn.Module):
    """``proj(gelu([high_res_vision_proj(sam), vision_proj(siglip)]))``."""

    def __init__(self, siglip: int, sam: int, text: int) -> None:
        super().__init__()
        self.vision_proj = Linear(siglip, text // 2, bias=True)
        self.high_res_vision_proj = Linear(sam, text // 2, bias=True)
        self.act = get_activation("gelu")  # nn.GELU(): the exact erf form
        self.proj = Linear(text, text, bias=True)

    def forward(self, op, siglip, sam):
        both = op.Concat(self.high_res_vision_proj(op, sam), self.vision_proj(op, siglip), axis=-1)
        return self.proj(op, self.act(op, both))


class DeepseekVLHybridForConditionalGeneration(DeepseekVLForConditionalGeneration):
    """The SigLIP tower, :class:`DeepseekVLHybridHighRes`, the aligner and the Llama decoder."""

    config_class = DeepseekVLHybridConfig

    def __init__(self, config: DeepseekVLHybridConfig) -> None:
        super().__init__(config)
        self.high_res_vision = DeepseekVLHybridHighRes(config)

    def make_projector(self, config: DeepseekVLHybridConfig) -> nn.Module:
        sam = 4 * config.high_res.output_channels
        return DeepseekVLHybridAligner(config.vision.hidden_size, sam, config.text.hidden_size)

    def vision_inputs(self, dtype) -> list[tuple]:
        height, width = self.config.high_res.image_size
        channels = self.config.high_res.num_channels
        high_res = ("high_res_pixel_values", dtype, ["num_images", channels, height, width])
        return [*super().vision_inputs(dtype), high_res]

    def vision_modules(self) -> list[nn.Module]:
        return [*super().vision_modules(), self.high_res_vision]

    def image_features(self, op, pixel_values, high_res_pixel_values):
        siglip = self.tower_output(op, pixel_values)
        sam = self.high_res_vision(op, high_res_pixel_values)
        return flatten_images(op, self.multi_modal_projector(op, siglip, sam))

    renames = {
        "model.high_res_vision_model.vision_encoder.": "high_res_vision.vision_model.",
        "model.high_res_vision_neck.": "high_res_vision.neck.",
        "model.high_res_vision_proj.": "high_res_vision.proj.",
        "model.high_res_vision_alpha": "high_res_vision.alpha",
        **DeepseekVLForConditionalGeneration.renames,
    }


MODEL_TYPES = {"deepseek_vl_hybrid": DeepseekVLHybridForConditionalGeneration}
