"""Multi-scale deformable attention (Deformable DETR, RT-DETR, D-FINE) in standard ONNX ops.

Each query reads, per head, a few points of each feature level at fractional positions
and sums them with softmaxed weights. transformers computes it in PyTorch
(``multi_scale_deformable_attention``) with ``grid_sample`` (bilinear, ``align_corners``
false, zeros outside the map); here each level is one ``GridSample`` with the same
settings, so no custom op is needed.

Layouts (as transformers passes them):

- ``value`` [batch, sequence, heads * head_dim]: every level's pixels flattened row by
  row, level after level;
- ``level_shapes``: per level, ``(height, width)`` as int64 tensors of shape [1] (they
  follow the image size, so they are graph values, not constants);
- ``sampling_locations`` [batch, queries, heads, levels, points, 2]: ``(x, y)`` in [0, 1]
  of each level's map;
- ``attention_weights`` [batch, queries, heads, levels, points].

The result is ``[batch, queries, heads * head_dim]``.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components import Linear


def multi_scale_deformable_attention(
    op, value, level_shapes, sampling_locations, attention_weights, num_heads: int, head_dim: int
):
    """The weighted sum of each query's bilinear samples of every level (layouts in the module
    docstring)."""
    num_levels = len(level_shapes)
    sizes = op.Concat(*(op.Mul(height, width) for height, width in level_shapes), axis=0)
    levels = op.Split(value, sizes, axis=1, _outputs=num_levels) if num_levels > 1 else [value]
    # grid_sample reads (x, y) in [-1, 1]
    grids = op.Sub(op.Mul(sampling_locations, op.CastLike(2.0, value)), op.CastLike(1.0, value))
    # [batch, queries, heads, levels, points, 2] -> [batch, heads, queries, levels, points, 2]
    grids = op.Transpose(grids, perm=[0, 2, 1, 3, 4, 5])
    sampled = []
    for level, (height, width) in enumerate(level_shapes):
        # [batch, h*w, heads*dim] -> [batch, heads*dim, h*w] -> [batch*heads, dim, h, w]
        pixels = op.Transpose(levels[level], perm=[0, 2, 1])
        pixels = op.Reshape(
            pixels, op.Concat(op.Constant(value_ints=[-1, head_dim]), height, width, axis=0)
        )
        grid = op.Gather(grids, op.Constant(value_int=level), axis=3)  # [b, heads, q, points, 2]
        per_head = op.Concat(op.Constant(value_ints=[-1]), op.Shape(grid, start=2), axis=0)
        grid = op.Reshape(grid, per_head)  # [batch*heads, queries, points, 2]
        sampled.append(
            op.GridSample(pixels, grid, mode="linear", padding_mode="zeros", align_corners=0)
        )  # [batch*heads, dim, queries, points]
    samples = op.Concat(*sampled, axis=-1)  # [batch*heads, dim, queries, levels*points]
    # [batch, queries, heads, levels, points] -> [batch*heads, 1, queries, levels*points]
    weights = op.Transpose(attention_weights, perm=[0, 2, 1, 3, 4])
    weights = op.Reshape(weights, op.Constant(value_ints=[-1, 1, 0, 0, 0]))
    weights = op.Reshape(weights, op.Constant(value_ints=[0, 1, 0, -1]))
    summed = op.ReduceSum(op.Mul(samples, weights), op.Constant(value_ints=[-1]), keepdims=0)
    # [batch*heads, dim, queries] -> [batch, heads*dim, queries] -> [batch, queries, heads*dim]
    summed = op.Reshape(summed, op.Constant(value_ints=[-1, num_heads * head_dim, 0]))
    return op.Transpose(summed, perm=[0, 2, 1])


class MultiscaleDeformableAttention(nn.Module):
    """transformers' ``XxxMultiscaleDeformableAttention``: offsets and weights projected from the
    queries, values from the encoder's pixels, the sampled sum projected out.

    Reference points are ``[batch, queries, levels or 1, 2]`` (points: offsets are in pixels of
    each level) or, with ``box_references``, ``[..., 4]`` (boxes: offsets are fractions of half
    the box's size, divided by the points), as transformers tells them apart by that last axis.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_levels: int,
        num_points: int,
        box_references: bool = False,
    ) -> None:
        super().__init__()
        self.box_references = box_references
        self.num_heads = num_heads
        self.num_levels = num_levels
        self.num_points = num_points
        self.head_dim = d_model // num_heads
        self.sampling_offsets = Linear(d_model, num_heads * num_levels * num_points * 2, bias=True)
        self.attention_weights = Linear(d_model, num_heads * num_levels * num_points, bias=True)
        self.value_proj = Linear(d_model, d_model, bias=True)
        self.output_proj = Linear(d_model, d_model, bias=True)

    def forward(
        self, op, hidden, memory, reference_points, level_shapes, value_mask=None, positions=None
    ):
        if positions is not None:
            hidden = op.Add(hidden, positions)
        value = self.value_proj(op, memory)
        if value_mask is not None:  # [batch, sequence] 1 on real pixels: padding reads zero
            value = op.Mul(value, op.Unsqueeze(op.CastLike(value_mask, value), [-1]))
        return self.output_proj(op, self.attend(op, hidden, value, reference_points, level_shapes))

    def attend(self, op, hidden, value, reference_points, level_shapes):
        """The sampled sum of ``value`` for the queries ``hidden`` (positions already added)."""
        heads, levels, points = self.num_heads, self.num_levels, self.num_points
        offsets = op.Reshape(
            self.sampling_offsets(op, hidden),
            op.Constant(value_ints=[0, 0, heads, levels, points, 2]),
        )
        weights = op.Reshape(
            self.attention_weights(op, hidden),
            op.Constant(value_ints=[0, 0, heads, levels * points]),
        )
        weights = op.Reshape(
            op.Softmax(weights, axis=-1), op.Constant(value_ints=[0, 0, heads, levels, points])
        )
        locations = self.sampling_locations(op, reference_points, offsets, level_shapes)
        return multi_scale_deformable_attention(
            op, value, level_shapes, locations, weights, heads, self.head_dim
        )

    def sampling_locations(self, op, reference_points, offsets, level_shapes):
        """``[batch, queries, heads, levels, points, 2]``: the reference plus the offsets,
        scaled by the box's size or by each level's width and height."""
        # [batch, queries, levels or 1, c] -> [batch, queries, 1, levels or 1, 1, c]
        reference = op.Unsqueeze(reference_points, [2, 4])
        if self.box_references:
            return self.box_locations(op, reference, offsets)
        # offsets are in pixels of each level: divide by (width, height)
        normalizer = op.Concat(
            *(op.Concat(width, height, axis=0) for height, width in level_shapes), axis=0
        )
        normalizer = op.Reshape(
            op.CastLike(normalizer, offsets), op.Constant(value_ints=[len(level_shapes), 1, 2])
        )
        return op.Add(reference, op.Div(offsets, normalizer))

    def box_locations(self, op, reference, offsets):
        """Around boxes ``[batch, queries, 1, levels or 1, 1, 4]``: the centre plus the offsets
        times half the box's size, divided by the points."""
        centers = op.Slice(reference, [0], [2], [-1])
        sizes = op.Slice(reference, [2], [4], [-1])
        scale = op.CastLike(0.5 / self.num_points, offsets)
        return op.Add(centers, op.Mul(op.Mul(offsets, sizes), scale))


def point_scaled_box_locations(
    op, reference, offsets, point_scale, levels: int, points: int, offset_scale: float
):
    """RT-DETR v2's and D-FINE's box sampling: the box's centre plus the offsets times each
    point's scale (``point_scale`` ``[levels * points]``, a checkpoint tensor), the box's size
    and ``offset_scale``."""
    per_point = op.Reshape(point_scale, op.Constant(value_ints=[levels, points, 1]))
    sizes = op.Slice(reference, [2], [4], [-1])
    scaled = op.Mul(op.Mul(op.Mul(offsets, per_point), sizes), op.CastLike(offset_scale, offsets))
    return op.Add(op.Slice(reference, [0], [2], [-1]), scaled)


def map_shape(op, feature_map) -> tuple:
    """``(height, width)`` of a ``[batch, channels, h, w]`` map, as int64 tensors of shape [1]."""
    return (
        op.Shape(feature_map, start=2, end=3),
        op.Shape(feature_map, start=3, end=4),
    )


def flatten_map(op, feature_map):
    """``[batch, channels, h, w]`` as ``[batch, h*w, channels]`` (row by row)."""
    flat = op.Reshape(feature_map, op.Constant(value_ints=[0, 0, -1]))
    return op.Transpose(flat, perm=[0, 2, 1])


__all__ = [
    "MultiscaleDeformableAttention",
    "point_scaled_box_locations",
    "flatten_map",
    "map_shape",
    "multi_scale_deformable_attention",
]
