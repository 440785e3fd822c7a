"""PaliGemma: a SigLIP tower, one linear projector, and a prefix that attends both ways.

The tower's final states are projected by ``multi_modal_projector.linear`` into the
Gemma (PaliGemma 2: Gemma 2) decoder. The prompt — image tokens, then the text
prefix — is one block whose tokens see one another (transformers' ``token_type_ids``
0); generated tokens (type 1) attend causally. The decoder graph takes
``token_type_ids`` [batch, sequence] as the processor returns them; the single graph
treats its whole prompt as the prefix. On PaliGemma 2's sliding layers the whole
prefix stays visible (transformers ORs the prefix into the windowed mask). Positions count from 1, as PaliGemma's
``generate`` gives them: feed ``position_ids`` accordingly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, bidirectional_blocks
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._vl import VisionLanguageModel, flatten_images


@dataclass
class PaliGemmaConfig(VisionLanguageConfig):
    projection_dim: int = 2048
    text_head_applied = ("final_logit_softcapping",)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        projection_dim = hf_config.vision_config.projection_dim
        return dict(super().hf_fields(hf_config), projection_dim=projection_dim)

    @classmethod
    def text_hf_config(cls, hf_config: Any) -> Any:
        """PaliGemma marks its text config bidirectional, but hands the decoder its own
        causal-plus-prefix mask: the decoder is the causal one (see ``decode``)."""
        text = super().text_hf_config(hf_config)
        text.use_bidirectional_attention = False
        return text


class PaliGemmaMultiModalProjector(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = Linear(in_features, out_features, bias=True)

    def forward(self, op, x):
        return self.linear(op, x)


class PaliGemmaForConditionalGeneration(VisionLanguageModel):
    config_class = PaliGemmaConfig

    def make_projector(self, config: PaliGemmaConfig) -> nn.Module:
        return PaliGemmaMultiModalProjector(config.vision.hidden_size, config.projection_dim)

    def image_features(self, op, pixel_values):
        hidden, _ = self.vision_tower(op, pixel_values)  # [images, patches, vision_hidden]
        return flatten_images(op, self.multi_modal_projector(op, hidden))

    @property
    def ignored(self) -> tuple[str, ...]:
        # transformers reads last_hidden_state only
        return (*super().ignored, "vision_tower.head.*")

    def decoder_inputs(self) -> list[tuple]:
        return [("token_type_ids", ir.DataType.INT64, ["batch", "sequence"])]

    def decoder_inputs_from_ids(self, op, input_ids) -> list:
        return [op.Mul(input_ids, op.Constant(value_int=0))]  # the whole prompt is the prefix

    def decode(self, op, inputs_embeds, attention_mask, position_ids, past, token_type_ids):
        prefix = op.Equal(token_type_ids, op.Constant(value_int=0))
        blocks = op.Where(prefix, op.Constant(value_int=0), op.Constant(value_int=-1))
        with bidirectional_blocks(blocks, windowed=False):  # transformers' mask: OR(window, prefix)
            return super().decode(op, inputs_embeds, attention_mask, position_ids, past)


MODEL_TYPES = {"paligemma": PaliGemmaForConditionalGeneration}
