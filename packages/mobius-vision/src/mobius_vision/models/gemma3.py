"""Gemma 3 (multimodal): a SigLIP tower, an average-pool projector, and image tokens that attend
both ways.

The tower's final states (after ``post_layernorm``; its pooling head is unused) are laid
back on their patch grid, average-pooled to ``mm_tokens_per_image`` tokens, normalised by
Gemma's offset RMSNorm and multiplied by ``mm_input_projection_weight``. In the text
decoder each run of image tokens is a block whose tokens see one another (transformers'
``token_type_ids`` mask): the decoder graph takes ``token_type_ids`` [batch, sequence]
(1 on image tokens) as the processor returns them; the single graph reads them off the
ids. On decode steps they change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import bidirectional_blocks
from mobius.errors import ConfigError
from mobius_text.models.gemma import GemmaRMSNorm
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._vl import VisionLanguageModel, flatten_images


@dataclass
class Gemma3Config(VisionLanguageConfig):
    mm_tokens_per_image: int = 256
    text_head_applied = ("final_logit_softcapping",)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = dict(
            super().hf_fields(hf_config), mm_tokens_per_image=hf_config.mm_tokens_per_image
        )
        vision = fields["vision"]
        side = int(fields["mm_tokens_per_image"] ** 0.5)
        patches = vision.image_size[0] // vision.patch_size
        if side * side != fields["mm_tokens_per_image"] or patches % side:
            raise ConfigError(
                f"gemma3: mm_tokens_per_image {fields['mm_tokens_per_image']} is not a square "
                f"whose side divides the {patches}-patch grid"
            )
        return fields


class Gemma3MultiModalProjector(nn.Module):
    def __init__(self, vision_hidden: int, text_hidden: int, eps: float, patches: int, side: int):
        super().__init__()
        self.mm_input_projection_weight = nn.Parameter([vision_hidden, text_hidden])
        self.mm_soft_emb_norm = GemmaRMSNorm(vision_hidden, eps)
        self.patches, self.kernel = patches, patches // side

    def forward(self, op, x):
        grid = op.Transpose(x, perm=[0, 2, 1])  # [images, hidden, patches^2]
        p, k = self.patches, self.kernel
        grid = op.Reshape(grid, op.Constant(value_ints=[0, 0, p, p]))  # [images, hidden, p, p]
        pooled = op.AveragePool(grid, kernel_shape=[k, k], strides=[k, k])  # [images, hidden, s, s]
        tokens = op.Transpose(
            op.Reshape(pooled, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1]
        )
        return op.MatMul(self.mm_soft_emb_norm(op, tokens), self.mm_input_projection_weight)


class Gemma3ForConditionalGeneration(VisionLanguageModel):
    config_class = Gemma3Config

    def make_projector(self, config: Gemma3Config) -> nn.Module:
        vision = config.vision
        return Gemma3MultiModalProjector(
            vision.hidden_size,
            config.text.hidden_size,
            vision.layer_norm_eps,
            vision.image_size[0] // vision.patch_size,
            int(config.mm_tokens_per_image**0.5),
        )

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
        is_image = op.Equal(input_ids, op.Constant(value_int=self.config.image_token_id))
        return [op.Cast(is_image, to=ir.DataType.INT64)]

    def decode(self, op, inputs_embeds, attention_mask, position_ids, past, token_type_ids):
        with bidirectional_blocks(image_blocks(op, token_type_ids)):
            return super().decode(op, inputs_embeds, attention_mask, position_ids, past)


def image_blocks(op, token_type_ids):
    """``[batch, sequence]``: each run of image tokens (type 1) numbered from 0, else -1."""
    image = op.Cast(op.Equal(token_type_ids, op.Constant(value_int=1)), to=ir.DataType.INT64)
    first = op.Slice(image, [0], [1], [1])  # [batch, 1]
    before = op.Concat(op.Mul(first, 0), op.Slice(image, [0], [-1], [1]), axis=1)  # previous flag
    starts = op.Cast(op.Greater(image, before), to=ir.DataType.INT64)  # a run begins
    numbers = op.Sub(op.CumSum(starts, op.Constant(value_int=1)), 1)
    return op.Where(op.Cast(image, to=ir.DataType.BOOL), numbers, op.Constant(value_int=-1))


MODEL_TYPES = {"gemma3": Gemma3ForConditionalGeneration}
