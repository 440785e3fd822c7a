"""HiDream-I1's blocks: SwiGLU and mixture-of-experts feed-forwards, joint attention, both block kinds.

Names follow diffusers' ``transformer_hidream_image.py`` (``ff_i.experts.0.w1``,
``attn1.to_q_t``, ``adaLN_modulation.1``). Token tensors are ``[batch, tokens, dim]``,
the conditioning ``temb`` ``[batch, dim]``.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, RMSNorm, bidirectional_attention
from mobius_diffusion.models._dit_blocks import WeightlessLayerNorm, gated, modulate

#: diffusers' ``HiDreamAttention`` eps of the query and key RMS norms (fixed, not in the config).
QK_NORM_EPS = 1e-5


def swiglu_inner(hidden_dim: int, multiple_of: int = 256) -> int:
    """``HiDreamImageFeedForwardSwiGLU``'s width: two thirds of ``hidden_dim``, rounded up."""
    inner = int(2 * hidden_dim / 3)
    return multiple_of * ((inner + multiple_of - 1) // multiple_of)


class HiDreamImageFeedForwardSwiGLU(nn.Module):
    """``w2(silu(w1(x)) * w3(x))``, no biases."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        inner = swiglu_inner(hidden_dim)
        self.w1 = Linear(dim, inner)
        self.w2 = Linear(inner, dim)
        self.w3 = Linear(dim, inner)

    def forward(self, op, x):
        gate = self.w1(op, x)
        return self.w2(op, op.Mul(op.Mul(gate, op.Sigmoid(gate)), self.w3(op, x)))


class MOEFeedForwardSwiGLU(nn.Module):
    """A shared expert plus ``top_k`` of the routed experts, weighted by their softmax scores.

    The gate (``gate.weight [experts, dim]``) scores every expert per token; the
    ``top_k`` best keep their score (not renormalised, as diffusers), the others
    weigh zero. Every expert runs on every token and the weighted sum is taken:
    ``experts / top_k`` times the routed experts' compute of sparse dispatch (2x for
    HiDream-I1's 4 experts, 2 active), in exchange for a graph of standard ops with
    no data-dependent shapes.
    """

    def __init__(self, dim: int, num_experts: int, top_k: int) -> None:
        super().__init__()
        self.top_k, self.num_experts = top_k, num_experts
        self.shared_experts = HiDreamImageFeedForwardSwiGLU(dim, 2 * dim)
        self.experts = nn.ModuleList(
            [HiDreamImageFeedForwardSwiGLU(dim, 4 * dim) for _ in range(num_experts)]
        )
        self.gate = Linear(dim, num_experts)  # diffusers' MoEGate.weight, applied as F.linear

    def forward(self, op, x):
        scores = op.Softmax(self.gate(op, x), axis=-1)  # [b, n, experts]
        top, index = op.TopK(scores, op.Constant(value_ints=[self.top_k]), axis=-1, _outputs=2)
        zeros = op.CastLike(
            op.ConstantOfShape(op.Shape(scores), value=ir.tensor(np.zeros(1, np.float32))), scores
        )
        weights = op.ScatterElements(zeros, index, top, axis=-1)  # [b, n, experts]
        if self.num_experts == 1:
            weights = [weights]
        else:
            weights = op.Split(
                weights, axis=-1, num_outputs=self.num_experts, _outputs=self.num_experts
            )
        routed = None
        for expert, weight in zip(self.experts, weights, strict=True):
            y = op.Mul(expert(op, x), weight)
            routed = y if routed is None else op.Add(routed, y)
        return op.Add(routed, self.shared_experts(op, x))


def feed_forward(dim: int, num_experts: int, top_k: int) -> nn.Module:
    """The image stream's feed-forward: mixture of experts, or one SwiGLU with no routed experts."""
    if num_experts:
        return MOEFeedForwardSwiGLU(dim, num_experts, top_k)
    return HiDreamImageFeedForwardSwiGLU(dim, 4 * dim)


class HiDreamAttention(nn.Module):
    """Image (and, unless ``single``, text: the ``*_t`` projections) tokens attending together.

    Queries and keys are RMS-normed over all heads at once, then rotated;
    ``rotary`` is ``(cos, sin)`` ``[batch, tokens, rotary_dim/2]`` of the joint
    sequence ``[image, text]`` (adjacent channel pairs; ``rotary_dim`` the head's
    first half when HiDream's axes cover only that). ``keep`` ``[1, tokens, 1]``
    multiplies the keys: zero at the padding of a non-square image, as diffusers
    masks it (the padded keys score zero; their values still count).
    """

    def __init__(self, dim: int, heads: int, head_dim: int, rotary_dim: int, single: bool):
        super().__init__()
        inner = heads * head_dim
        self.heads, self.head_dim, self.rotary_dim, self.single = (
            heads,
            head_dim,
            rotary_dim,
            single,
        )
        for suffix in ("",) if single else ("", "_t"):
            setattr(self, f"to_q{suffix}", Linear(dim, inner, bias=True))
            setattr(self, f"to_k{suffix}", Linear(inner, inner, bias=True))
            setattr(self, f"to_v{suffix}", Linear(inner, inner, bias=True))
            setattr(self, f"to_out{suffix}", Linear(inner, dim, bias=True))
            setattr(self, f"q_rms_norm{suffix}", RMSNorm(inner, QK_NORM_EPS))
            setattr(self, f"k_rms_norm{suffix}", RMSNorm(inner, QK_NORM_EPS))

    def project(self, op, x, suffix: str):
        q = getattr(self, f"q_rms_norm{suffix}")(op, getattr(self, f"to_q{suffix}")(op, x))
        k = getattr(self, f"k_rms_norm{suffix}")(op, getattr(self, f"to_k{suffix}")(op, x))
        return q, k, getattr(self, f"to_v{suffix}")(op, x)

    def rotate(self, op, x, rotary):
        cos, sin = rotary
        partial = (
            {} if self.rotary_dim == self.head_dim else {"rotary_embedding_dim": self.rotary_dim}
        )
        return op.RotaryEmbedding(x, cos, sin, interleaved=1, num_heads=self.heads, **partial)

    def forward(self, op, x, context, rotary, keep):
        q, k, v = self.project(op, x, "")
        if not self.single:
            q_t, k_t, v_t = self.project(op, context, "_t")
            q, k, v = (op.Concat(a, b, axis=1) for a, b in ((q, q_t), (k, k_t), (v, v_t)))
        k = op.Mul(k, keep)
        q, k = self.rotate(op, q, rotary), self.rotate(op, k, rotary)
        out = bidirectional_attention(op, q, k, v, None, self.heads, self.head_dim**-0.5)
        if self.single:
            return self.to_out(op, out)
        image = op.Shape(x, start=1, end=2)
        out_i, out_t = op.Split(
            out, op.Concat(image, op.Shape(context, start=1, end=2), axis=0), axis=1, _outputs=2
        )
        return self.to_out(op, out_i), self.to_out_t(op, out_t)


def modulation(op, adaln: nn.ModuleList, temb, chunks: int) -> list:
    """``adaLN_modulation`` (SiLU, Linear) of ``temb`` split in ``chunks`` ``[batch, dim]`` vectors."""
    emb = adaln[1](op, op.Mul(temb, op.Sigmoid(temb)))
    return op.Split(emb, axis=1, num_outputs=chunks, _outputs=chunks)


class HiDreamImageSingleTransformerBlock(nn.Module):
    """One stream over ``[image, text]``: modulated attention and the mixture of experts."""

    def __init__(self, dim, heads, head_dim, rotary_dim, num_experts, top_k) -> None:
        super().__init__()
        self.adaLN_modulation = nn.ModuleList([nn.Module(), Linear(dim, 6 * dim, bias=True)])
        self.norm1_i = WeightlessLayerNorm(dim, 1e-6)
        self.attn1 = HiDreamAttention(dim, heads, head_dim, rotary_dim, single=True)
        self.norm3_i = WeightlessLayerNorm(dim, 1e-6)
        self.ff_i = feed_forward(dim, num_experts, top_k)

    def forward(self, op, x, temb, rotary, keep):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = modulation(
            op, self.adaLN_modulation, temb, 6
        )
        normed = modulate(op, self.norm1_i(op, x), shift_msa, scale_msa)
        x = op.Add(gated(op, gate_msa, self.attn1(op, normed, None, rotary, keep)), x)
        normed = modulate(op, self.norm3_i(op, x), shift_mlp, scale_mlp)
        return op.Add(gated(op, gate_mlp, self.ff_i(op, normed)), x)


class HiDreamImageTransformerBlock(nn.Module):
    """Two streams, image (``_i``) and text (``_t``): joint attention, a feed-forward each."""

    def __init__(self, dim, heads, head_dim, rotary_dim, num_experts, top_k) -> None:
        super().__init__()
        self.adaLN_modulation = nn.ModuleList([nn.Module(), Linear(dim, 12 * dim, bias=True)])
        self.norm1_i = WeightlessLayerNorm(dim, 1e-6)
        self.norm1_t = WeightlessLayerNorm(dim, 1e-6)
        self.attn1 = HiDreamAttention(dim, heads, head_dim, rotary_dim, single=False)
        self.norm3_i = WeightlessLayerNorm(dim, 1e-6)
        self.ff_i = feed_forward(dim, num_experts, top_k)
        self.norm3_t = WeightlessLayerNorm(dim, 1e-6)
        self.ff_t = HiDreamImageFeedForwardSwiGLU(dim, 4 * dim)

    def forward(self, op, x, context, temb, rotary, keep):
        chunks = modulation(op, self.adaLN_modulation, temb, 12)
        (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp) = chunks[:6]
        (t_shift_msa, t_scale_msa, t_gate_msa, t_shift_mlp, t_scale_mlp, t_gate_mlp) = chunks[6:]
        normed = modulate(op, self.norm1_i(op, x), shift_msa, scale_msa)
        normed_t = modulate(op, self.norm1_t(op, context), t_shift_msa, t_scale_msa)
        attn, attn_t = self.attn1(op, normed, normed_t, rotary, keep)
        x = op.Add(gated(op, gate_msa, attn), x)
        context = op.Add(gated(op, t_gate_msa, attn_t), context)
        normed = modulate(op, self.norm3_i(op, x), shift_mlp, scale_mlp)
        normed_t = modulate(op, self.norm3_t(op, context), t_shift_mlp, t_scale_mlp)
        x = op.Add(gated(op, gate_mlp, self.ff_i(op, normed)), x)
        context = op.Add(gated(op, t_gate_mlp, self.ff_t(op, normed_t)), context)
        return x, context


class HiDreamBlock(nn.Module):
    """diffusers' wrapper of each block: the checkpoint's ``double_stream_blocks.0.block.*``."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, op, *args):
        return self.block(op, *args)
