"""DeBERTa's disentangled attention (mobius.components) against a numpy port of transformers.

The families using it (DeBERTa-v2/v3, SEW-D) are proven against PyTorch by their
parity tests; this pins the component itself: the log buckets, both relative terms,
and the two mask forms (DeBERTa's pair mask, SEW-D's key-only mask).
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.components import DisentangledSelfAttention, log_bucket_positions
from mobius.testing import run_module

rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def numpy_log_buckets(rel_pos: np.ndarray, bucket_size: int, max_position: int) -> np.ndarray:
    """transformers' ``make_log_bucket_position`` (float32)."""
    sign = np.sign(rel_pos)
    mid = bucket_size // 2
    abs_pos = np.where((rel_pos < mid) & (rel_pos > -mid), mid - 1, np.abs(rel_pos))
    log_pos = (
        np.ceil(
            np.log(abs_pos.astype(np.float32) / mid)
            / np.log(np.float32((max_position - 1) / mid))
            * (mid - 1)
        )
        + mid
    )
    return np.where(abs_pos <= mid, rel_pos, log_pos * sign).astype(np.int64)


@pytest.mark.parametrize(("buckets", "max_position"), [(8, 32), (256, 512)])
def test_log_buckets_match_transformers(buckets, max_position):
    rel_pos = np.arange(-600, 601, dtype=np.int64)[None]
    (y,) = run_module(
        lambda op, r: log_bucket_positions(op, r, buckets, max_position), {"r": rel_pos}
    )
    np.testing.assert_array_equal(y, numpy_log_buckets(rel_pos, buckets, max_position))


def numpy_attention(x, mask, rel_pos, table, params, heads, span, kinds):
    """transformers' DeBERTa-v2 ``DisentangledSelfAttention`` (own position projections)."""
    b, n, _ = x.shape

    def proj(t, name):
        return t @ params[f"{name}.weight"] + params[f"{name}.bias"]

    def split(t):  # [b, n, h*d] -> [b, h, n, d]
        return t.reshape(b, n, heads, -1).transpose(0, 2, 1, 3)

    q, k, v = (split(proj(x, f"{p}_proj")) for p in ("query", "key", "value"))
    dim = q.shape[-1]
    scale = np.sqrt(np.float32(dim * (1 + len(kinds))))
    scores = q @ k.transpose(0, 1, 3, 2) / scale
    window = table[: 2 * span]
    index = np.broadcast_to(np.clip(rel_pos + span, 0, 2 * span - 1), (b, heads, n, n))
    if "c2p" in kinds:
        pos_key = proj(window, "pos_key_proj").reshape(2 * span, heads, dim).transpose(1, 0, 2)
        scores = scores + np.take_along_axis(q @ pos_key.transpose(0, 2, 1), index, 3) / scale
    if "p2c" in kinds:
        pos_query = proj(window, "pos_query_proj").reshape(2 * span, heads, dim)
        pos_query = pos_query.transpose(1, 0, 2)
        back = np.broadcast_to(np.clip(span - rel_pos, 0, 2 * span - 1), (b, heads, n, n))
        p2c = np.take_along_axis(k @ pos_query.transpose(0, 2, 1), back, 3)
        scores = scores + p2c.transpose(0, 1, 3, 2) / scale
    scores = np.where(mask, scores, np.finfo(np.float32).min)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return (probs @ v).transpose(0, 2, 1, 3).reshape(b, n, -1)


@pytest.mark.parametrize("kinds", [("c2p", "p2c"), ("c2p",), ("p2c",)])
def test_attention_matches_transformers_with_pair_and_key_masks(kinds):
    hidden, heads, head_dim, span, n = 12, 3, 4, 4, 6
    x, table = randn(2, n, hidden), randn(2 * span, hidden)
    rel_pos = (np.arange(n)[:, None] - np.arange(n)[None]).astype(np.int64)
    real = np.array([[True] * n, [True] * 4 + [False] * 2])
    names = ["query_proj", "key_proj", "value_proj"]
    names += [
        p for p, kind in (("pos_key_proj", "c2p"), ("pos_query_proj", "p2c")) if kind in kinds
    ]
    params = {}
    for name in names:
        params[f"{name}.weight"] = randn(hidden, heads * head_dim) * 0.3  # [in, out]
        params[f"{name}.bias"] = randn(heads * head_dim) * 0.1
    masks = {
        "pair": real[:, None, :, None] & real[:, None, None, :],  # [b, 1, n, n]
        "key": real[:, None, None, :],  # [b, 1, 1, n]
    }

    def forward(op, x, mask, rel_pos, table):
        attention = DisentangledSelfAttention(
            hidden,
            heads,
            head_dim,
            relative_attention=True,
            pos_att_type=kinds,
            span=span,
            share_att_key=False,
        )
        return attention(op, x, mask, rel_pos, table)

    got = {}
    for form, mask in masks.items():
        inputs = {"x": x, "mask": mask, "rel_pos": rel_pos, "table": table}
        (got[form],) = run_module(forward, inputs, params)
        expected = numpy_attention(x, mask, rel_pos, table, params, heads, span, kinds)
        np.testing.assert_allclose(got[form], expected, rtol=1e-5, atol=1e-5)
    # Real queries see the same keys either way; only padded query rows differ.
    np.testing.assert_allclose(got["pair"][real], got["key"][real], rtol=1e-6, atol=1e-6)
