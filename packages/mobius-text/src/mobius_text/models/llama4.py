"""Llama 4 text decoder (HF ``llama4_text``): interleaved MoE, chunked local attention, NoPE layers.

What differs from Llama:

- RoPE layers rotate *interleaved* channel pairs (complex form), attend only within
  fixed chunks of ``attention_chunk_size`` tokens (counted from each row's first real
  token), and L2-normalise queries and keys after the rotation (``use_qk_norm``);
- NoPE layers (``no_rope_layers[i] == 0``) attend to the whole context and scale
  their queries by ``1 + attn_scale * log1p(floor((p + 1) / floor_scale))``, ``p`` the
  token's index in the cache (not its position id) — "attention temperature tuning";
- layers in ``moe_layers`` replace the MLP with a shared expert plus ``num_local_experts``
  routed experts: top-k router logits go through a sigmoid (0 elsewhere) and scale each
  expert's *input*; the others keep a dense MLP of ``intermediate_size_mlp``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Attention,
    DecoderLayer,
    GatedMLP,
    Linear,
    RMSNorm,
    get_activation,
    lowest_value,
    merge_heads,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel

INT64 = ir.DataType.INT64


@dataclass
class Llama4TextConfig(LlamaConfig):
    """Llama fields plus the MoE layout, the NoPE/chunked layer pattern and temperature tuning."""

    intermediate_size_mlp: int = 0
    num_local_experts: int = 0
    num_experts_per_tok: int = 1
    moe_layers: list[int] = field(default_factory=list)
    # 1 where the layer uses RoPE (and chunked attention), 0 for a NoPE global layer.
    no_rope_layers: list[int] = field(default_factory=list)
    attention_chunk_size: int | None = None
    use_qk_norm: bool = False
    attn_temperature_tuning: bool = False
    floor_scale: float = 8192.0
    attn_scale: float = 0.1

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "mlp_bias": False,  # Llama 4 MLPs and experts have no biases
            "intermediate_size_mlp": hf_config.intermediate_size_mlp,
            "num_local_experts": hf_config.num_local_experts,
            "num_experts_per_tok": hf_config.num_experts_per_tok,
            "moe_layers": list(hf_config.moe_layers),
            "no_rope_layers": list(hf_config.no_rope_layers),
            "attention_chunk_size": hf_config.attention_chunk_size,
            "use_qk_norm": bool(hf_config.use_qk_norm),
            "attn_temperature_tuning": bool(hf_config.attn_temperature_tuning),
            "floor_scale": float(hf_config.floor_scale),
            "attn_scale": float(hf_config.attn_scale),
        }


def _floor_div(op, a: ir.Value, divisor: int) -> ir.Value:
    """Python ``a // divisor`` for int64 ``a`` of either sign (ONNX ``Div`` truncates)."""
    return op.Div(op.Sub(a, op.Mod(a, divisor)), divisor)


def chunked_attention_bias(
    op, attention_mask: ir.Value, query_length: ir.Value, dtype: ir.DataType, chunk_size: int
) -> ir.Value:
    """Additive mask ``[batch, 1, seq, total]``: causal, padding, and same-chunk only.

    Chunks start at each row's first real token, as in transformers'
    ``chunked_overlay``: ``(k - pad) // chunk == (q - pad) // chunk``.
    """
    total = op.Squeeze(op.Slice(op.Shape(attention_mask), [1], [2]), [0])
    key_pos = op.Range(op.Constant(value_int=0), total, op.Constant(value_int=1))  # [total]
    query_pos = op.Unsqueeze(
        op.Range(op.Sub(total, query_length), total, op.Constant(value_int=1)), [1]
    )  # [seq, 1]
    seen = op.CumSum(attention_mask, op.Constant(value_int=1))
    left_pad = op.ReduceSum(
        op.Cast(op.Equal(seen, op.Constant(value_int=0)), to=INT64),
        op.Constant(value_ints=[1]),
    )  # [batch, 1]
    left_pad = op.Unsqueeze(left_pad, [2])  # [batch, 1, 1]
    key_chunk = _floor_div(op, op.Sub(key_pos, left_pad), chunk_size)  # [batch, 1, total]
    query_chunk = _floor_div(op, op.Sub(query_pos, left_pad), chunk_size)  # [batch, seq, 1]
    visible = op.And(op.Equal(key_chunk, query_chunk), op.LessOrEqual(key_pos, query_pos))
    real_keys = op.Unsqueeze(op.Cast(attention_mask, to=ir.DataType.BOOL), [1])  # [batch,1,total]
    visible = op.Unsqueeze(op.And(visible, real_keys), [1])  # [batch, 1, seq, total]
    np_dtype = dtype.numpy()
    zero = op.Constant(value=ir.tensor(np.array(0, dtype=np_dtype)))
    lowest = op.Constant(value=ir.tensor(np.array(lowest_value(dtype), dtype=np_dtype)))
    return op.Where(visible, zero, lowest)


class Llama4TextAttention(Attention):
    """Attention with interleaved RoPE + L2 qk-norm (RoPE layers) or temperature tuning (NoPE layers)."""

    def __init__(
        self,
        config: Llama4TextConfig,
        use_rope: bool,
    ) -> None:
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
        )
        self.use_rope = use_rope
        self.qk_norm_eps = config.rms_norm_eps if config.use_qk_norm and use_rope else None
        self.temperature = (
            (config.floor_scale, config.attn_scale)
            if config.attn_temperature_tuning and not use_rope
            else None
        )

    def l2_norm(self, op, x: ir.Value) -> ir.Value:
        """``x * rsqrt(mean(x²) + eps)`` per head: an RMS norm without a weight."""
        ones = op.CastLike(op.Constant(value=ir.tensor(np.ones(self.head_dim, np.float32))), x)
        return op.RMSNormalization(x, ones, axis=-1, epsilon=self.qk_norm_eps, stash_type=1)

    def temperature_scales(self, op, x: ir.Value, past_key: ir.Value) -> ir.Value:
        """``[1, 1, seq, 1]`` query scales from the tokens' cache indices ``past .. past+seq-1``."""
        floor_scale, attn_scale = self.temperature
        past = op.Squeeze(op.Slice(op.Shape(past_key), [2], [3]), [0])
        seq = op.Squeeze(op.Slice(op.Shape(x), [1], [2]), [0])
        index = op.Cast(
            op.Range(past, op.Add(past, seq), op.Constant(value_int=1)), to=ir.DataType.FLOAT
        )
        steps = op.Floor(op.Div(op.Add(index, 1.0), floor_scale))
        scales = op.Add(op.Mul(op.Log(op.Add(steps, 1.0)), attn_scale), 1.0)  # log1p of an integer
        return op.CastLike(op.Reshape(scales, op.Constant(value_ints=[1, 1, -1, 1])), x)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        if self.use_rope:
            cos, sin = position_embeddings
            cos, sin = op.CastLike(cos, q), op.CastLike(sin, q)
            q = op.RotaryEmbedding(q, cos, sin, interleaved=1)
            k = op.RotaryEmbedding(k, cos, sin, interleaved=1)
        if self.qk_norm_eps is not None:
            q, k = self.l2_norm(op, q), self.l2_norm(op, k)
        if self.temperature is not None:
            q = op.Mul(q, self.temperature_scales(op, x, past_key))
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = merge_heads(op, y)
        return self.o_proj(op, y), (present_key, present_value)


class Llama4TextExperts(nn.Module):
    """All routed experts as fused 3-D weights: ``gate_up_proj [experts, hidden, 2*inter]``
    (gate then up halves) and ``down_proj [experts, inter, hidden]``.

    HF runs every expert on every token, the input scaled by its routing score (zero off
    the top-k, which gives an exactly zero output: the experts have no biases). Here each
    expert runs only on the tokens that picked it: the same sum at the top-k cost.
    """

    def __init__(self, hidden: int, inter: int, num_experts: int, act: str) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter([num_experts, hidden, 2 * inter])
        self.down_proj = nn.Parameter([num_experts, inter, hidden])
        self.num_experts = num_experts
        self.act = get_activation(act)

    def expert(self, op, x: ir.Value, e: int) -> ir.Value:
        index = op.Constant(value_int=e)
        gate_up = op.MatMul(x, op.Gather(self.gate_up_proj, index, axis=0))  # [n, 2*inter]
        gate, up = op.Split(gate_up, num_outputs=2, axis=-1, _outputs=2)
        return op.MatMul(op.Mul(up, self.act(op, gate)), op.Gather(self.down_proj, index, axis=0))

    def forward(self, op, x: ir.Value, scores: ir.Value) -> ir.Value:
        """``x [tokens, hidden]``, ``scores [tokens, experts]`` (zero off the top-k) → ``[tokens, hidden]``."""
        # Accumulated in float32: ORT's CPU ScatterND cannot add float16.
        out = op.Mul(op.Cast(x, to=ir.DataType.FLOAT), 0.0)  # [tokens, hidden]
        for e in range(self.num_experts):
            score = op.Gather(scores, op.Constant(value_int=e), axis=1)  # [tokens]
            rows = op.Reshape(op.NonZero(score), op.Constant(value_ints=[-1]))  # [n]
            scaled = op.Mul(
                op.Gather(x, rows, axis=0), op.Unsqueeze(op.Gather(score, rows, axis=0), [-1])
            )
            y = op.Cast(self.expert(op, scaled, e), to=ir.DataType.FLOAT)  # [n, hidden]
            out = op.ScatterND(out, op.Unsqueeze(rows, [-1]), y, reduction="add")
        return op.CastLike(out, x)


class Llama4TextMoe(nn.Module):
    """Shared expert plus routed experts whose *inputs* are scaled by sigmoid(top-k router logit)."""

    def __init__(self, config: Llama4TextConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.experts = Llama4TextExperts(
            hidden, config.intermediate_size, config.num_local_experts, config.hidden_act
        )
        self.router = Linear(hidden, config.num_local_experts)
        self.shared_expert = GatedMLP(hidden, config.intermediate_size, config.hidden_act)
        self.top_k, self.hidden = config.num_experts_per_tok, hidden

    def forward(self, op, x: ir.Value) -> ir.Value:
        flat = op.Reshape(x, op.Constant(value_ints=[-1, self.hidden]))  # [tokens, hidden]
        logits = self.router(op, flat)  # [tokens, experts]
        top_values, top_indices = op.TopK(
            logits, op.Constant(value_ints=[self.top_k]), axis=-1, _outputs=2
        )
        zeros = op.Mul(logits, 0.0)  # sigmoid(-inf) off the top-k
        scores = op.ScatterElements(zeros, top_indices, op.Sigmoid(top_values), axis=1)
        out = op.Add(self.shared_expert(op, flat), self.experts(op, flat, scores))
        return op.Reshape(out, op.Shape(x))


class Llama4TextDecoderLayer(DecoderLayer):
    """Pre-norm layer whose feed-forward block is HF's ``feed_forward`` (MoE or dense)."""

    mlp_name = "feed_forward"


class Llama4TextModel(LlamaModel):
    def make_layer(self, config, layer_idx):
        if layer_idx in config.moe_layers:
            feed_forward = Llama4TextMoe(config)
        else:
            feed_forward = GatedMLP(
                config.hidden_size, config.intermediate_size_mlp, config.hidden_act
            )
        return Llama4TextDecoderLayer(
            self_attn=Llama4TextAttention(config, self.layer_uses_rope(layer_idx)),
            mlp=feed_forward,
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )

    def layer_uses_rope(self, layer_idx: int) -> bool:
        return bool(self.config.no_rope_layers[layer_idx])

    def layer_bias(self, op, kind, attention_mask, seq_len, dtype):
        if kind == "chunked_attention":
            chunk = self.config.attention_chunk_size
            return chunked_attention_bias(op, attention_mask, seq_len, dtype, chunk)
        return super().layer_bias(op, kind, attention_mask, seq_len, dtype)


class Llama4ForCausalLM(LlamaForCausalLM):
    """Llama 4 text-only causal LM (HF ``Llama4ForCausalLM``)."""

    config_class = Llama4TextConfig
    model_class = Llama4TextModel


MODEL_TYPES = {"llama4_text": Llama4ForCausalLM}
