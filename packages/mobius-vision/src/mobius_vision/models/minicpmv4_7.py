"""MiniCPM-V 4.7: MiniCPM-V 4.6's tower and merger over Qwen3.5's decoder with canvas M-RoPE.

The image path is 4.6's (:mod:`.minicpmv4_6`). The decoder is mobius-vision's ``qwen3_5``
decoder (:class:`~.qwen3_5.Qwen3_5VLTextForCausalLM`): ``position_ids [3, batch,
sequence]`` rotate by the interleaved M-RoPE sections. The positions are the model's
"canvas" ones (``get_rope_index``): each image is laid out on a canvas of its slices'
merged grids, the overview stretched over it, the markers around the crops
(``image_start_id``, ``slice_start_id``...) pinned to its corners. The processor computes
them (:mod:`mobius_vision.processing.minicpmv4_7`); decode steps add the prompt's delta.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
from mobius_vision.models.minicpmv4_6 import MiniCPMV4_6Config, MiniCPMV4_6ForConditionalGeneration
from mobius_vision.models.qwen3_5 import Qwen3_5VLTextConfig, Qwen3_5VLTextForCausalLM

#: The config's marker ids the canvas positions are anchored on.
CANVAS_MARKERS = ("image_start_id", "image_end_id", "slice_start_id", "slice_end_id", "newline_id")


@dataclass
class MiniCPMV4_7Config(MiniCPMV4_6Config):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        text = cls.text_hf_config(hf_config)
        if text.model_type != "qwen3_5_text":
            raise ConfigError(
                f"{hf_config.model_type}: canvas M-RoPE over a {text.model_type!r} decoder "
                "(mobius builds it over qwen3_5_text)"
            )
        for name in CANVAS_MARKERS:  # the processor reads them; refuse a config without them
            value = getattr(hf_config, name, None)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{hf_config.model_type}: {name} {value!r} is not a token id")
        return dict(fields, text=Qwen3_5VLTextConfig.from_hf(text))


class MiniCPMV4_7ForConditionalGeneration(MiniCPMV4_6ForConditionalGeneration):
    """4.6's composition, the decoder rotating by canvas M-RoPE positions."""

    config_class = MiniCPMV4_7Config

    def make_decoder(self, config: MiniCPMV4_7Config) -> nn.Module:
        return Qwen3_5VLTextForCausalLM(config.text)

    def position_ids_shape(self) -> list:
        return [3, "batch", "sequence"]


MODEL_TYPES = {"minicpmv4_7": MiniCPMV4_7ForConditionalGeneration}
