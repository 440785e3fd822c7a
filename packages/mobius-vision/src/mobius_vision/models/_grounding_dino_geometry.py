"""Grounding DINO's geometry in ONNX ops: each level's valid share of the padded image, the
encoder's reference points, the query selection's proposals, and the logit that refines
the boxes (transformers' ``get_valid_ratio``, ``get_reference_points``,
``generate_encoder_output_proposals``, ``torch.special.logit``).

Masks are float ``[batch, h, w]`` (1 on the image, 0 on its padding), level shapes the
``(height, width)`` int64 tensors of :func:`~._deformable.map_shape`.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius_vision.models._detr import float_constant

#: ``torch.special.logit``'s clamp, as transformers refines the boxes with it.
LOGIT_EPS = 1e-5
#: The proposals' side per level (``0.05 * 2**level``) and the margin a valid one keeps.
PROPOSAL_SIDE, PROPOSAL_MARGIN = 0.05, 0.01


def valid_ratios(op, mask):
    """``[batch, 2]``: the share of a level's columns and rows on the image (``mask [b, h, w]``
    float, 1 on the image), as transformers' ``get_valid_ratio``."""
    rows = op.ReduceSum(op.Gather(mask, op.Constant(value_int=0), axis=2), [1], keepdims=0)
    columns = op.ReduceSum(op.Gather(mask, op.Constant(value_int=0), axis=1), [1], keepdims=0)
    height = op.CastLike(op.Shape(mask, start=1, end=2), mask)
    width = op.CastLike(op.Shape(mask, start=2, end=3), mask)
    return op.Concat(
        op.Unsqueeze(op.Div(columns, width), [-1]),
        op.Unsqueeze(op.Div(rows, height), [-1]),
        axis=-1,
    )


def pixel_grid(op, height, width, like):
    """``(x, y)`` ``[h*w]`` each: the column and row index of each pixel of a level, row by row."""
    rows = op.CastLike(op.Range(0, op.Squeeze(height), 1), like)
    columns = op.CastLike(op.Range(0, op.Squeeze(width), 1), like)
    grid = op.Concat(height, width, axis=0)
    x = op.Reshape(op.Expand(op.Unsqueeze(columns, [0]), grid), op.Constant(value_ints=[-1]))
    y = op.Reshape(op.Expand(op.Unsqueeze(rows, [1]), grid), op.Constant(value_ints=[-1]))
    return x, y


def encoder_reference_points(op, level_shapes, ratios, like):
    """``[batch, pixels, levels, 2]``: each pixel's centre over its level's image part,
    then scaled to every level's (transformers' ``get_reference_points``)."""
    half = float_constant(op, 0.5, like)
    points = []
    for level, (height, width) in enumerate(level_shapes):
        x, y = pixel_grid(op, height, width, like)
        ratio = op.Gather(ratios, op.Constant(value_int=level), axis=1)  # [batch, 2]
        scale_x = op.Mul(op.Slice(ratio, [0], [1], [1]), op.CastLike(width, like))  # [batch, 1]
        scale_y = op.Mul(op.Slice(ratio, [1], [2], [1]), op.CastLike(height, like))
        ref_x = op.Div(op.Unsqueeze(op.Add(x, half), [0]), scale_x)  # [batch, h*w]
        ref_y = op.Div(op.Unsqueeze(op.Add(y, half), [0]), scale_y)
        points.append(op.Concat(op.Unsqueeze(ref_x, [-1]), op.Unsqueeze(ref_y, [-1]), axis=-1))
    points = op.Concat(*points, axis=1)  # [batch, pixels, 2]
    return op.Mul(op.Unsqueeze(points, [2]), op.Unsqueeze(ratios, [1]))


def encoder_proposals(op, level_shapes, level_masks, like):
    """``(proposal logits [batch, pixels, 4], usable bool [batch, pixels, 1])``: per pixel
    its centre over the level's image part and a ``0.05 * 2**level`` box, in logit space;
    a padding pixel or a box not inside ``(0.01, 0.99)`` is unusable (its logits ``+inf``)."""
    half = float_constant(op, 0.5, like)
    proposals = []
    for level, ((height, width), mask) in enumerate(zip(level_shapes, level_masks, strict=True)):
        x, y = pixel_grid(op, height, width, like)
        rows = op.ReduceSum(op.Gather(mask, op.Constant(value_int=0), axis=2), [1], keepdims=1)
        columns = op.ReduceSum(op.Gather(mask, op.Constant(value_int=0), axis=1), [1], keepdims=1)
        centre_x = op.Div(op.Add(op.Unsqueeze(x, [0]), half), columns)  # [batch, h*w]
        centre_y = op.Div(op.Add(op.Unsqueeze(y, [0]), half), rows)
        side = op.Expand(float_constant(op, PROPOSAL_SIDE * 2.0**level, like), op.Shape(centre_x))
        boxes = [op.Unsqueeze(v, [-1]) for v in (centre_x, centre_y, side, side)]
        proposals.append(op.Concat(*boxes, axis=-1))
    proposals = op.Concat(*proposals, axis=1)
    low, high = (
        float_constant(op, PROPOSAL_MARGIN, like),
        float_constant(op, 1 - PROPOSAL_MARGIN, like),
    )
    inside = op.Cast(
        op.And(op.Greater(proposals, low), op.Less(proposals, high)), to=ir.DataType.INT64
    )
    inside = op.Cast(
        op.ReduceMin(inside, op.Constant(value_ints=[-1]), keepdims=1), to=ir.DataType.BOOL
    )
    real = op.Unsqueeze(
        op.Cast(op.Concat(*(flat_mask(op, m) for m in level_masks), axis=1), to=ir.DataType.BOOL),
        [-1],
    )
    usable = op.And(inside, real)
    one = float_constant(op, 1.0, like)
    logits = op.Log(op.Div(proposals, op.Sub(one, proposals)))
    return op.Where(usable, logits, float_constant(op, np.inf, like)), usable


def flat_mask(op, mask):
    """``[batch, h, w]`` -> ``[batch, h*w]``."""
    return op.Reshape(mask, op.Constant(value_ints=[0, -1]))


def logit(op, x, eps: float = LOGIT_EPS):
    """``torch.special.logit(x, eps)``: ``x`` clamped to ``[eps, 1 - eps]``, then ``log(x / (1 - x))``."""
    x = op.Clip(x, float_constant(op, eps, x), float_constant(op, 1 - eps, x))
    return op.Log(op.Div(x, op.Sub(float_constant(op, 1.0, x), x)))


def gather_rows(op, values, indices):
    """``values [batch, pixels, c]`` at ``indices [batch, queries]``: ``[batch, queries, c]``."""
    shape = op.Concat(op.Shape(indices), op.Shape(values, start=2), axis=0)
    return op.GatherElements(values, op.Expand(op.Unsqueeze(indices, [-1]), shape), axis=1)
