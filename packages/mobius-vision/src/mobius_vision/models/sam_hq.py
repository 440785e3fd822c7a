"""SAM-HQ (``sam_hq``): SAM with a high-quality output token fed by an early ViT feature.

The delta from :mod:`.sam`: the image encoder also returns ``intermediate_embeddings``,
the output of the first global-attention layer (``[b, grid, grid, hidden]``, the one
transformers' decoder reads of its list), and the mask decoder has an ``hq_token`` whose
hypernetwork (``hq_mask_mlp``) weighs a refined feature map: the upscaled image
embedding through ``mask_conv*`` plus the image's own high-quality features (the
embedding through ``encoder_conv*`` and the early ViT feature through
``compress_vit_conv*``). As transformers' defaults (fixed at build): the three multimask
outputs, sorted by predicted IoU (best first), each plus the HQ mask
(``hq_token_only=False``).

transformers 5.24 differs from the original SAM-HQ code (SysCV/sam-hq,
``segment_anything/modeling/mask_decoder_hq.py``), and so, for real checkpoints, from
the masks the SAM-HQ authors trained and published; parity is with transformers:

- the upscaled image: the original upscales the two-way transformer's *output* image
  (``hs, src = self.transformer(...)``; ``src.transpose(1, 2).view(b, c, h, w)``), as
  SAM does; transformers' ``SamHQMaskDecoder`` drops that output (``point_embedding,
  iou_token_out = self.transformer(...)``, then overwrites ``iou_token_out``) and
  upscales the transformer's *input* (the embedding plus the dense prompt, repeated per
  prompt) after ``transpose(2, 3)`` of its ``[n, C, h, w]`` form, which swaps rows and
  columns. Both the SAM masks and the HQ mask (``mask_conv*`` reads that upscaling) are
  affected; the HQ features (``encoder_conv*`` of the embedding without the dense
  prompt, plus ``compress_vit_conv*`` of the first global block's output) and the
  tokens agree;
- ``multimask_output=True``: the original keeps only the SAM mask of the best IoU (plus
  the HQ mask, one mask and one score per prompt); transformers keeps all three, sorted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mobius.components import Conv2d, Embedding
from mobius.errors import ConfigError
from mobius_vision.models._conv import ChannelsLayerNorm
from mobius_vision.models._sam_decoder import (
    ConvTranspose2x2,
    SamDecoderConfig,
    SamFeedForward,
    SamMaskDecoder,
    per_prompt,
    table_rows,
)
from mobius_vision.models.got_ocr2 import GotOcr2VisionEncoder
from mobius_vision.models.sam import SamConfig, SamModel


@dataclass
class SamHQDecoderConfig(SamDecoderConfig):
    vit_dim: int  # the ViT feature's width (the image encoder's hidden_size)

    @classmethod
    def from_hf(cls, hf: Any) -> SamHQDecoderConfig:
        base = SamDecoderConfig.from_hf(hf)
        vit_dim = int(hf.mask_decoder_config.vit_dim)
        if vit_dim != int(hf.vision_config.hidden_size):
            raise ConfigError(
                f"{hf.model_type}: mask_decoder_config.vit_dim {vit_dim} is not the image "
                f"encoder's hidden_size {hf.vision_config.hidden_size}"
            )
        return cls(**vars(base), vit_dim=vit_dim)


@dataclass
class SamHQConfig(SamConfig):
    decoder_config_class = SamHQDecoderConfig


class SamHQVisionEncoder(GotOcr2VisionEncoder):
    """SAM's encoder, also returning the first global-attention layer's output."""

    def forward(self, op, pixel_values):
        """``(image_embeddings [b, C, g, g], intermediate_embeddings [b, g, g, hidden])``."""
        states = self.hidden_states(op, pixel_values)
        first_global = next(i for i, layer in enumerate(self.layers) if not layer.window)
        grid = op.Constant(value_ints=[-1, self.layers[0].grid, self.layers[0].grid, self.dim])
        return self.neck(op, states[-1]), op.Reshape(states[first_global + 1], grid)


class SamHQMaskDecoder(SamMaskDecoder):
    """SAM's decoder plus the HQ token, its MLP and the feature maps it weighs."""

    def __init__(self, config: SamHQDecoderConfig) -> None:
        super().__init__(config)
        c = config.hidden_size
        self.hq_token = Embedding(1, c)
        self.hq_mask_mlp = SamFeedForward(c, c, c // 8, 3)
        self.compress_vit_conv1 = ConvTranspose2x2(config.vit_dim, c)
        self.compress_vit_norm = ChannelsLayerNorm(c, 1e-6)
        self.compress_vit_conv2 = ConvTranspose2x2(c, c // 8)
        self.encoder_conv1 = ConvTranspose2x2(c, c // 4)
        self.encoder_norm = ChannelsLayerNorm(c // 4, 1e-6)
        self.encoder_conv2 = ConvTranspose2x2(c // 4, c // 8)
        self.mask_conv1 = Conv2d(c // 8, c // 4, 3, padding=1)
        self.mask_norm = ChannelsLayerNorm(c // 4, 1e-6)
        self.mask_conv2 = Conv2d(c // 4, c // 8, 3, padding=1)

    def output_tokens(self, op, sparse):
        """SAM's output tokens, then the HQ token, then the prompt's."""
        tokens = op.Concat(
            table_rows(op, self.iou_token),
            table_rows(op, self.mask_tokens, self.num_mask_tokens),
            table_rows(op, self.hq_token),
            axis=0,
        )
        shape = op.Concat(op.Shape(sparse, start=0, end=2), op.Shape(tokens), axis=0)
        return op.Concat(op.Expand(tokens, shape), sparse, axis=2)

    def hq_features(self, op, image_embeddings, vit_features):
        """``[b, C / 8, 4h, 4w]``: the embedding (no dense prompt) and the early ViT feature."""
        embedded = self.encoder_conv1(op, image_embeddings)
        embedded = self.encoder_conv2(op, op.Gelu(self.encoder_norm(op, embedded)))
        vit = self.compress_vit_conv1(op, op.Transpose(vit_features, perm=[0, 3, 1, 2]))
        vit = self.compress_vit_conv2(op, op.Gelu(self.compress_vit_norm(op, vit)))
        return op.Add(embedded, vit)

    def predict(self, op, queries, keys, image, prompt_shape, image_embeddings, vit_features):
        """SAM's masks, then the HQ mask (``[n, masks + 1, 16 hw]``); SAM's IoU estimates.

        As transformers 5 computes it, the masks weigh the upscaled *input* image of the
        two-way transformer (embedding plus dense prompt), its rows and columns swapped,
        where SAM (and the SAM-HQ paper's code) upscales the transformer's output image:
        transformers' ``SamHQMaskDecoder`` keeps its input ``image_embeddings`` and
        reshapes its ``transpose(2, 3)``. Parity is with transformers.
        """
        iou = self.iou_prediction_head(op, self.token(op, queries, 0))
        swapped = op.Transpose(image, perm=[0, 1, 3, 2])
        upscaled = self.upscaled(op, swapped)  # [n, C / 8, 16 hw]
        s, eighth = self.size, self.hidden_size // 8
        grid = op.Reshape(upscaled, op.Constant(value_ints=[-1, eighth, 4 * s, 4 * s]))
        refined = self.mask_conv1(op, grid)
        refined = self.mask_conv2(op, op.Gelu(self.mask_norm(op, refined)))
        refined = op.Add(
            refined,
            per_prompt(op, self.hq_features(op, image_embeddings, vit_features), prompt_shape),
        )
        refined = op.Reshape(refined, op.Constant(value_ints=[0, eighth, -1]))
        hq_weights = op.Unsqueeze(
            self.hq_mask_mlp(op, self.token(op, queries, self.num_mask_tokens + 1)), [1]
        )
        sam_masks = op.MatMul(self.hypernetwork(op, queries), upscaled)
        return op.Concat(sam_masks, op.MatMul(hq_weights, refined), axis=1), iou


class SamHQModel(SamModel):
    """SAM with the HQ decoder; the image encoder adds ``intermediate_embeddings``."""

    config_class = SamHQConfig
    vision_encoder_class = SamHQVisionEncoder
    mask_decoder_class = SamHQMaskDecoder

    def image_outputs(self) -> dict[str, list]:
        v = self.config.vision
        return {
            **super().image_outputs(),
            "intermediate_embeddings": ["batch", v.grid, v.grid, v.hidden_size],
        }

    def encode_image(self, op, pixel_values) -> dict:
        embeddings, intermediate = self.vision_encoder(op, pixel_values)
        return {"image_embeddings": embeddings, "intermediate_embeddings": intermediate}

    def image_extras(self, image: dict) -> tuple:
        return (image["intermediate_embeddings"],)

    def multimask(self, op, masks, iou) -> dict:
        """SAM's multimask outputs sorted by IoU, best first, each plus the HQ mask."""
        count = self.num_masks  # SAM's mask tokens but the first
        first, last = op.Constant(value_ints=[1]), op.Constant(value_ints=[count + 1])
        axis = op.Constant(value_ints=[2])
        scores, order = op.TopK(
            op.Slice(iou, first, last, axis), op.Constant(value_ints=[count]), axis=2, _outputs=2
        )
        sam_masks = op.Slice(masks, first, last, axis)
        order = op.Expand(op.Unsqueeze(order, [3, 4]), op.Shape(sam_masks))
        sam_masks = op.GatherElements(sam_masks, order, axis=2)
        hq_mask = op.Slice(masks, last, op.Constant(value_ints=[np.iinfo(np.int64).max]), axis)
        return {"pred_masks": op.Add(sam_masks, hq_mask), "iou_scores": scores}


MODEL_TYPES = {"sam_hq": SamHQModel}
