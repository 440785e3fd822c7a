"""DeepSeek-VL: a SigLIP tower's ``last_hidden_state``, a two-layer GELU aligner, a Llama decoder.

Every patch token of ``last_hidden_state`` (after ``post_layernorm``) is one image
token, mapped by the aligner ``linear1 -> gelu (exact) -> linear2`` to the text
width. The tower's pooling ``head`` is computed by transformers but never read.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Linear, get_activation, module_scope
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._vl import VisionLanguageModel, flatten_images


@dataclass
class DeepseekVLConfig(VisionLanguageConfig):
    pass


class DeepseekVLAligner(nn.Module):
    """``linear1 -> gelu -> linear2`` (``nn.GELU()``: the exact erf form)."""

    def __init__(self, in_features: int, hidden: int) -> None:
        super().__init__()
        self.linear1 = Linear(in_features, hidden, bias=True)
        self.activation = get_activation("gelu")
        self.linear2 = Linear(hidden, hidden, bias=True)

    def forward(self, op, x):
        return self.linear2(op, self.activation(op, self.linear1(op, x)))


class DeepseekVLForConditionalGeneration(VisionLanguageModel):
    """The SigLIP tower, :class:`DeepseekVLAligner` and the Llama (or other) decoder."""

    config_class = DeepseekVLConfig

    def make_projector(self, config: DeepseekVLConfig) -> nn.Module:
        return DeepseekVLAligner(config.vision.hidden_size, config.text.hidden_size)

    def tower_output(self, op, pixel_values):
        """The tower's ``last_hidden_state`` (after ``post_layernorm``), ``[images, patches, hidden]``."""
        tower = self.vision_tower
        with module_scope(op, tower):
            return tower.post_layernorm(op, tower.hidden_states(op, pixel_values)[-1])

    def image_features(self, op, pixel_values):
        x = self.multi_modal_projector(op, self.tower_output(op, pixel_values))
        return flatten_images(op, x)  # [images * patches, text_hidden]

    renames = {
        "model.vision_model.vision_model.": "vision_tower.",  # a nested SiglipVisionModel
        "model.vision_model.": "vision_tower.",
        "model.aligner.": "multi_modal_projector.",
        **VisionLanguageModel.renames,
    }

    @property
    def ignored(self) -> tuple[str, ...]:
        # pooler_output is replaced by the aligner's output
        return (*super().ignored, "vision_tower.head.*")


MODEL_TYPES = {"deepseek_vl": DeepseekVLForConditionalGeneration}
