"""Segment Anything (``sam``): a ViTDet image encoder, a prompt encoder and a two-way mask decoder.

The image encoder is transformers' ``SamVisionEncoder``, the tower GOT-OCR 2.0 reuses
(:class:`~mobius_vision.models.got_ocr2.GotOcr2VisionEncoder`: windowed and global
attention with decomposed relative positions, then a conv neck): ``pixel_values`` to
``image_embeddings [b, C, grid, grid]``. The prompt encoder and mask decoder
(:mod:`._sam_decoder`) turn the embeddings and the prompts into masks. Built as the
``mask-generation`` contract (:mod:`mobius_vision.tasks.mask_generation`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir

from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.models._sam_decoder import (
    SamDecoderConfig,
    SamMaskDecoder,
    SamPositionalEmbedding,
    SamPromptEncoder,
    image_grid_coordinates,
    normalised_coordinates,
)
from mobius_vision.models.got_ocr2 import GotOcr2VisionConfig, GotOcr2VisionEncoder


@dataclass
class SamConfig:
    """The image encoder's config and the prompt decoder's; ``image_size`` is the encoder's square."""

    model_type: str
    vision: GotOcr2VisionConfig
    decoder: SamDecoderConfig

    decoder_config_class: ClassVar[type] = SamDecoderConfig

    @classmethod
    def from_hf(cls, hf_config: Any) -> SamConfig:
        vision = GotOcr2VisionConfig.from_hf(hf_config.vision_config)
        decoder = cls.decoder_config_class.from_hf(hf_config)
        if vision.output_channels != decoder.hidden_size or vision.grid != decoder.embedding_size:
            raise ConfigError(
                f"{hf_config.model_type}: the image embedding ({vision.output_channels} "
                f"channels, {vision.grid}x{vision.grid}) is not what the mask decoder reads "
                f"({decoder.hidden_size} channels, {decoder.embedding_size}x"
                f"{decoder.embedding_size})"
            )
        return cls(model_type=hf_config.model_type, vision=vision, decoder=decoder)

    @property
    def image_size(self) -> tuple[int, int]:
        return self.vision.image_size

    @property
    def num_channels(self) -> int:
        return self.vision.num_channels


class SamModel(Model):
    """``vision_encoder``, ``shared_image_embedding``, ``prompt_encoder`` and ``mask_decoder``.

    Hooks of the ``mask-generation`` task: :meth:`image_outputs` (what the image encoder
    graph returns, and the prompt decoder graph takes), :meth:`encode_image`,
    :meth:`decode_prompts` and :meth:`prompt_outputs` (what it returns).
    """

    config_class = SamConfig
    task = "mask-generation"
    #: The tied copy of the Fourier matrix transformers may save beside the shared one.
    _TIED_COPY: ClassVar[str] = "prompt_encoder.shared_embedding.positional_embedding"
    _SHARED: ClassVar[str] = "shared_image_embedding.positional_embedding"

    vision_encoder_class: ClassVar[type] = GotOcr2VisionEncoder
    mask_decoder_class: ClassVar[type] = SamMaskDecoder

    def __init__(self, config: SamConfig) -> None:
        super().__init__()
        self.config = config
        self.vision_encoder = self.vision_encoder_class(config.vision)
        self.shared_image_embedding = SamPositionalEmbedding(config.decoder.num_pos_feats)
        self.prompt_encoder = SamPromptEncoder(config.decoder)
        self.mask_decoder = self.mask_decoder_class(config.decoder)

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        """One Fourier matrix: the shared one, or the prompt encoder's tied copy when alone."""
        weights = dict(weights)
        copy = weights.pop(self._TIED_COPY, None)
        if self._SHARED not in weights and copy is not None:
            weights[self._SHARED] = copy
        return weights

    def image_outputs(self) -> dict[str, list]:
        """The image encoder graph's outputs and shapes (the prompt decoder's image inputs)."""
        v = self.config.vision
        return {"image_embeddings": ["batch", v.output_channels, v.grid, v.grid]}

    @property
    def num_masks(self) -> int:
        """Masks per prompt (``multimask_output=True``, fixed at build)."""
        return self.config.decoder.num_multimask_outputs

    @property
    def mask_size(self) -> int:
        return 4 * self.config.decoder.embedding_size

    def prompt_outputs(self) -> dict[str, list]:
        """The prompt decoder graph's outputs and shapes."""
        masks, size = self.num_masks, self.mask_size
        return {
            "pred_masks": ["batch", "point_batch", masks, size, size],
            "iou_scores": ["batch", "point_batch", masks],
        }

    def encode_image(self, op, pixel_values) -> dict:
        return {"image_embeddings": self.vision_encoder(op, pixel_values)}

    def image_extras(self, image: dict) -> tuple:
        """The image outputs the mask decoder reads beside ``image_embeddings`` (SAM: none)."""
        return ()

    def image_positional_embedding(self, op):
        """``[1, hw, C]``: the Fourier encoding of every cell centre of the embedding grid."""
        grid = image_grid_coordinates(self.config.decoder.embedding_size)
        table = self.shared_image_embedding.positional_embedding
        return op.Unsqueeze(
            self.shared_image_embedding(
                op, op.Constant(value=ir.tensor(grid.astype(table.dtype.numpy())))
            ),
            [0],
        )

    def encode_coordinates(self, op, coordinates):
        """``[..., 2]`` pixel coordinates through the Fourier matrix the prompts use (SAM's
        is the shared one)."""
        size = self.config.decoder.input_image_size
        return self.shared_image_embedding(op, normalised_coordinates(op, coordinates, size))

    def decode_prompts(self, op, image: dict, prompt: dict) -> dict:
        """``pred_masks [b, pb, num_masks, 4h, 4w]`` and ``iou_scores [b, pb, num_masks]``:
        transformers' ``multimask_output=True`` (every mask token but the first).

        ``prompt``: the graph's prompt inputs by name (``input_points``, ``input_labels``,
        ``input_boxes``, ``input_masks``, ``has_input_mask``).
        """
        points, boxes = prompt["input_points"], prompt["input_boxes"]
        corners = op.Reshape(boxes, op.Constant(value_ints=[0, -1, 2, 2]))
        sparse, dense = self.prompt_encoder(
            op,
            points,
            self.encode_coordinates(op, points),
            prompt["input_labels"],
            boxes,
            self.encode_coordinates(op, corners),
            prompt["input_masks"],
            prompt["has_input_mask"],
        )
        outputs = self.mask_decoder(
            op,
            image["image_embeddings"],
            self.image_positional_embedding(op),
            dense,
            sparse,
            *self.image_extras(image),
        )
        return self.multimask(op, *outputs)

    def multimask(self, op, masks, iou) -> dict:
        """Every mask token's output but the first (the single-mask one)."""
        first, last = op.Constant(value_ints=[1]), op.Constant(value_ints=[np.iinfo(np.int64).max])
        axis = op.Constant(value_ints=[2])
        return {
            "pred_masks": op.Slice(masks, first, last, axis),
            "iou_scores": op.Slice(iou, first, last, axis),
        }


MODEL_TYPES = {"sam": SamModel}
