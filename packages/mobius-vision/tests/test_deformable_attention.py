"""Multi-scale deformable attention in ONNX ops against transformers' PyTorch function.

The graph of :func:`mobius_vision.models._deformable.multi_scale_deformable_attention` runs in
ONNX Runtime on random values, locations (some outside the maps, which read zeros) and
weights, over several levels of different sizes, heads and points; it matches
``grid_sample``'s bilinear sum within 1e-5 at fp32.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

from mobius.tasks import IR_VERSION, new_graph, set_output
from mobius_vision.models._deformable import multi_scale_deformable_attention

ATOL = 1e-5


def deformable_session(num_levels: int, num_heads: int, head_dim: int):
    """A session of the function with the level sizes as ``height_i``/``width_i`` int64 inputs."""
    graph, builder = new_graph("deformable")
    f32 = ir.DataType.FLOAT
    value = builder.input("value", f32, ["batch", "sequence", num_heads * head_dim])
    locations = builder.input("locations", f32, ["batch", "queries", num_heads, num_levels, "p", 2])
    weights = builder.input("weights", f32, ["batch", "queries", num_heads, num_levels, "p"])
    shapes = [
        (
            builder.input(f"height_{i}", ir.DataType.INT64, [1]),
            builder.input(f"width_{i}", ir.DataType.INT64, [1]),
        )
        for i in range(num_levels)
    ]
    out = multi_scale_deformable_attention(
        builder.op, value, shapes, locations, weights, num_heads, head_dim
    )
    set_output(builder, out, "out", f32, ["batch", "queries", num_heads * head_dim])
    proto = ir.serde.serialize_model(ir.Model(graph, ir_version=IR_VERSION))
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(
    "levels,heads,head_dim,points,queries",
    [
        ([(5, 7)], 1, 4, 1, 3),
        ([(8, 6), (4, 3), (2, 2)], 2, 8, 4, 11),
        ([(3, 9), (7, 2)], 4, 2, 3, 5),
    ],
)
def test_matches_transformers(levels, heads, head_dim, points, queries):
    import torch
    from transformers.models.rt_detr.modeling_rt_detr import MultiScaleDeformableAttention

    rng = np.random.default_rng(len(levels) * 10 + heads)
    batch = 2
    sequence = sum(h * w for h, w in levels)
    value = rng.standard_normal((batch, sequence, heads, head_dim)).astype(np.float32)
    # some points fall outside [0, 1]: grid_sample reads zeros there
    locations = rng.uniform(-0.2, 1.2, (batch, queries, heads, len(levels), points, 2))
    locations = locations.astype(np.float32)
    weights = rng.random((batch, queries, heads, len(levels), points)).astype(np.float32)

    shapes = torch.tensor(levels, dtype=torch.int64)
    starts = torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])
    expected = MultiScaleDeformableAttention()(
        torch.from_numpy(value),
        shapes,
        levels,
        starts,
        torch.from_numpy(locations),
        torch.from_numpy(weights),
        64,
    ).numpy()

    feeds = {
        "value": value.reshape(batch, sequence, heads * head_dim),
        "locations": locations,
        "weights": weights,
    }
    for index, (height, width) in enumerate(levels):
        feeds[f"height_{index}"] = np.array([height], np.int64)
        feeds[f"width_{index}"] = np.array([width], np.int64)
    (got,) = deformable_session(len(levels), heads, head_dim).run(None, feeds)
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= ATOL
    assert np.abs(expected).max() > 0.1  # the samples are not all zeros
