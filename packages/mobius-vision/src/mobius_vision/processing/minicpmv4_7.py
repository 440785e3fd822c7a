"""MiniCPM-V 4.7's images: 4.6's (:mod:`.minicpm`), with the modality of each token
(``mm_token_type_ids``) and the model's canvas M-RoPE positions.

Canvas positions (transformers' ``MiniCPMV4_7Model.get_rope_index``, one image at a
time): text counts on; an image's tokens sit on a canvas whose origin is the running
position ``o``. The canvas is the slices' merged grids (rows x columns of the first
slice's size), or the overview's own grid without slices. The overview's tokens take
``(o, o + round(linspace(0, canvas_h - 1, h))[i], o + round(linspace(0, canvas_w - 1,
w))[j])``, stretched over the canvas; a slice's tokens ``(o, o + top + i, o + left + j)``.
The markers are pinned: ``<image>`` just before the canvas' top-left corner, ``</image>``
at its far corner, each ``<slice>`` / ``</slice>`` at its slice's corners, a newline at
the right edge of the row it ends; every other token of the image takes ``o``. Text
resumes at ``o + max(canvas_h, canvas_w) + 1``. Images separated by markers only share
one run; this processor writes text (the image id) between images.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing.minicpm import MiniCPMProcessor

#: The config.json fields naming the markers the canvas is pinned to.
MARKERS = ("slice_start_id", "slice_end_id", "image_start_id", "image_end_id", "newline_id")


def torch_linspace(end: int, steps: int) -> np.ndarray:
    """``torch.linspace(0, end, steps)`` in float32 as PyTorch computes it on the CPU: from
    the start for the first half, back from the end for the rest."""
    if steps == 1:
        return np.zeros(1, np.float32)
    step = np.float32(end) / np.float32(steps - 1)
    index = np.arange(steps)
    front = np.float32(0) + step * index.astype(np.float32)
    back = np.float32(end) - step * (steps - 1 - index).astype(np.float32)
    return np.where(index < steps // 2, front, back).astype(np.float32)


def crops(types: list[int]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of image tokens."""
    runs, start = [], None
    for i, kind in enumerate([*types, 0]):
        if kind and start is None:
            start = i
        elif not kind and start is not None:
            runs.append((start, i))
            start = None
    return runs


def visual_groups(ids: list[int], types: list[int], markers: dict[str, int]):
    """The images of one sequence as transformers groups them: ``(start, end, frames)`` per
    run of images that only markers separate (``start`` the marker opening it, ``end`` one
    past the markers closing it), each frame ``(thumbnail, slices, end)``: its overview's
    crop, its slices' crops and one past the markers closing it."""
    values = set(markers.values())
    groups, previous_end = [], 0
    for crop in crops(types):
        if groups and ids[crop[0] - 1] == markers["slice_start_id"]:
            groups[-1][1][-1][1].append(crop)
        else:
            frame = [crop, []]
            gap = ids[previous_end : crop[0] - 1]
            if groups and all(t in values for t in gap):
                groups[-1][1].append(frame)
            else:
                groups.append((crop[0] - 1, [frame]))
        previous_end = crop[1]
    result = []
    for start, frames in groups:
        closed = []
        for thumbnail, slices in frames:
            end = slices[-1][1] if slices else thumbnail[1]
            while end < len(ids) and ids[end] in values:
                end += 1
            closed.append((thumbnail, slices, end))
        result.append((start, closed[-1][2], closed))
    return result


def slice_columns(slices: list[tuple[int, int]]) -> tuple[int, int]:
    """``(rows, columns)`` of the slices: a gap wider than ``</slice><slice>`` ends a row."""
    columns = len(slices)
    for i in range(len(slices) - 1):
        if slices[i + 1][0] - slices[i][1] > 2:
            columns = i + 1
            break
    rows = len(slices) // columns
    return (rows, columns) if rows * columns == len(slices) else (1, len(slices))


def canvas_positions(ids, types, sizes, merge: int, markers: dict[str, int]) -> np.ndarray:
    """``[3, sequence]`` canvas M-RoPE positions of one unpadded sequence (module docstring);
    ``sizes`` are the crops' patch grids in order."""
    grids = iter(sizes)
    positions = np.zeros((3, len(ids)), np.int64)
    current, cursor = 0, 0

    def count_on(start: int, stop: int) -> None:  # plain positions from ``current``
        positions[:, start:stop] = current + np.arange(stop - start)

    for group_start, group_end, frames in visual_groups(ids, types, markers):
        count_on(cursor, group_start)
        current += group_start - cursor
        cursor = group_start
        for (thumb_start, thumb_end), slices, end in frames:
            frame_start = thumb_start - 1
            if frame_start > cursor:  # tokens between frames, then one step more
                count_on(cursor, frame_start)
                current += frame_start - cursor + 1
            end, origin = min(end, group_end), current
            thumb = next(grids)
            canvas_h, canvas_w = thumb[0] // merge, thumb[1] // merge
            rows = columns = slice_h = slice_w = 0
            if slices:
                rows, columns = slice_columns(slices)
                first = next(grids)
                slice_h, slice_w = first[0] // merge, first[1] // merge
                canvas_h, canvas_w = rows * slice_h, columns * slice_w
            positions[:, frame_start:end] = origin
            positions[1:, frame_start] = max(origin - 1, 0)
            if thumb_end < end:
                positions[1:, thumb_end] = origin + np.array([canvas_h, canvas_w])
            h, w = thumb[0] // merge, thumb[1] // merge
            hs = np.round(torch_linspace(canvas_h - 1, h)).astype(np.int64)
            ws = np.round(torch_linspace(canvas_w - 1, w)).astype(np.int64)
            positions[1, thumb_start:thumb_end] = origin + np.repeat(hs, w)
            positions[2, thumb_start:thumb_end] = origin + np.tile(ws, h)
            for i, (start, stop) in enumerate(slices):
                top, left = (i // columns) * slice_h, (i % columns) * slice_w
                grid = first if i == 0 else next(grids)
                h, w = grid[0] // merge, grid[1] // merge
                if start - 1 >= frame_start:
                    positions[1:, start - 1] = origin + np.array([top, left])
                if stop < end:
                    positions[1:, stop] = origin + np.array([top + h - 1, left + w - 1])
                positions[1, start:stop] = origin + top + np.repeat(np.arange(h), w)
                positions[2, start:stop] = origin + left + np.tile(np.arange(w), h)
            for i in range(len(slices) - 1):  # a row's newline, past its right edge
                gap_start, gap_end = slices[i][1], slices[i + 1][0]
                if gap_end - gap_start > 2:
                    edge = np.array([(i // columns + 1) * slice_h - 1, columns * slice_w])
                    positions[1:, gap_start + 1 : gap_end - 1] = (origin + edge)[:, None]
            current = origin + max(canvas_h, canvas_w) + 1
            cursor = end
        count_on(cursor, group_end)
        current += group_end - cursor
        cursor = group_end
    count_on(cursor, len(ids))
    return positions


class MiniCPMV4_7Processor(MiniCPMProcessor):
    """MiniCPMV4_7Processor: 4.6's inputs plus ``mm_token_type_ids``, and canvas positions."""

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        inputs = super().__call__(text, images)
        image_token = self.token_id(self.image_token)
        inputs["mm_token_type_ids"] = (inputs["input_ids"] == image_token).astype(np.int64)
        return inputs

    def markers(self) -> dict[str, int]:
        """The marker ids config.json names (each checked to be a token id)."""
        found = {}
        for name in MARKERS:
            value = self.config_value(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise MobiusError(f"config.json: {name} {value!r} is not a token id")
            found[name] = value
        return found

    def rope_positions(self, inputs: dict[str, np.ndarray]):
        """``(positions [3, 1, sequence], deltas [1, 1])``; None for a prompt without images."""
        sizes = inputs.get("target_sizes")
        if sizes is None:
            return None
        merge = 2 if self.downsample_mode == "4x" else 4
        ids = inputs["input_ids"][0].tolist()
        types = inputs["mm_token_type_ids"][0].tolist()
        positions = canvas_positions(ids, types, sizes.tolist(), merge, self.markers())
        delta = positions.max() + 1 - len(ids)
        return positions[:, None, :], np.array([[delta]], np.int64)
