"""Mixture-of-experts building blocks: top-k routers and sparse expert dispatch.

A routed MoE layer computes ``y = sum_e w_e(x) * expert_e(x)`` where the routing
weights ``w [tokens, num_experts]`` are zero for the experts a token did not pick.
Routers here return that *dense* routing matrix; the expert blocks consume it.

Dispatch is per-expert gather/scatter, not dense: for each expert ``e`` the graph
finds the tokens with ``w[:, e] != 0`` (``NonZero``), gathers their rows, runs the
expert on those rows only, scales by the weight and adds the result back with
``ScatterND(reduction="add")``. The cost is the true top-k cost (each token goes
through ``top_k`` experts, plus a gather/scatter of its rows), and it is exact:
an unselected expert contributes nothing, as in transformers. Experts are added in
ascending index order onto zeros, the order transformers' ``index_add_`` loop uses.
An expert that receives no token runs on an empty ``[0, hidden]`` tensor.

Expert weights come in the two layouts checkpoints use:

* one module per expert (``experts.{e}.gate_proj`` / ``experts.{e}.w1``...): an
  :class:`ExpertList` of small MLPs. transformers 5 ``save_pretrained`` writes this
  layout for most MoE families (it reverses its in-memory fusion on save).
* stacked 3-D tensors ``[num_experts, out, in]`` (Granite-MoE / JetMoE
  ``input_linear.weight``, fused ``experts.gate_up_proj``): :class:`StackedLinear`
  and :class:`StackedGatedExperts`. Each expert's slice is taken with ``Gather``.

Routing runs in float32 (as transformers does, ``router_logits.float()``) and is
cast back to the activation dtype before it scales the expert outputs. The sum over
experts is accumulated in float32 (ONNX Runtime's CPU ``ScatterND`` cannot add float16)
and cast to the activation dtype once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components._activations import get_activation
from mobius.components._linear import Linear, TransposedParameter

FLOAT = ir.DataType.FLOAT


# ---------------------------------------------------------------------------
# Routing
# ---------------------------------------------------------------------------


def scatter_top_k(op, values: ir.Value, indices: ir.Value, like: ir.Value) -> ir.Value:
    """Dense ``[tokens, num_experts]`` routing: ``values`` at ``indices`` (``[tokens, k]``), zero elsewhere."""
    zeros = op.Mul(like, op.CastLike(op.Constant(value_float=0.0), like))
    return op.ScatterElements(zeros, indices, op.CastLike(values, like), axis=1)


def top_k_routing(
    op,
    logits: ir.Value,
    top_k: int,
    *,
    normalize: bool = True,
    softmax_first: bool = True,
    choice_bias: ir.Value | None = None,
    scoring: str = "softmax",
) -> ir.Value:
    """Routing weights ``[tokens, num_experts]`` from router ``logits``, zero for unselected experts.

    * ``softmax_first=True`` (Mixtral, Qwen-MoE, OLMoE): ``p = softmax(logits)``, keep the
      top-k probabilities, and rescale them to sum to one when ``normalize``.
    * ``softmax_first=False`` (Granite-MoE, JetMoE): top-k of the logits, then softmax
      over the k kept logits (already normalised; ``normalize`` is ignored).
    * ``scoring="sigmoid"``: scores are ``sigmoid(logits)`` instead of the softmax.
    * ``choice_bias [num_experts]`` is added to the scores only to *choose* the experts
      (DeepSeek-V3-style ``e_score_correction_bias``); the weights stay unbiased.
    """
    logits = op.Cast(logits, to=FLOAT)
    k = op.Constant(value_ints=[top_k])
    if not softmax_first:
        top_logits, indices = op.TopK(logits, k, axis=-1, _outputs=2)
        return scatter_top_k(op, op.Softmax(top_logits, axis=-1), indices, logits)
    if scoring == "softmax":
        scores = op.Softmax(logits, axis=-1)
    elif scoring == "sigmoid":
        scores = op.Sigmoid(logits)
    else:
        raise ValueError(f"unsupported router scoring {scoring!r}")
    choice = scores if choice_bias is None else op.Add(scores, op.Cast(choice_bias, to=FLOAT))
    _, indices = op.TopK(choice, k, axis=-1, _outputs=2)
    values = op.GatherElements(scores, indices, axis=1)  # [tokens, k]
    if normalize:
        values = op.Div(values, op.ReduceSum(values, op.Constant(value_ints=[-1]), keepdims=1))
    return scatter_top_k(op, values, indices, logits)


class TopKRouter(nn.Module):
    """A linear router (``weight [num_experts, hidden]``) followed by :func:`top_k_routing`.

    ``forward(x [tokens, hidden])`` returns the dense routing weights ``[tokens, num_experts]``
    in float32.
    """

    def __init__(
        self,
        hidden_size: int,
        num_experts: int,
        top_k: int,
        *,
        normalize: bool = True,
        softmax_first: bool = True,
        bias: bool = False,
    ) -> None:
        super().__init__()
        self.weight = TransposedParameter(num_experts, hidden_size)  # [hidden, experts]
        self.bias = nn.Parameter([num_experts]) if bias else None
        self.top_k, self.normalize, self.softmax_first = top_k, normalize, softmax_first

    def logits(self, op, x: ir.Value) -> ir.Value:
        y = op.MatMul(x, self.weight)
        return op.Add(y, self.bias) if self.bias is not None else y

    def forward(self, op, x: ir.Value) -> ir.Value:
        return top_k_routing(
            op,
            self.logits(op, x),
            self.top_k,
            normalize=self.normalize,
            softmax_first=self.softmax_first,
        )


# ---------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------


def dispatch_experts(
    op,
    x: ir.Value,
    routing: ir.Value,
    experts: Sequence[Callable[[object, ir.Value], ir.Value]],
) -> ir.Value:
    """``sum_e routing[:, e] * experts[e](x)`` over the tokens each expert was routed.

    ``x [tokens, hidden]``, ``routing [tokens, num_experts]`` (zero = not routed);
    each ``experts[e](op, rows)`` maps ``[n, hidden] -> [n, out]``. Returns ``[tokens, out]``.
    """
    routing = op.CastLike(routing, x)
    out = None
    for e, expert in enumerate(experts):
        weight = op.Gather(routing, op.Constant(value_int=e), axis=1)  # [tokens]
        rows = op.Reshape(op.NonZero(weight), op.Constant(value_ints=[-1]))  # [n]
        y = expert(op, op.Gather(x, rows, axis=0))  # [n, out]
        y = op.Mul(y, op.Unsqueeze(op.Gather(weight, rows, axis=0), [-1]))
        if out is None:  # zeros [tokens, out], shaped like one expert's full output row count
            out = zero_rows(op, op.Slice(op.Shape(x), [0], [1]), op.Slice(op.Shape(y), [1], [2]))
        out = scatter_add_rows(op, out, rows, y)
    return op.CastLike(out, x)


def zero_rows(op, num_rows: ir.Value, width: ir.Value) -> ir.Value:
    """A float32 accumulator of zeros ``[num_rows, width]`` (both 1-D int64 shapes)."""
    zero = op.Constant(value=ir.tensor(np.array(0.0, dtype=np.float32)))
    return op.Expand(zero, op.Concat(num_rows, width, axis=0))


def scatter_add_rows(op, out: ir.Value, rows: ir.Value, y: ir.Value) -> ir.Value:
    """``out[rows] += y`` on a float32 accumulator.

    ONNX Runtime's CPU ``ScatterND`` adds only in float32 (not float16), so the sum is
    accumulated in float32 whatever the model dtype, and cast back once at the end.
    """
    y = op.Cast(y, to=FLOAT)
    return op.ScatterND(out, op.Unsqueeze(rows, [-1]), y, reduction="add")


class ExpertList(nn.ModuleList):
    """Experts stored one module per expert (``experts.{e}.*``), applied sparsely.

    Call :meth:`dispatch`, not the list: a ``ModuleList`` opens no name scope of its
    own (its children already carry ``experts.{e}``).
    """

    def dispatch(self, op, x: ir.Value, routing: ir.Value) -> ir.Value:
        return dispatch_experts(op, x, routing, list(self))


class ExpertW123(nn.Module):
    """``w2(act(w1(x)) * w3(x))``: one gated expert with the ``w1/w2/w3`` names of Mixtral-style checkpoints."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str = "silu") -> None:
        super().__init__()
        self.w1 = Linear(hidden_size, intermediate_size)
        self.w2 = Linear(intermediate_size, hidden_size)
        self.w3 = Linear(hidden_size, intermediate_size)
        self.act = get_activation(act)

    def forward(self, op, x: ir.Value) -> ir.Value:
        return self.w2(op, op.Mul(self.act(op, self.w1(op, x)), self.w3(op, x)))


class StackedTransposedParameter(nn.Parameter):
    """Per-expert linear weights: checkpoint ``[experts, out, in]``, stored ``[experts, in, out]``."""

    def __init__(self, num_experts: int, out_features: int, in_features: int) -> None:
        super().__init__([num_experts, in_features, out_features])
        self.checkpoint_shape = (num_experts, out_features, in_features)
        self.checkpoint_axes = (0, 2, 1)  # from_checkpoint is exactly this transpose

    def from_checkpoint(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array.transpose(0, 2, 1))


def expert_matmul(op, x: ir.Value, stacked: ir.Value, e: int) -> ir.Value:
    """``x @ stacked[e]`` for a stacked ``[experts, in, out]`` weight."""
    return op.MatMul(x, op.Gather(stacked, op.Constant(value_int=e), axis=0))


class StackedLinear(nn.Module):
    """Bias-free linear layers of all experts in one ``weight [experts, out, in]`` (checkpoint layout).

    ``self(op, x, e)`` applies expert ``e``; call the module (not a helper method) so that
    its parameter is registered under the module's name.
    """

    def __init__(self, num_experts: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = StackedTransposedParameter(num_experts, out_features, in_features)
        self.num_experts = num_experts

    def forward(self, op, x: ir.Value, expert: int) -> ir.Value:
        return expert_matmul(op, x, self.weight, expert)


def gated(op, act, gate_up: ir.Value) -> ir.Value:
    """``act(gate) * up`` for a fused ``[..., 2*inter]`` projection (gate first, as ``chunk(2)``)."""
    gate, up = op.Split(gate_up, axis=-1, num_outputs=2, _outputs=2)
    return op.Mul(act(op, gate), up)


class StackedGatedExperts(nn.Module):
    """Fused gated experts: ``gate_up_proj [E, 2*inter, hidden]``, ``down_proj [E, hidden, inter]``.

    The layout of transformers 5's in-memory ``*Experts`` modules, for checkpoints that
    store it (fused ``experts.gate_up_proj`` / ``experts.down_proj``).
    """

    def __init__(
        self,
        num_experts: int,
        hidden_size: int,
        intermediate_size: int,
        act: str = "silu",
    ) -> None:
        super().__init__()
        self.gate_up_proj = StackedTransposedParameter(
            num_experts, 2 * intermediate_size, hidden_size
        )
        self.down_proj = StackedTransposedParameter(num_experts, hidden_size, intermediate_size)
        self.num_experts = num_experts
        self.act = get_activation(act)

    def expert(self, op, e: int, x: ir.Value) -> ir.Value:
        h = gated(op, self.act, expert_matmul(op, x, self.gate_up_proj, e))
        return expert_matmul(op, h, self.down_proj, e)

    def forward(self, op, x: ir.Value, routing: ir.Value) -> ir.Value:
        experts = [
            (lambda op, rows, e=e: self.expert(op, e, rows)) for e in range(self.num_experts)
        ]
        return dispatch_experts(op, x, routing, experts)


def flatten_tokens(op, x: ir.Value, hidden_size: int) -> ir.Value:
    """``[batch, seq, hidden] -> [batch*seq, hidden]``."""
    return op.Reshape(x, op.Constant(value_ints=[-1, hidden_size]))


def unflatten_tokens(op, y: ir.Value, like: ir.Value) -> ir.Value:
    """``[batch*seq, d] -> [batch, seq, d]`` with batch and seq taken from ``like``."""
    shape = op.Concat(op.Slice(op.Shape(like), [0], [2]), op.Slice(op.Shape(y), [1], [2]), axis=0)
    return op.Reshape(y, shape)


def stack_expert_weights(
    weights: dict, prefix: str, num_experts: int, parts: Sequence[str], target: str
) -> dict:
    """Replace per-expert tensors by one lazily stacked ``[experts, sum(rows), in]`` tensor.

    For expert ``e`` the tensors ``{prefix}.{e}.{part}`` of every ``part`` are concatenated
    along their first (output) axis, then the experts are stacked: e.g. ``parts=("w1.weight",
    "w3.weight")`` gives the fused ``gate_up_proj`` layout of :class:`StackedGatedExperts`.
    The result is stored under ``target``; nothing is read until the tensor is written.
    """
    from mobius.weights._apply import DerivedTensor  # the weight pipeline imports components

    names = [[f"{prefix}.{e}.{part}" for part in parts] for e in range(num_experts)]
    sources = [[weights.pop(name) for name in row] for row in names]
    first = sources[0]
    rows = sum(source.shape[0] for source in first)

    def stacked() -> np.ndarray:
        return np.stack(
            [np.concatenate([s.numpy() for s in row], axis=0) for row in sources], axis=0
        )

    weights[target] = DerivedTensor(
        stacked, (num_experts, rows, *first[0].shape[1:]), first[0].dtype
    )
    return weights
