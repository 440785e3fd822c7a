"""Attention of encoder–decoder models: self-attention with a decoder cache, and cross-attention.

A decoder layer reads the encoder through cross-attention whose keys and values
depend on the encoder's states alone. The encoder graph projects them once per
layer (:meth:`Seq2SeqAttention.project_kv`) and hands them to every decoder
step as a cache ``[batch, kv_heads, source, head_dim]``; the decoder projects
only its queries. BART's lineage, T5's, Whisper, Speech2Text, Moonshine and
T5Gemma share these blocks, each under its checkpoint's projection names.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components._attention import scaled_dot_product_attention
from mobius.components._encoder import bidirectional_attention
from mobius.components._heads import merge_heads, split_heads
from mobius.components._linear import Linear
from mobius.components._runtime import MS_DOMAIN, fused_ops, typed_like


class Seq2SeqAttention(nn.Module):
    """Self-attention of an encoder (every real key, no cache) or a decoder (through its cache).

    ``x [batch, seq, hidden]``. The projections are ``q_proj``, ``k_proj``,
    ``v_proj`` and ``out_proj``; a family whose checkpoints name them otherwise
    sets ``projection_names``. ``bias`` is the query's and value's; the key's
    and output's default to it. ``source_size`` is the width of the states keys
    and values are projected from (the encoder's, for cross-attention); scores
    are scaled by ``scale`` (default ``1/sqrt(head_dim)``) and soft-capped by
    ``softcap`` when given.
    """

    # The checkpoint's names of the query, key, value and output projections.
    projection_names = ("q_proj", "k_proj", "v_proj", "out_proj")

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        head_dim: int | None = None,
        *,
        num_kv_heads: int | None = None,
        source_size: int | None = None,
        bias: bool = True,
        key_bias: bool | None = None,
        out_bias: bool | None = None,
        scale: float | None = None,
        softcap: float | None = None,
    ) -> None:
        super().__init__()
        head_dim = hidden_size // num_heads if head_dim is None else head_dim
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        source_size = hidden_size if source_size is None else source_size
        projections = (
            Linear(hidden_size, num_heads * head_dim, bias),
            Linear(source_size, num_kv_heads * head_dim, bias if key_bias is None else key_bias),
            Linear(source_size, num_kv_heads * head_dim, bias),
            Linear(num_heads * head_dim, hidden_size, bias if out_bias is None else out_bias),
        )
        for name, projection in zip(self.projection_names, projections, strict=True):
            setattr(self, name, projection)
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale = head_dim**-0.5 if scale is None else scale
        self.softcap = float(softcap or 0.0)

    def projections(self) -> tuple[Linear, Linear, Linear, Linear]:
        """The query, key, value and output projections, whatever the checkpoint calls them."""
        return tuple(getattr(self, name) for name in self.projection_names)

    def split_heads(self, op, x: ir.Value) -> ir.Value:
        """``[batch, seq, heads*head_dim]`` → ``[batch, heads, seq, head_dim]``."""
        return split_heads(op, x, head_dim=self.head_dim)

    def project_kv(self, op, states: ir.Value) -> tuple[ir.Value, ir.Value]:
        """``(key, value)`` ``[batch, kv_heads, seq, head_dim]`` of ``states``: a cross-attention cache."""
        _, k_proj, v_proj, _ = self.projections()
        return self.split_heads(op, k_proj(op, states)), self.split_heads(op, v_proj(op, states))

    def forward(self, op, x, bias=None, past_key=None, past_value=None):
        """Without a cache, the output; with one, the output and the present ``(key, value)``."""
        q_proj, k_proj, v_proj, out_proj = self.projections()
        if past_key is None:  # an encoder: the op splits the heads of 3-D inputs itself
            if self.num_kv_heads != self.num_heads or self.softcap:
                raise NotImplementedError("encoder self-attention has no grouped heads or cap")
            q, k, v = q_proj(op, x), k_proj(op, x), v_proj(op, x)
            return out_proj(
                op, bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)
            )
        q, (k, v) = self.split_heads(op, q_proj(op, x)), self.project_kv(op, x)
        y, present_key, present_value = scaled_dot_product_attention(
            op, q, k, v, bias, past_key, past_value, num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, scale=self.scale,
            softcap=self.softcap,
        )  # fmt: skip
        return out_proj(op, merge_heads(op, y)), (present_key, present_value)


class CrossAttention(Seq2SeqAttention):
    """Decoder queries over the encoder's keys and values, cached by :meth:`project_kv`.

    ``bias`` masks padded source positions (``None``: every one is real). ``cpu`` and
    ``cuda`` graphs without a mask or a cap use ONNX Runtime's ``MultiHeadAttention``,
    which reads the cached ``[batch, heads, source, head_dim]`` keys as they are and
    the queries unsplit: no head reshapes, and a faster kernel (Whisper-tiny's decoder
    step: 1.5 against 2.1 ms per cross-attention on one CPU thread).
    """

    def forward(self, op, x, bias, key, value):
        q_proj, _, _, out_proj = self.projections()
        if fused_ops(op) and bias is None and not self.softcap and self._same_heads():
            y = op.MultiHeadAttention(  # [batch, seq, heads*head_dim]
                q_proj(op, x), key, value, num_heads=self.num_heads, scale=self.scale,
                _domain=MS_DOMAIN,
            )  # fmt: skip
            return out_proj(op, typed_like(y, x))
        q = self.split_heads(op, q_proj(op, x))
        cap = {"softcap": self.softcap} if self.softcap else {}
        y = op.Attention(q, key, value, bias, scale=self.scale, **cap)
        return out_proj(op, merge_heads(op, y))

    def _same_heads(self) -> bool:
        """``MultiHeadAttention`` has as many key/value heads as query heads, of one width."""
        return self.num_kv_heads == self.num_heads
