"""Gemma 3n (text): Gemma 3's attention layout with AltUp, LAuReL, per-layer input
embeddings, Gaussian top-k activation sparsity and KV sharing across layers.

- AltUp keeps ``altup_num_inputs`` copies of the residual stream ``[n, batch, seq,
  hidden]``; each layer *predicts* all copies from a learned mix, runs on the active
  one, then *corrects* the others with the layer's innovation.
- LAuReL adds a low-rank residual branch next to attention.
- Each layer also reads its own slice of a per-layer embedding table (plus a
  projection of the token embeddings), gated into the non-active copies.
- The last ``num_kv_shared_layers`` layers compute no keys or values: they attend
  to the present cache of the last earlier layer of the same type, and have no
  cache tensors of their own.
- Norms are plain RMS norms (``x * w``, not Gemma's ``x * (1 + w)``); values are
  RMS-normalised without a scale; attention scores are not scaled.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Attention,
    Embedding,
    GatedMLP,
    Linear,
    RMSNorm,
    apply_rotary,
    attention_bias,
    get_activation,
    make_rotary_embedding,
    merge_heads,
    split_heads,
)
from mobius.config import ArchitectureConfig, RopeConfig
from mobius_text.models.gemma import ScaledEmbedding
from mobius_text.models.gemma2 import SoftcappedLogits
from mobius_text.models.llama import LlamaForCausalLM


@dataclass
class Gemma3nTextConfig(ArchitectureConfig):
    # ``rope`` (inherited) serves full-attention layers; sliding layers use this one.
    local_rope: RopeConfig = field(default_factory=RopeConfig)
    intermediate_sizes: list[int] = field(default_factory=list)  # one per layer
    activation_sparsity_pattern: list[float] = field(default_factory=list)
    # Per layer: None (own cache), "store" (own cache, shared onwards) or "reuse".
    kv_sharing_modes: list[str | None] = field(default_factory=list)
    final_logit_softcapping: float | None = None
    vocab_size_per_layer_input: int = 0
    hidden_size_per_layer_input: int = 0
    altup_num_inputs: int = 4
    altup_active_idx: int = 0
    altup_correct_scale: bool = True
    laurel_rank: int = 64

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        params = hf_config.rope_parameters  # one dict per layer type
        sizes = list(hf_config.intermediate_size)
        return {
            **fields,
            "hidden_act": hf_config.hidden_activation,
            "rope": RopeConfig.from_hf(SimpleNamespace(rope_parameters=params["full_attention"])),
            "local_rope": RopeConfig.from_hf(
                SimpleNamespace(rope_parameters=params["sliding_attention"])
            ),
            "intermediate_size": max(sizes),
            "intermediate_sizes": sizes,
            "activation_sparsity_pattern": list(hf_config.activation_sparsity_pattern),
            "kv_sharing_modes": list(hf_config.kv_sharing_modes),
            "final_logit_softcapping": hf_config.final_logit_softcapping,
            "vocab_size_per_layer_input": hf_config.vocab_size_per_layer_input,
            "hidden_size_per_layer_input": hf_config.hidden_size_per_layer_input,
            "altup_num_inputs": hf_config.altup_num_inputs,
            "altup_active_idx": hf_config.altup_active_idx,
            "altup_correct_scale": hf_config.altup_correct_scale,
            "laurel_rank": hf_config.laurel_rank,
        }


def _scaled(op, x, value: float):
    """``x * value``: the float32 scalar PyTorch keeps as a buffer, cast to ``x``'s type as
    ``model.to(dtype)`` casts its buffers (an f16 build multiplies in f16)."""
    scale = op.Constant(value=ir.tensor(np.array(value, dtype=np.float32)))
    return op.Mul(x, op.CastLike(scale, x))


def rms_normalize(op, x, eps: float):
    """``x / rms(x)`` without a learned scale (Gemma 3n's value norm)."""
    mean_square = op.ReduceMean(op.Mul(x, x), [-1], keepdims=1)
    return op.Mul(x, op.Pow(op.Add(mean_square, eps), -0.5))


def rms(op, x, floor: float | None = None):
    """``sqrt(mean(x^2))`` over the last axis, keeping it; ``floor`` clamps the mean first."""
    mean_square = op.ReduceMean(op.Mul(x, x), [-1], keepdims=1)
    return op.Sqrt(op.Max(mean_square, floor) if floor is not None else mean_square)


class Gemma3nAttention(Attention):
    """Unscaled attention with RMS-normed queries and keys and scale-free normed values."""

    # KV-sharing layers read this cache with queries rotated by HF position.
    rotary_in_kernel = False

    def __init__(self, config: Gemma3nTextConfig) -> None:
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            scale=1.0,
        )
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self.eps = config.rms_norm_eps

    def project_qkv(self, op, x):
        q, k, v = super().project_qkv(op, x)  # [batch, heads, seq, head_dim]
        return self.q_norm(op, q), self.k_norm(op, k), rms_normalize(op, v, self.eps)


class Gemma3nSharedKVAttention(nn.Module):
    """A KV-sharing layer's attention: its own queries over another layer's present K/V."""

    def __init__(
        self, hidden: int, heads: int, head_dim: int, bias: bool, eps: float, rotary_dim: int
    ) -> None:
        super().__init__()
        self.q_proj = Linear(hidden, heads * head_dim, bias)
        self.q_norm = RMSNorm(head_dim, eps)
        self.o_proj = Linear(heads * head_dim, hidden, bias)
        self.head_dim, self.rotary_dim = head_dim, rotary_dim

    def forward(self, op, x, position_embeddings, bias, key, value):
        q = split_heads(op, self.q_proj(op, x), head_dim=self.head_dim)
        q = self.q_norm(op, q)  # [batch, heads, seq, head_dim]
        cos, sin = position_embeddings
        q = apply_rotary(op, q, cos, sin, self.rotary_dim)
        y = op.Attention(q, key, value, bias, scale=1.0)
        return self.o_proj(op, merge_heads(op, y))


class Gemma3nMLP(GatedMLP):
    """GeGLU MLP; a layer with activation sparsity ``p`` keeps only gate values above
    ``mean + std * Phi^-1(p)`` (shifted down by that cutoff) before the activation."""

    def __init__(self, hidden: int, intermediate: int, act: str, sparsity: float) -> None:
        super().__init__(hidden, intermediate, act)
        # Phi^-1(p), rounded to float32 as transformers computes it.
        self.std_multiplier = (
            float(np.float32(statistics.NormalDist().inv_cdf(sparsity))) if sparsity > 0 else None
        )

    def forward(self, op, x):
        gate = self.gate_proj(op, x)
        if self.std_multiplier is not None:
            mean = op.ReduceMean(gate, [-1], keepdims=1)
            centered = op.Sub(gate, mean)
            std = op.Sqrt(op.ReduceMean(op.Mul(centered, centered), [-1], keepdims=1))
            cutoff = op.Add(mean, op.Mul(std, self.std_multiplier))
            gate = op.Relu(op.Sub(gate, cutoff))
        return self.down_proj(op, op.Mul(self.act(op, gate), self.up_proj(op, x)))


class Gemma3nLaurel(nn.Module):
    """Learned augmented residual: ``x + norm(right(left(x)))`` through a low rank."""

    def __init__(self, config: Gemma3nTextConfig) -> None:
        super().__init__()
        self.linear_left = Linear(config.hidden_size, config.laurel_rank)
        self.linear_right = Linear(config.laurel_rank, config.hidden_size)
        self.post_laurel_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, x):
        return op.Add(x, self.post_laurel_norm(op, self.linear_right(op, self.linear_left(op, x))))


class Gemma3nAltUp(nn.Module):
    """Alternating updates over the ``[n, batch, seq, hidden]`` stack of residual streams.

    Called as ``altup(op, "predict", streams)``, ``altup(op, "correct", predictions,
    activated)`` or ``altup(op, "scale", x)``: going through the module call keeps its
    parameters named ``altup.*``.
    """

    def __init__(self, config: Gemma3nTextConfig) -> None:
        super().__init__()
        n, hidden = config.altup_num_inputs, config.hidden_size
        # Saved in every checkpoint, read only when ``altup_correct_scale`` (else ignored).
        self.correct_output_scale = nn.Parameter([hidden]) if config.altup_correct_scale else None
        self.correction_coefs = Linear(n, n)
        self.prediction_coefs = Linear(n, n * n)
        self.modality_router = Linear(hidden, n)
        self.router_norm = RMSNorm(hidden, config.rms_norm_eps)
        self.n, self.active, self.hidden = n, config.altup_active_idx, hidden

    def forward(self, op, step: str, *args):
        return {"predict": self.predict, "correct": self.correct, "scale": self.scale}[step](
            op, *args
        )

    def scale(self, op, x):
        return op.Mul(x, self.correct_output_scale)

    def modalities(self, op, x):  # [batch, seq, hidden] -> [batch, seq, n]
        routed = _scaled(op, self.router_norm(op, x), self.hidden**-1.0)
        return op.Tanh(self.modality_router(op, routed))

    def active_stream(self, op, streams):
        return op.Gather(streams, op.Constant(value_int=self.active), axis=0)

    def predict(self, op, streams):
        coefs = self.prediction_coefs(op, self.modalities(op, self.active_stream(op, streams)))
        coefs = op.Transpose(
            op.Reshape(coefs, op.Constant(value_ints=[0, 0, self.n, self.n])), perm=[0, 1, 3, 2]
        )  # [batch, seq, n, n]
        mixed = op.MatMul(op.Transpose(streams, perm=[1, 2, 3, 0]), coefs)  # [b, s, hidden, n]
        return op.Add(op.Transpose(mixed, perm=[3, 0, 1, 2]), streams)

    def correct(self, op, predictions, activated):
        innovation = op.Sub(activated, self.active_stream(op, predictions))  # [b, s, hidden]
        coefs = op.Add(self.correction_coefs(op, self.modalities(op, activated)), 1.0)
        coefs = op.Unsqueeze(op.Transpose(coefs, perm=[2, 0, 1]), [-1])  # [n, b, s, 1]
        return op.Add(op.Mul(innovation, coefs), predictions)


class Gemma3nDecoderLayer(nn.Module):
    """One layer on the AltUp stack; ``shared`` layers attend to another layer's K/V."""

    def __init__(self, config: Gemma3nTextConfig, layer_idx: int, shared: bool) -> None:
        super().__init__()
        hidden, eps, per_layer = (
            config.hidden_size,
            config.rms_norm_eps,
            config.hidden_size_per_layer_input,
        )
        if shared:
            self.self_attn = Gemma3nSharedKVAttention(
                hidden,
                config.num_attention_heads,
                config.head_dim,
                config.attention_bias,
                eps,
                config.head_dim,
            )
        else:
            self.self_attn = Gemma3nAttention(config)
        self.mlp = Gemma3nMLP(
            hidden,
            config.intermediate_sizes[layer_idx],
            config.hidden_act,
            config.activation_sparsity_pattern[layer_idx],
        )
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.pre_feedforward_layernorm = RMSNorm(hidden, eps)
        self.post_feedforward_layernorm = RMSNorm(hidden, eps)
        self.altup = Gemma3nAltUp(config)
        self.laurel = Gemma3nLaurel(config)
        self.per_layer_input_gate = Linear(hidden, per_layer)
        self.per_layer_projection = Linear(per_layer, hidden)
        self.post_per_layer_input_norm = RMSNorm(hidden, eps)
        self.act = get_activation(config.hidden_act)
        self.shared, self.correct_scale = shared, config.altup_correct_scale

    def forward(self, op, streams, position_embeddings, bias, per_layer_input, kv):
        """``kv``: the past (key, value), or the shared present one for a shared layer."""
        predictions = self.altup(op, "predict", streams)
        active = self.altup.active_stream(op, predictions)  # [batch, seq, hidden]
        normed = self.input_layernorm(op, active)
        laurel = self.laurel(op, normed)
        if self.shared:
            attn, present = self.self_attn(op, normed, position_embeddings, bias, *kv), None
        else:
            attn, present = self.self_attn(op, normed, position_embeddings, bias, *kv)
        attn = op.Add(active, self.post_attention_layernorm(op, attn))
        x = op.Div(op.Add(attn, laurel), math.sqrt(2))
        x = op.Add(
            x,
            self.post_feedforward_layernorm(
                op, self.mlp(op, self.pre_feedforward_layernorm(op, x))
            ),
        )
        corrected = self.altup(op, "correct", predictions, x)

        first = self.altup.active_stream(op, corrected)
        if self.correct_scale:
            first = self.altup(op, "scale", first)
        gate = op.Mul(self.act(op, self.per_layer_input_gate(op, first)), per_layer_input)
        first = self.post_per_layer_input_norm(op, self.per_layer_projection(op, gate))
        # Streams 1.. take the per-layer update; stream 0 is kept as corrected.
        head, rest = op.Split(corrected, [1, self.altup.n - 1], axis=0, _outputs=2)
        return op.Concat(head, op.Add(rest, first), axis=0), present


class PerLayerEmbedding(Embedding):
    """Every layer's per-token input in one table ``[vocab, layers * dim]``, scaled by ``sqrt(dim)``.

    Ids past the table (it may be smaller than the vocabulary) read row 0, as in HF.
    """

    def __init__(self, vocab: int, layers: int, dim: int) -> None:
        super().__init__(vocab, layers * dim)
        self.vocab, self.layers, self.dim = vocab, layers, dim

    def forward(self, op, ids):
        in_table = op.And(op.GreaterOrEqual(ids, 0), op.Less(ids, self.vocab))
        x = super().forward(op, op.Where(in_table, ids, op.Constant(value_int=0)))
        x = _scaled(op, x, self.dim**0.5)
        return op.Reshape(x, op.Constant(value_ints=[0, 0, self.layers, self.dim]))


class Gemma3nTextModel(nn.Module):
    """Embeddings, AltUp stack in and out, layers, final norm (HF ``model.*``)."""

    def __init__(self, config: Gemma3nTextConfig) -> None:
        super().__init__()
        self.config = config
        hidden, layers = config.hidden_size, config.num_hidden_layers
        per_layer = config.hidden_size_per_layer_input
        self.embed_tokens = ScaledEmbedding(config.vocab_size, hidden)
        self.embed_tokens_per_layer = PerLayerEmbedding(
            config.vocab_size_per_layer_input, layers, per_layer
        )
        self.per_layer_model_projection = Linear(hidden, layers * per_layer)
        self.per_layer_projection_norm = RMSNorm(per_layer, config.rms_norm_eps)
        self.altup_projections = nn.ModuleList(
            [Linear(hidden, hidden) for _ in range(1, config.altup_num_inputs)]
        )
        self.altup_unembed_projections = nn.ModuleList(
            [Linear(hidden, hidden) for _ in range(1, config.altup_num_inputs)]
        )
        self.layers = nn.ModuleList(
            [
                Gemma3nDecoderLayer(config, i, mode == "reuse")
                for i, mode in enumerate(config.kv_sharing_modes)
            ]
        )
        self.norm = RMSNorm(hidden, config.rms_norm_eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )
        self.local_rotary_emb = make_rotary_embedding(
            config.local_rope, config.head_dim, config.max_position_embeddings
        )

    def per_layer_inputs(self, op, input_ids, x):
        """``[batch, seq, layers, per_layer]``: table rows plus a projection of the embeddings."""
        c = self.config
        projected = _scaled(op, self.per_layer_model_projection(op, x), c.hidden_size**-0.5)
        projected = op.Reshape(projected, op.Constant(value_ints=[0, 0, c.num_hidden_layers, -1]))
        projected = self.per_layer_projection_norm(op, projected)
        table = self.embed_tokens_per_layer(op, input_ids)
        return _scaled(op, op.Add(projected, table), 2.0**-0.5)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        c = self.config
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        per_layer_inputs = self.per_layer_inputs(op, input_ids, x)

        # The AltUp stack: x, then projections of x rescaled to x's RMS.
        target = rms(op, x)
        streams = [x] + [
            op.Div(op.Mul(proj(op, x), target), rms(op, proj(op, x), 1e-5))
            for proj in self.altup_projections
        ]
        streams = op.Concat(*[op.Unsqueeze(s, [0]) for s in streams], axis=0)  # [n, b, s, h]

        tables = {"full_attention": self.rotary_emb, "sliding_attention": self.local_rotary_emb}
        rope = {kind: tables[kind](op, position_ids) for kind in set(c.layer_types)}
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        windows = {"full_attention": None, "sliding_attention": c.sliding_window}
        biases = {
            kind: attention_bias(op, attention_mask, seq_len, x.dtype, windows[kind])
            for kind in set(c.layer_types)
        }
        shared_kv, presents = {}, []
        for i, (layer, kind, mode, past) in enumerate(
            zip(self.layers, c.layer_types, c.kv_sharing_modes, past_key_values, strict=True)
        ):
            per_layer_input = op.Gather(per_layer_inputs, op.Constant(value_int=i), axis=2)
            kv = shared_kv[kind] if mode == "reuse" else past
            streams, present = layer(op, streams, rope[kind], biases[kind], per_layer_input, kv)
            presents.append(present if present is not None else ())
            if mode == "store":
                shared_kv[kind] = present

        # Back to one stream: unembed-project streams 1.. to stream 0's RMS and average.
        outs = [
            op.Gather(streams, op.Constant(value_int=i), axis=0) for i in range(c.altup_num_inputs)
        ]
        target = rms(op, outs[0])
        outs = [outs[0]] + [
            op.Div(op.Mul(proj(op, s), target), rms(op, proj(op, s), 1e-5))
            for proj, s in zip(self.altup_unembed_projections, outs[1:], strict=True)
        ]
        stacked = op.Concat(*[op.Unsqueeze(s, [0]) for s in outs], axis=0)
        return self.norm(op, op.ReduceMean(stacked, [0], keepdims=0)), presents


class Gemma3nForCausalLM(SoftcappedLogits, LlamaForCausalLM):
    """Gemma 3n text causal LM; KV-sharing layers have no cache tensors."""

    config_class = Gemma3nTextConfig
    model_class = Gemma3nTextModel

    def cache_layout(self):
        c = self.config
        kv = [
            ("key", ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]),
            ("value", ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]),
        ]
        return [[] if mode == "reuse" else kv for mode in c.kv_sharing_modes]

    def sanitize(self, weights: dict) -> dict:
        weights = super().sanitize(weights)
        if not self.config.altup_correct_scale:
            weights = {k: v for k, v in weights.items() if not k.endswith("correct_output_scale")}
        return weights


MODEL_TYPES = {"gemma3n_text": Gemma3nForCausalLM}
