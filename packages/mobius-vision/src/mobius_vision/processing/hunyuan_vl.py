"""HunYuan-VL (HunyuanOCR) images: Qwen-VL's resize, patches in row order, multi-axis positions.

What ``HunYuanVLImageProcessor`` (its PIL backend) and ``HunYuanVLProcessor`` do, without
torch, where they differ from :class:`~.qwen_vl.QwenVLProcessor`: the default pixel
bounds are 512^2 and 2048^2 with 16-pixel patches, one frame each; the resize is always
bicubic (transformers ignores the checkpoint's ``resample``, as the reference code did);
``pixel_values`` rows come in row order (the tower's merger convolves each image's grid);
an image of ``rows x columns`` merge blocks takes ``rows * (columns + 1) + 2``
placeholders (a newline per row, begin and end); the prompt is tokenized without special
tokens. :func:`hunyuan_positions` is the model's ``get_rope_index``.
"""

from __future__ import annotations

import itertools

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import BICUBIC, integer, resize
from mobius_vision.processing.qwen_vl import QwenVLProcessor, flatten_patches


def image_grid_positions(rows: int, columns: int) -> np.ndarray:
    """``[2, rows * (columns + 1)]``: (column, row) of each merged token, newlines included."""
    row, column = np.meshgrid(np.arange(rows), np.arange(columns + 1), indexing="ij")
    return np.stack([column.ravel(), row.ravel()])


def hunyuan_positions(
    mm_token_type_ids: np.ndarray,
    attention_mask: np.ndarray,
    image_grid_thw: np.ndarray | None,
    merge: int,
    axes: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Positions ``[axes, batch, sequence]`` and deltas ``[batch, 1]`` as HunYuan-VL's
    ``get_rope_index`` computes them (padding positions stay 0).

    Every axis counts the sequence; an image's grid tokens (its span less begin and end)
    take, on the last three axes, their column, their row and the image's ordinal in the
    batch (counted across rows, as transformers counts it).
    """
    batch, length = mm_token_type_ids.shape
    positions = np.zeros((axes, batch, length), dtype=np.int64)
    deltas = np.zeros((batch, 1), dtype=np.int64)
    grids = iter([] if image_grid_thw is None else image_grid_thw.tolist())
    ordinal = 0
    for b in range(batch):
        real = attention_mask[b].astype(bool)
        types = mm_token_type_ids[b][real].tolist()
        row_positions = np.broadcast_to(np.arange(len(types)), (axes, len(types))).copy()
        start = 0
        for kind, run in itertools.groupby(types):
            span = len(list(run))
            if kind == 1:
                try:
                    _, grid_h, grid_w = next(grids)
                except StopIteration:
                    raise MobiusError("the prompt holds more images than image_grid_thw") from None
                grid = image_grid_positions(grid_h // merge, grid_w // merge)
                tokens = grid.shape[1]
                if span not in (tokens, tokens + 2):
                    raise MobiusError(
                        f"an image span of {span} tokens does not fit its {grid_h}x{grid_w} "
                        f"patch grid ({tokens} or {tokens + 2})"
                    )
                first = start + (span - tokens) // 2
                row_positions[axes - 3 : axes - 1, first : first + tokens] = grid
                row_positions[axes - 1, first : first + tokens] = ordinal
                ordinal += 1
            start += span
        positions[:, b, real] = row_positions
        if types:
            deltas[b, 0] = row_positions.max() + 1 - len(types)
    return positions, deltas


class HunYuanVLProcessor(QwenVLProcessor):
    """Qwen-VL's processor with HunYuan-VL's bounds, row-order patches and placeholder count."""

    default_patch_size, default_merge_size, default_temporal_patch_size = 16, 2, 1
    default_min_pixels, default_max_pixels = 512 * 512, 2048 * 2048
    default_image_token = "<image>"
    add_special_tokens = False  # HunYuanVLProcessor tokenizes without them

    def with_placeholders(self, prompt: str, count: int) -> str:
        """``prompt`` after one ``<image_start><image><image_end>`` per image, as HunYuan-VL's
        chat template writes them, when it holds no placeholder."""
        if count == 0 or self.image_token in prompt:
            return prompt
        start = self.token_text("image_start_token", "<image_start>")
        end = self.token_text("image_end_token", "<image_end>")
        return f"{start}{self.image_token}{end}" * count + prompt

    def patches(self, image: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """One ``[3, h, w]`` uint8 image as ``[patches, 3 * patch * patch]`` rows in row order."""
        patch, merge = self.patch_size, self.merge_size
        if self.image.do_resize:
            image = resize(image, self.resized_size(*image.shape[-2:]), BICUBIC)
        height, width = image.shape[-2:]
        if height % (patch * merge) or width % (patch * merge):
            raise MobiusError(
                f"an image of {height}x{width} pixels is not made of {patch * merge}-pixel "
                "merge blocks (turn do_resize on)"
            )
        rows = flatten_patches(self.image.finish(image), patch, 1, self.temporal_patch_size)
        return rows, [1, height // patch, width // patch]

    def placeholders(self, grid: list[int]) -> int:
        """How many placeholders an image of patch grid ``grid`` fills."""
        rows, columns = grid[1] // self.merge_size, grid[2] // self.merge_size
        extra = 2 if self.processor_setting("cat_extra_token", True) is not False else 0
        return rows * (columns + 1) + extra

    def tokenize(self, text: str) -> dict[str, np.ndarray]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = np.asarray([ids], dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        self.count_placeholders(text, images)
        patches, grids = [], []
        for image in self.arrays(images):
            rows, grid = self.patches(image)
            patches.append(rows)
            grids.append(grid)
        text = self.expand(text, [self.image_token * self.placeholders(g) for g in grids])
        inputs = self.tokenize(text)
        inputs["mm_token_type_ids"] = (inputs["input_ids"] == self.image_token_id).astype(np.int64)
        if patches:
            inputs["pixel_values"] = np.concatenate(patches).astype(np.float32, copy=False)
            inputs["image_grid_thw"] = np.asarray(grids, dtype=np.int64)
        return inputs

    @property
    def position_axes(self) -> int:
        """The rotary's axes: ``mrope_section``'s (``xdrope_section``'s in hub configs) length."""
        text = self.config_value("text_config", {})
        text = text if isinstance(text, dict) else {}
        for holder in (text, self.settings.config):
            for key in ("rope_parameters", "rope_scaling"):
                rope = holder.get(key)
                if not isinstance(rope, dict):
                    continue
                section = rope.get("mrope_section", rope.get("xdrope_section"))
                if isinstance(section, list) and 3 <= len(section) <= 8:
                    return len(section)
        return 4

    def rope_positions(self, inputs: dict[str, np.ndarray]):
        """The model's ``get_rope_index``: ``(positions [axes, 1, seq], deltas [1, 1])``."""
        name = "spatial_merge_size"
        configured = {name: self.config_value(name, section="vision_config")}
        merge = integer(configured, name, self.merge_size, 1, 64)
        types = inputs.get("mm_token_type_ids")
        if types is None:
            types = (inputs["input_ids"] == self.image_token_id).astype(np.int64)
        mask = inputs.get("attention_mask")
        mask = np.ones_like(inputs["input_ids"]) if mask is None else mask
        grids = inputs.get("image_grid_thw")
        return hunyuan_positions(types, mask, grids, merge, self.position_axes)


__all__ = ["HunYuanVLProcessor", "hunyuan_positions"]
