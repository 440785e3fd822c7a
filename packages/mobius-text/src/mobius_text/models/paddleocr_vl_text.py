"""The text decoder of PaddleOCR-VL: ERNIE 4.5 with Qwen2-VL's multimodal rotary (M-RoPE).

transformers' ``PaddleOCRTextModel`` is ERNIE 4.5's decoder (``use_bias`` on q, k, v, o
and the MLP) whose attention rotates the two halves of each head (not ERNIE's adjacent
pairs) by angles taken from ``position_ids [3, batch, sequence]`` per ``mrope_section``,
as :mod:`.qwen2_vl_text` does.

Built only as the decoder of ``paddleocr_vl``, which reads 3-D positions: transformers
has no causal-LM class for ``paddleocr_vl_text``, so it is not registered on its own (its
parity is the VL model's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mobius.errors import ConfigError
from mobius_text.models.ernie4_5 import Ernie4_5Config
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel
from mobius_text.models.qwen2_vl_text import MRopeRotary


@dataclass
class PaddleOCRTextConfig(Ernie4_5Config):
    mrope_section: list[int] = field(default_factory=lambda: [16, 24, 24])

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        rope = fields["rope"]
        if rope.rope_type != "default" or rope.partial_rotary_factor != 1.0:
            raise ConfigError(f"{hf_config.model_type}: M-RoPE over {rope.rope_type!r} rope")
        params = dict(getattr(hf_config, "rope_parameters", None) or {})
        section = params.get("mrope_section", [16, 24, 24])
        if not isinstance(section, (list, tuple)) or not all(isinstance(s, int) for s in section):
            raise ConfigError(
                f"{hf_config.model_type}: mrope_section {section!r} is not a list of ints"
            )
        if sum(section) != fields["head_dim"] // 2:
            raise ConfigError(
                f"{hf_config.model_type}: mrope_section {list(section)} does not cover "
                f"head_dim/2 = {fields['head_dim'] // 2} channels"
            )
        return dict(fields, mrope_section=list(section))


class PaddleOCRTextModel(LlamaModel):
    """Llama's layers with every ``use_bias``, rotated by M-RoPE."""

    def __init__(self, config: PaddleOCRTextConfig) -> None:
        super().__init__(config)
        self.rotary_emb = MRopeRotary(config.rope.theta, config.head_dim, config.mrope_section)


class PaddleOCRTextForCausalLM(LlamaForCausalLM):
    """ERNIE 4.5 over 3-D positions; built by ``paddleocr_vl`` (see the module docstring)."""

    config_class = PaddleOCRTextConfig
    model_class = PaddleOCRTextModel


MODEL_TYPES: dict = {}  # paddleocr_vl_text: part of paddleocr_vl only
