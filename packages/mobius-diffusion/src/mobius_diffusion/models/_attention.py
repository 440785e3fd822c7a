"""diffusers' ``Attention`` and ``FeedForward`` over token sequences ``[batch, tokens, dim]``.

Families subclass them for what they add (QK norms, joint text-image projections);
parameter names follow diffusers' (``to_q``, ``to_out.0``, ``net.0.proj``, ``net.2``).
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components import Linear, bidirectional_attention
from mobius.errors import ConfigError


class Attention(nn.Module):
    """Multi-head attention of ``hidden`` over itself or over ``context`` (cross-attention), no mask."""

    def __init__(
        self,
        query_dim: int,
        heads: int,
        dim_head: int,
        cross_attention_dim: int | None = None,
        bias: bool = False,
        out_bias: bool = True,
        out_dim: int | None = None,
    ) -> None:
        super().__init__()
        inner = heads * dim_head
        self.heads, self.dim_head = heads, dim_head
        self.to_q = Linear(query_dim, inner, bias=bias)
        self.to_k = Linear(cross_attention_dim or query_dim, inner, bias=bias)
        self.to_v = Linear(cross_attention_dim or query_dim, inner, bias=bias)
        self.to_out = nn.ModuleList([Linear(inner, out_dim or query_dim, bias=out_bias)])

    def attend(self, op, q, k, v, bias=None):
        """``[batch, tokens, heads * dim_head]`` queries over keys and values of the same layout.

        ``bias`` (optional) is added to the scores: ``[batch, 1, queries, keys]``.
        """
        return bidirectional_attention(op, q, k, v, bias, self.heads, self.dim_head**-0.5)

    def forward(self, op, hidden, context=None):
        context = hidden if context is None else context
        q, k, v = self.to_q(op, hidden), self.to_k(op, context), self.to_v(op, context)
        return self.to_out[0](op, self.attend(op, q, k, v))


class _GELUProjection(nn.Module):
    """``GELU`` / ``GEGLU`` / ``SwiGLU`` / ``LinearActivation(silu)`` of diffusers: ``proj``, then
    the activation (the gated ones: ``proj`` twice as wide, its first half times act(second))."""

    def __init__(self, dim: int, inner: int, kind: str, bias: bool) -> None:
        super().__init__()
        self.kind = kind
        self.proj = Linear(dim, inner * 2 if kind in ("geglu", "swiglu") else inner, bias=bias)

    def forward(self, op, x):
        x = self.proj(op, x)
        if self.kind == "linear-silu":
            return op.Mul(x, op.Sigmoid(x))
        if self.kind in ("geglu", "swiglu"):
            hidden, gate = op.Split(x, num_outputs=2, axis=-1, _outputs=2)
            act = op.Gelu(gate) if self.kind == "geglu" else op.Mul(gate, op.Sigmoid(gate))
            return op.Mul(hidden, act)
        return op.Gelu(x, approximate="tanh" if self.kind == "gelu-approximate" else "none")


class FeedForward(nn.Module):
    """``net.0`` (projection and activation), ``net.2`` (output projection); ``net.1`` is dropout."""

    ACTIVATIONS = ("gelu", "gelu-approximate", "geglu", "swiglu", "linear-silu")

    def __init__(
        self,
        dim: int,
        dim_out: int | None = None,
        mult: int = 4,
        activation_fn: str = "geglu",
        inner_dim: int | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if activation_fn not in self.ACTIVATIONS:
            raise ConfigError(f"feed-forward activation {activation_fn!r} is not built by mobius")
        inner = inner_dim or dim * mult
        self.net = nn.ModuleList(
            [
                _GELUProjection(dim, inner, activation_fn, bias),
                nn.Module(),
                Linear(inner, dim_out or dim, bias=bias),
            ]
        )

    def forward(self, op, x):
        return self.net[2](op, self.net[0](op, x))
