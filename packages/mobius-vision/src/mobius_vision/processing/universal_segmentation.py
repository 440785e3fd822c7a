"""Panoptic and instance post-processing of universal-segmentation outputs, without torch.

One image's ``class_queries_logits`` ``[queries, labels + 1]`` and ``masks_queries_logits``
``[queries, h, w]`` become a map of segment ids (0: no segment) and the segments' labels
and scores, as OneFormer's image processor (and MaskFormer's, for panoptic) computes them:

- :func:`panoptic_segments` (``post_process_panoptic_segmentation``): each query's best
  class (softmax) kept above ``threshold``, "no object" dropped; its mask's sigmoid;
- :func:`instance_segments` (OneFormer's ``post_process_instance_segmentation``, the demo
  form): the ``queries`` best (query, class) pairs above ``threshold``, each with its query's
  mask logits (not their sigmoid, as transformers passes them).

Both then resize the masks to the image (torchvision's bilinear with antialiasing,
:func:`resize_antialiased`), weigh them by the scores, give each pixel its best query and
keep a query's segment where it holds more than ``overlap_threshold`` of the pixels its own
mask covers at ``mask_threshold`` (:func:`compute_segments`). Segments are numbered from 1
in the order the queries are taken: the panoptic's in query order; the instance's best score
first (transformers takes them in ``torch.topk(sorted=False)`` order, which it leaves
unspecified, so its ids may be numbered otherwise).

A task-conditioned package (OneFormer) also takes the task's token ids,
:func:`task_inputs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mobius.classification import softmax

#: transformers' image-segmentation pipeline's thresholds (score, mask, overlap).
PIPELINE_THRESHOLDS = (0.9, 0.5, 0.5)


@dataclass(frozen=True)
class Segment:
    """One segment of the map: its id (the map's pixel value), class id and score."""

    id: int
    label_id: int
    score: float


def _axis_weights(size_in: int, size_out: int) -> np.ndarray:
    """``[size_out, size_in]`` weights of torchvision's antialiased bilinear resize on one
    axis (plain bilinear, ``align_corners=False``, when enlarging)."""
    scale = size_in / size_out
    support = max(scale, 1.0)
    inverse = 1.0 / scale if scale >= 1.0 else 1.0
    weights = np.zeros((size_out, size_in))
    for i in range(size_out):
        center = scale * (i + 0.5)
        first = max(int(center - support + 0.5), 0)
        last = min(int(center + support + 0.5), size_in)
        taps = (np.arange(first, last) - center + 0.5) * inverse
        row = np.maximum(1.0 - np.abs(taps), 0.0)
        total = row.sum()
        weights[i, first:last] = row / total if total else row
    return weights


def resize_antialiased(maps: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``[n, h, w]`` float maps resized to ``size`` as ``torchvision.transforms.functional.
    resize`` (bilinear, ``antialias=True``) resizes float tensors."""
    rows = _axis_weights(maps.shape[1], size[0]).astype(np.float32)
    cols = _axis_weights(maps.shape[2], size[1]).astype(np.float32)
    return np.einsum("yh,nhw,xw->nyx", rows, maps.astype(np.float32), cols)


def compute_segments(
    masks: np.ndarray,
    scores: np.ndarray,
    labels: np.ndarray,
    size: tuple[int, int],
    mask_threshold: float,
    overlap_threshold: float,
) -> tuple[np.ndarray, list[Segment]]:
    """transformers' ``compute_segments`` (nothing fused): the ``[height, width]`` map of
    segment ids (0 where no segment holds the pixel) and the segments."""
    segmentation = np.zeros(size, np.int64)
    segments: list[Segment] = []
    if len(labels) == 0:  # no query passed the threshold (transformers' map is then all -1)
        return segmentation, segments
    masks = resize_antialiased(masks, size) * scores.astype(np.float32)[:, None, None]
    owner = masks.argmax(axis=0)
    for k in range(len(labels)):
        mask_k = owner == k
        area, original = int(mask_k.sum()), int((masks[k] >= mask_threshold).sum())
        if area > 0 and original > 0 and area / original > overlap_threshold:
            segment = Segment(len(segments) + 1, int(labels[k]), round(float(scores[k]), 6))
            segmentation[mask_k] = segment.id
            segments.append(segment)
    return segmentation, segments


def panoptic_segments(
    class_logits: np.ndarray,
    mask_logits: np.ndarray,
    size: tuple[int, int],
    thresholds: tuple[float, float, float] = PIPELINE_THRESHOLDS,
) -> tuple[np.ndarray, list[Segment]]:
    """``post_process_panoptic_segmentation`` of one image, resized to ``size``."""
    threshold, mask_threshold, overlap_threshold = thresholds
    probabilities = softmax(class_logits.astype(np.float32))
    scores, labels = probabilities.max(axis=-1), probabilities.argmax(axis=-1)
    keep = (labels != class_logits.shape[-1] - 1) & (scores > threshold)
    masks = 1.0 / (1.0 + np.exp(-mask_logits[keep].astype(np.float32)))
    return compute_segments(
        masks, scores[keep], labels[keep], size, mask_threshold, overlap_threshold
    )


def instance_segments(
    class_logits: np.ndarray,
    mask_logits: np.ndarray,
    size: tuple[int, int],
    thresholds: tuple[float, float, float] = PIPELINE_THRESHOLDS,
) -> tuple[np.ndarray, list[Segment]]:
    """OneFormer's ``post_process_instance_segmentation`` (``task_type="instance"``, demo
    form) of one image, resized to ``size``."""
    threshold, mask_threshold, overlap_threshold = thresholds
    queries, num_labels = class_logits.shape[0], class_logits.shape[1] - 1
    scores = softmax(class_logits.astype(np.float32))[:, :-1].reshape(-1)
    best = np.argsort(-scores, kind="stable")[:queries]
    best = best[scores[best] > threshold]
    return compute_segments(
        mask_logits[best // num_labels].astype(np.float32),
        scores[best],
        best % num_labels,
        size,
        mask_threshold,
        overlap_threshold,
    )


#: Each task's post-processing, by ``--task`` name (semantic is the class map's).
SEGMENTS = {"panoptic": panoptic_segments, "instance": instance_segments}


#: The tasks a task-conditioned package (OneFormer) takes, its processor's default last.
TASKS = ("semantic", "instance", "panoptic")


def task_inputs(tokenizer, task: str, length: int) -> np.ndarray:
    """OneFormerProcessor's ``task_inputs`` of one image: the ids of "the task is TASK",
    padded or truncated to ``length``, times the attention mask (padding is 0, whatever the
    tokenizer's pad id); int64 ``[1, length]``."""
    tokens = tokenizer(
        [f"the task is {task}"], padding="max_length", max_length=length, truncation=True
    )
    ids = np.asarray(tokens["input_ids"], np.int64)
    return ids * np.asarray(tokens["attention_mask"], np.int64)
