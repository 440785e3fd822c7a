"""Attention with a KV cache, and the additive masks it consumes."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy.finfo)
import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components._heads import merge_heads, split_heads
from mobius.components._linear import Linear
from mobius.components._rope import ROTARY_TABLE, RotaryTable, apply_rotary
from mobius.components._runtime import MS_DOMAIN, execution_provider_of, fused_ops

_NUMPY_FLOAT = {
    ir.DataType.FLOAT: np.float32,
    ir.DataType.FLOAT16: np.float16,
    ir.DataType.BFLOAT16: ml_dtypes.bfloat16,
    ir.DataType.DOUBLE: np.float64,
}


def repeat_kv(op, x: ir.Value, num_heads: int, num_kv_heads: int, head_dim: int) -> ir.Value:
    """``[batch, kv_heads, seq, dim]`` → ``[batch, heads, seq, dim]``: head ``h`` reads kv head ``h // group``.

    For attention written out with MatMul/Softmax (sinks, custom masks); the ONNX
    ``Attention`` op groups heads itself.
    """
    if num_heads == num_kv_heads:
        return x
    group = num_heads // num_kv_heads
    x = op.Expand(op.Unsqueeze(x, [2]), op.Constant(value_ints=[1, 1, group, 1, 1]))
    return op.Reshape(x, op.Constant(value_ints=[0, num_heads, -1, head_dim]))


def lowest_value(dtype: ir.DataType) -> float:
    """The most negative finite value of a float dtype: masked scores stay finite (no NaN rows)."""
    return float(ml_dtypes.finfo(_NUMPY_FLOAT[dtype]).min)


def attention_bias(
    op,
    attention_mask: ir.Value,
    query_length: ir.Value,
    dtype: ir.DataType,
    sliding_window: int | None = None,
) -> ir.Value:
    """Additive mask ``[batch, 1, seq, total]``: causal, padding, and an optional sliding window.

    ``attention_mask [batch, total]`` marks real tokens with 1; the queries are the
    last ``query_length`` positions of the ``total`` (past + new) sequence.
    A key is visible when it is real, not after the query (or in the query's block,
    inside :func:`bidirectional_blocks`), and (with a window) fewer than
    ``sliding_window`` positions before it.
    """
    total = op.Squeeze(op.Slice(op.Shape(attention_mask), [1], [2]), [0])
    key_pos = op.Range(0, total, 1)  # [total]
    query_pos = op.Unsqueeze(op.Range(op.Sub(total, query_length), total, 1), [1])  # [seq, 1]
    visible = op.LessOrEqual(key_pos, query_pos)  # [seq, total]
    blocks, windowed = _BLOCKS.get() or (None, True)
    if blocks is not None and windowed:
        visible = op.Or(visible, _same_block(op, blocks, total))  # [batch, 1, seq, total]
    if sliding_window is not None:
        in_window = op.Less(op.Sub(query_pos, key_pos), sliding_window)
        visible = op.And(visible, in_window)
    if blocks is not None and not windowed:
        visible = op.Or(visible, _same_block(op, blocks, total))
    real_keys = op.Unsqueeze(
        op.Cast(attention_mask, to=ir.DataType.BOOL), [1, 2]
    )  # [batch,1,1,total]
    visible = op.And(real_keys, visible)  # [batch, 1, seq, total]
    zero = op.Constant(value=ir.tensor(np.array(0, dtype=_NUMPY_FLOAT[dtype])))
    lowest = op.Constant(value=ir.tensor(np.array(lowest_value(dtype), dtype=_NUMPY_FLOAT[dtype])))
    bias = op.Where(visible, zero, lowest)
    if blocks is not None:
        bias.meta[SEES_AHEAD] = True
    elif sliding_window is None:  # GroupQueryAttention masks causally itself: see _padding_bias
        bias.meta[MASK_SOURCE] = (attention_mask, query_length, dtype)
    return bias


# The block ids of the current queries while :func:`bidirectional_blocks` is active.
_BLOCKS: contextvars.ContextVar[tuple[ir.Value, bool] | None] = contextvars.ContextVar(
    "mobius_attention_blocks", default=None
)

# ``Value.meta`` key of a bias that lets queries see later keys (GroupQueryAttention cannot).
SEES_AHEAD = "mobius.sees_ahead"


@contextlib.contextmanager
def bidirectional_blocks(block_ids: ir.Value, windowed: bool = True) -> Iterator[None]:
    """Within the block, :func:`attention_bias` also shows each query every key of its own block.

    ``block_ids [batch, sequence]`` numbers the new tokens' blocks (an image's tokens,
    a prompt prefix); ``-1`` is no block. Keys in the cache belong to no block. A
    vision–language model wraps its text decoder's call in this (Gemma 3's images,
    PaliGemma's prefix attend both ways). On sliding-window layers ``windowed`` keeps
    the window over the block too (Gemma 3); otherwise the whole block stays visible
    (PaliGemma 2).
    """
    token = _BLOCKS.set((block_ids, windowed))
    try:
        yield
    finally:
        _BLOCKS.reset(token)


def _same_block(op, block_ids: ir.Value, total: ir.Value) -> ir.Value:
    """``[batch, 1, seq, total]``: the key is in the query's block (cached keys are in none)."""
    past = op.Sub(op.Reshape(total, [1]), op.Shape(block_ids, start=1, end=2))
    no_block = op.ConstantOfShape(
        op.Concat(op.Shape(block_ids, start=0, end=1), past, axis=0),
        value=ir.tensor(np.array([-1], np.int64)),
    )
    key_blocks = op.Concat(no_block, block_ids, axis=1)  # [batch, total]
    query_blocks = op.Unsqueeze(block_ids, [1, 3])  # [batch, 1, seq, 1]
    same = op.Equal(query_blocks, op.Unsqueeze(key_blocks, [1, 2]))
    return op.And(same, op.GreaterOrEqual(query_blocks, op.Constant(value_int=0)))


# ``Value.meta`` key of a causal+padding bias made by attention_bias: what it was made from.
MASK_SOURCE = "mobius.mask_source"


def _padding_bias(op, bias: ir.Value) -> ir.Value:
    """The padding part alone of a causal+padding ``bias``, ``[batch, 1, seq, total]``, once per graph.

    GroupQueryAttention applies the causal mask itself, so it needs only the pads:
    a few small ops instead of the position comparisons (decode steps run them
    all on every token). Any other bias is returned as it is.
    """
    source = bias.meta.get(MASK_SOURCE)
    if source is None:
        return bias
    cached = op.builder.graph.meta.setdefault(MASK_SOURCE, {})
    if id(bias) not in cached:
        attention_mask, query_length, dtype = source
        numpy_type = _NUMPY_FLOAT[dtype]
        real = op.Unsqueeze(op.Cast(attention_mask, to=ir.DataType.BOOL), [1, 2])  # [b,1,1,t]
        zero = op.Constant(value=ir.tensor(np.array(0, dtype=numpy_type)))
        lowest = op.Constant(value=ir.tensor(np.array(lowest_value(dtype), dtype=numpy_type)))
        rows = op.Concat([1, 1], op.Reshape(query_length, [1]), [1], axis=0)  # [1, 1, seq, 1]
        cached[id(bias)] = (bias, op.Expand(op.Where(real, zero, lowest), rows))
    return cached[id(bias)][1]


def scaled_dot_product_attention(
    op,
    q: ir.Value,
    k: ir.Value,
    v: ir.Value,
    bias: ir.Value,
    past_key: ir.Value,
    past_value: ir.Value,
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    scale: float,
    softcap: float = 0.0,
    sinks: ir.Value | None = None,
    value_dim: int | None = None,
    rotary_in_kernel: bool = True,
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """Attention over the KV cache: ``(y, present_key, present_value)``.

    ``q [batch, heads, seq, head_dim]``, ``k``/``v`` ``[batch, kv_heads, seq, head_dim]``
    (``v``'s last axis is ``value_dim`` when that differs),
    ``bias`` the additive mask of :func:`attention_bias`, the caches
    ``[batch, kv_heads, past, head_dim]``; ``y`` is ``[batch, heads, seq, head_dim]``.
    Portable graphs use the ONNX ``Attention`` op; ``cpu``/``cuda`` graphs use
    ONNX Runtime's ``GroupQueryAttention``, rotating inside the kernel when
    ``q`` and ``k`` come straight from a static rotary table (CUDA's kernel is
    half-precision only: fp32 ``cuda`` graphs keep the ONNX op). ``sinks [heads]``
    (one extra softmax logit per head) needs the fused kernel; without it callers
    write the softmax out themselves. ``rotary_in_kernel=False`` keeps the rotation
    outside the kernel, so cached keys are rotated by HF's positions (for caches
    that other layers read with their own queries).
    """
    half_only = execution_provider_of(op) == "cuda" and past_key.dtype == ir.DataType.FLOAT
    kernel_fits = (
        bias is not None
        and not bias.meta.get(SEES_AHEAD)  # the kernel is causal
        and num_heads % num_kv_heads == 0
        and head_dim % 8 == 0  # the kernel's own limits
        and value_dim in (None, head_dim)
    )
    if fused_ops(op) and not half_only and kernel_fits:
        return _group_query_attention(
            op, q, k, v, bias, past_key, past_value, num_heads, num_kv_heads, head_dim, scale,
            softcap, sinks, rotary_in_kernel,
        )  # fmt: skip
    if sinks is not None:
        raise ValueError("the ONNX Attention op has no sinks: write the softmax out")
    extra = {"softcap": float(softcap)} if softcap else {}
    return op.Attention(q, k, v, bias, past_key, past_value, scale=scale, _outputs=3, **extra)


def _merge_or_unsplit_heads(op, x: ir.Value) -> ir.Value:
    """:func:`merge_heads`, or when ``x`` is a head split's Transpose, a Reshape of what it split."""
    producer = x.producer()
    split = (
        producer is not None
        and (producer.op_type, producer.domain) == ("Transpose", "")
        and list(producer.attributes.get_ints("perm", [])) == [0, 2, 1, 3]
    )
    if split:  # x = Transpose(heads): read the [batch, seq, heads, dim] tensor directly
        return op.Reshape(producer.inputs[0], op.Constant(value_ints=[0, 0, -1]))
    return merge_heads(op, x)


def _merge_rotated_heads(op, x: ir.Value, num_heads: int) -> ir.Value:
    """Like :func:`_merge_or_unsplit_heads`, moving a last ``RotaryEmbedding`` onto the merged tensor.

    ONNX ``RotaryEmbedding`` also takes ``[batch, seq, heads*dim]`` with ``num_heads``,
    so the split/merge transposes around it disappear.
    """
    source = _rotary_source(x)
    if source is None:
        return _merge_or_unsplit_heads(op, x)
    x_in, node = source
    merged = _merge_or_unsplit_heads(op, x_in)
    cos, sin = (_recast(op, value, merged) for value in node.inputs[1:3])
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    return op.RotaryEmbedding(merged, cos, sin, **attributes, num_heads=num_heads)


def _recast(op, value: ir.Value, like: ir.Value) -> ir.Value:
    """``value`` cast like ``like`` instead of like the tensor its ``CastLike`` named."""
    producer = value.producer()
    if producer is None or producer.op_type != "CastLike":
        return value
    return op.CastLike(producer.inputs[0], like)


def _rotary_source(value: ir.Value) -> tuple[ir.Value, ir.Node] | None:
    """The unrotated input and the ``RotaryEmbedding`` node that produced ``value``, if any."""
    node = value.producer()
    if node is None or node.op_type != "RotaryEmbedding" or node.domain != "":
        return None
    return node.inputs[0], node


def _rotary_table(value: ir.Value) -> RotaryTable | None:
    """The static table behind a cos/sin value, looking through casts."""
    while ROTARY_TABLE not in value.meta:
        node = value.producer()
        if node is None or node.op_type not in ("CastLike", "Cast"):
            return None
        value = node.inputs[0]
    return value.meta[ROTARY_TABLE]


def _fused_rotary(op, q: ir.Value, k: ir.Value, head_dim: int, dtype: ir.DataType):
    """``(q, k, cos_cache, sin_cache, interleaved)`` when GroupQueryAttention can rotate q and k.

    The kernel rotates each token by its cache slot; with left padding that is
    HF's position plus a per-row constant, which rotary attention cannot see
    (scores depend on relative positions only).
    """
    q_source, k_source = _rotary_source(q), _rotary_source(k)
    if q_source is None or k_source is None or head_dim % 16:  # the kernel's own limit
        return None
    (q_in, q_node), (k_in, k_node) = q_source, k_source

    def rotation(node: ir.Node) -> tuple[int, int]:
        attributes = node.attributes
        return attributes.get_int("interleaved", 0), attributes.get_int("rotary_embedding_dim", 0)

    interleaved, rotary_dim = rotation(q_node)
    tables = {id(_rotary_table(v)) for node in (q_node, k_node) for v in node.inputs[1:]}
    table = _rotary_table(q_node.inputs[1])
    if rotation(q_node) != rotation(k_node) or table is None or len(tables) != 1:
        return None
    width = len(table.inv_freq)  # the kernel wants rotary_dim / 2 a multiple of 8
    if (rotary_dim or head_dim) != 2 * width or width % 8:
        return None
    return q_in, k_in, *table_caches(op, table, dtype), interleaved


def table_caches(op, table: RotaryTable, dtype: ir.DataType) -> tuple[ir.Value, ir.Value]:
    """The ``cos_cache``/``sin_cache`` initializers of a table in ``dtype``, made once per graph."""
    graph = op.builder.graph
    cached = graph.meta.setdefault(ROTARY_TABLE, {})
    key = (table.inv_freq.tobytes(), table.attention_scaling, table.max_positions, dtype)
    if key not in cached:
        cos, sin = (t.astype(_NUMPY_FLOAT[dtype]) for t in table.cos_sin())
        index = len(cached)
        cached[key] = (
            op.initializer(ir.tensor(cos, name=f"rotary.{index}.cos_cache")),
            op.initializer(ir.tensor(sin, name=f"rotary.{index}.sin_cache")),
        )
    return cached[key]


def _cache_lengths(op, bias: ir.Value) -> tuple[ir.Value, ir.Value]:
    """GroupQueryAttention's ``seqlens_k [batch]`` and ``total_sequence_length``, made once per mask.

    Every cache slot counts as filled (left padding included): the kernel then
    lays out the cache as the ONNX ``Attention`` op does, and ``bias`` masks the pads.
    The batch comes from the bias, which must spell it out (``[batch, ...]``): the
    cache may have no reader but the kernel (the generator then shares one buffer
    for past and present), and a Shape on the query would stop q/k/v packing.
    """
    cached = op.builder.graph.meta.setdefault("mobius.gqa_lengths", {})
    if id(bias) not in cached:
        total = op.Cast(op.Squeeze(op.Shape(bias, start=3, end=4), [0]), to=ir.DataType.INT32)
        one = op.Constant(value=ir.tensor(np.array(1, np.int32)))
        seqlens_k = op.Expand(op.Sub(total, one), op.Shape(bias, start=0, end=1))
        cached[id(bias)] = (bias, seqlens_k, total)
    return cached[id(bias)][1:]


def _group_query_attention(
    op, q, k, v, bias, past_key, past_value, num_heads, num_kv_heads, head_dim, scale, softcap,
    sinks, rotary_in_kernel,
):  # fmt: skip
    op.builder.graph.opset_imports.setdefault(MS_DOMAIN, 1)
    rotary = _fused_rotary(op, q, k, head_dim, past_key.dtype) if rotary_in_kernel else None
    cos_cache = sin_cache = None
    interleaved = 0
    if rotary is not None:
        q, k, cos_cache, sin_cache, interleaved = rotary
    bias = _padding_bias(op, bias)
    seqlens_k, total = _cache_lengths(op, bias)
    y, present_key, present_value = op.GroupQueryAttention(
        _merge_rotated_heads(op, q, num_heads),
        _merge_rotated_heads(op, k, num_kv_heads),
        _merge_or_unsplit_heads(op, v),
        past_key,
        past_value,
        seqlens_k,
        total,
        cos_cache,
        sin_cache,
        None,
        bias,
        sinks,
        num_heads=num_heads,
        kv_num_heads=num_kv_heads,
        scale=float(scale),
        softcap=float(softcap or 0.0),
        do_rotary=int(rotary is not None),
        rotary_interleaved=interleaved,
        _domain=MS_DOMAIN,
        _version=1,
        _outputs=3,
    )
    return split_heads(op, y, num_heads, head_dim), present_key, present_value


class Attention(nn.Module):
    """Multi-head attention with grouped KV heads (MHA, GQA, MQA) and a KV cache.

    Input ``x [batch, seq, hidden]``; the cache tensors are ``[batch, kv_heads, past, head_dim]``.
    Returns the output and the present ``(key, value)``.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        bias: bool = False,
        out_bias: bool = False,
        rotary_dim: int | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        self.q_proj = Linear(hidden_size, num_heads * head_dim, bias)
        self.k_proj = Linear(hidden_size, num_kv_heads * head_dim, bias)
        self.v_proj = Linear(hidden_size, num_kv_heads * head_dim, bias)
        self.o_proj = Linear(num_heads * head_dim, hidden_size, out_bias)
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.rotary_dim = head_dim if rotary_dim is None else rotary_dim
        self.scale = head_dim**-0.5 if scale is None else scale

    def split_heads(self, op, x: ir.Value) -> ir.Value:
        """``[batch, seq, heads*head_dim]`` → ``[batch, heads, seq, head_dim]``."""
        return split_heads(op, x, head_dim=self.head_dim)

    def project_qkv(self, op, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """Query, key and value, each ``[batch, heads, seq, head_dim]``; variants add norms here."""
        q = self.split_heads(op, self.q_proj(op, x))
        k = self.split_heads(op, self.k_proj(op, x))
        v = self.split_heads(op, self.v_proj(op, x))
        return q, k, v

    # Pairs of adjacent channels rotate together (GPT-J layout) instead of the two halves.
    interleaved_rotary = False
    # With fused ops, GroupQueryAttention may rotate q and k itself (see
    # scaled_dot_product_attention); False where other layers read this cache.
    rotary_in_kernel = True

    def rotate(self, op, q, k, position_embeddings):
        """Apply the rotary embedding to queries and keys; ``None`` is a layer without one (NoPE)."""
        if position_embeddings is None:
            return q, k
        cos, sin = position_embeddings
        interleaved = self.interleaved_rotary
        return (
            apply_rotary(op, q, cos, sin, self.rotary_dim, interleaved),
            apply_rotary(op, k, cos, sin, self.rotary_dim, interleaved),
        )

    def attend(self, op, q, k, v, bias, past_key, past_value):
        """Scaled dot-product attention over the cache; variants add soft-capping, sinks..."""
        return scaled_dot_product_attention(
            op, q, k, v, bias, past_key, past_value, **self.attention_shape()
        )

    def attention_shape(self) -> dict:
        """The head layout and scale :func:`scaled_dot_product_attention` needs."""
        return dict(
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            scale=self.scale,
            rotary_in_kernel=self.rotary_in_kernel,
        )

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)
        q, k = self.rotate(op, q, k, position_embeddings)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        return self.o_proj(op, merge_heads(op, y)), (present_key, present_value)
