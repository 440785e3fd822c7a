"""RecurrentGemma (Griffin): RG-LRU recurrent blocks and local (sliding-window) attention blocks.

A recurrent block computes ``linear_out(rg_lru(conv(linear_x(x))) * act(linear_y(x)))``:
a causal depthwise convolution (with bias, no activation), then the real-gated
linear recurrent unit ``h_t = a_t * h_{t-1} + sqrt(1 - a_t^2) * (i_t * x_t)`` with
``a_t = exp(-8 * r_t * softplus(recurrent_param))`` and block-diagonal (per head)
input and recurrence gates ``i_t``, ``r_t``. Where ``position_ids == 0`` the unit
resets (``a_t = 0``, no normaliser), as transformers does. Padding positions are
not masked in the recurrent path (transformers does not mask them either: the reset
at the first real token clears the recurrence; the convolution still sees them).

Around the blocks: embeddings times ``sqrt(hidden)`` rounded to bfloat16, Gemma
RMS norms ``(1 + weight)``, MLPs of half ``intermediate_size`` with biases, an
output projection with bias in attention, partial RoPE, and soft-capped logits.
States per recurrent layer: ``conv_state`` [batch, lru_width, conv1d_width - 1] and
``ssm_state`` (the RG-LRU state) [batch, lru_width].
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
from onnxscript import nn

from mobius.components import (
    Attention,
    Embedding,
    Linear,
    attention_bias,
    get_activation,
    make_rotary_embedding,
    merge_heads,
    rotary_dim,
    softcap,
    split_heads,
)
from mobius_text.models.gemma import GemmaRMSNorm
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM
from mobius_text.models.mamba import DepthwiseConv1d, HybridDecoderLayer, scan_sequence


@dataclass
class RecurrentGemmaConfig(LlamaConfig):
    lru_width: int = 0
    conv1d_width: int = 4
    logits_soft_cap: float = 30.0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            hidden_act=hf_config.hidden_activation,
            intermediate_size=hf_config.intermediate_size // 2,
            lru_width=hf_config.lru_width,
            conv1d_width=hf_config.conv1d_width,
            logits_soft_cap=float(hf_config.logits_soft_cap),
        )
        return fields


def linear_recurrence(op, state, decay, inputs):
    """``h_t = decay_t * h_{t-1} + inputs_t`` over axis 1; returns all ``h`` and the last one.

    ``state`` [batch, width]; ``decay`` and ``inputs`` [batch, seq, width].
    """

    def step(op, h, a_t, x_t):
        h = op.Add(op.Mul(a_t, h), x_t)
        return h, op.Identity(h)

    return scan_sequence(
        op, step, state, (decay, inputs), (2, 2, 2), (1, 1, 1), "rg_lru_step", y_rank=2
    )


class RecurrentGemmaRglru(nn.Module):
    """The real-gated linear recurrent unit with per-head (block-diagonal) gates."""

    def __init__(self, config: RecurrentGemmaConfig) -> None:
        super().__init__()
        heads, width = config.num_attention_heads, config.lru_width
        block = width // heads
        self.recurrent_param = nn.Parameter([width])
        self.input_gate_weight = nn.Parameter([heads, block, block])
        self.input_gate_bias = nn.Parameter([heads, block])
        self.recurrent_gate_weight = nn.Parameter([heads, block, block])
        self.recurrent_gate_bias = nn.Parameter([heads, block])
        self.heads, self.block = heads, block

    def gate(self, op, x_heads, weight, bias):
        """``sigmoid(x_h @ W_h + b_h)`` per head: [batch, heads, seq, block] → [batch, seq, width]."""
        y = op.Sigmoid(op.Add(op.MatMul(x_heads, weight), op.Unsqueeze(bias, [1])))
        return merge_heads(op, y)

    def forward(self, op, x, reset, state):
        # x [batch, seq, width]; reset [batch, seq, 1] bool (position 0)
        x_heads = split_heads(op, x, self.heads, self.block)
        input_gate = self.gate(op, x_heads, self.input_gate_weight, self.input_gate_bias)
        recurrent_gate = self.gate(
            op, x_heads, self.recurrent_gate_weight, self.recurrent_gate_bias
        )
        log_a = op.Mul(op.Mul(recurrent_gate, -8.0), op.Softplus(self.recurrent_param))
        a = op.Exp(log_a)
        multiplier = op.Sqrt(op.Sub(op.CastLike(1.0, a), op.Exp(op.Mul(log_a, 2.0))))
        multiplier = op.Where(reset, op.CastLike(1.0, a), multiplier)
        normalized = op.Mul(op.Mul(x, input_gate), multiplier)
        decay = op.Where(reset, op.CastLike(0.0, a), a)
        return linear_recurrence(op, state, decay, normalized)


class RecurrentGemmaRecurrentBlock(nn.Module):
    """``linear_out(rg_lru(conv(linear_x(x))) * act(linear_y(x)))``."""

    def __init__(self, config: RecurrentGemmaConfig) -> None:
        super().__init__()
        hidden, width = config.hidden_size, config.lru_width
        self.linear_y = Linear(hidden, width, bias=True)
        self.linear_x = Linear(hidden, width, bias=True)
        self.linear_out = Linear(width, hidden, bias=True)
        self.conv_1d = DepthwiseConv1d(width, config.conv1d_width, bias=True)
        self.rg_lru = RecurrentGemmaRglru(config)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x, reset, conv_state, lru_state):
        y_branch = self.act(op, self.linear_y(op, x))
        xs = op.Transpose(self.linear_x(op, x), perm=[0, 2, 1])  # [batch, width, seq]
        xs, new_conv_state = self.conv_1d.causal(op, conv_state, xs)
        xs = op.Transpose(xs, perm=[0, 2, 1])  # [batch, seq, width]
        h, new_lru_state = self.rg_lru(op, xs, reset, lru_state)
        return self.linear_out(op, op.Mul(h, y_branch)), (new_conv_state, new_lru_state)


class RecurrentGemmaMlp(nn.Module):
    def __init__(self, config: RecurrentGemmaConfig) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        self.gate_proj = Linear(hidden, inter, bias=True)
        self.up_proj = Linear(hidden, inter, bias=True)
        self.down_proj = Linear(inter, hidden, bias=True)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.down_proj(op, op.Mul(self.act(op, self.gate_proj(op, x)), self.up_proj(op, x)))


class EagerAttention(Attention):
    """Attention written out as transformers' eager path, so a fully masked (padding) query row
    averages all values as PyTorch does, where ONNX ``Attention`` returns zeros.

    Those rows matter here: the recurrent blocks do not mask padding, so the convolution
    carries padded positions' outputs into the first real tokens.
    """

    def repeat_kv(self, op, x):
        groups = self.num_heads // self.num_kv_heads
        x = op.Expand(op.Unsqueeze(x, [2]), [1, 1, groups, 1, 1])  # [batch, kv, groups, T, d]
        return op.Reshape(x, [0, self.num_heads, -1, self.head_dim])

    def attend(self, op, q, k, v, bias, past_key, past_value):
        key = op.Concat(past_key, k, axis=2)  # [batch, kv_heads, total, head_dim]
        value = op.Concat(past_value, v, axis=2)
        scores = op.MatMul(q, op.Transpose(self.repeat_kv(op, key), perm=[0, 1, 3, 2]))
        weights = op.Softmax(op.Add(op.Mul(scores, self.scale), bias), axis=-1)
        return op.MatMul(weights, self.repeat_kv(op, value)), key, value


class RecurrentGemmaDecoderLayer(HybridDecoderLayer):
    """The temporal block (local attention or recurrent) then the MLP block, each pre-norm.

    The recurrent block takes the reset flags where other hybrids pass the padding scale.
    """

    norm_names = ("temporal_pre_norm", "channel_pre_norm")
    attention_name = recurrent_name = "temporal_block"
    mlp_name = "mlp_block"

    def __init__(self, config: RecurrentGemmaConfig, layer_type: str) -> None:
        super().__init__(attends=layer_type == "sliding_attention")
        self.temporal_pre_norm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)
        if self.attends:
            self.temporal_block = EagerAttention(
                config.hidden_size,
                config.num_attention_heads,
                config.num_key_value_heads,
                config.head_dim,
                bias=config.attention_bias,
                out_bias=True,
                rotary_dim=rotary_dim(config.rope, config.head_dim),
            )
        else:
            self.temporal_block = RecurrentGemmaRecurrentBlock(config)
        self.channel_pre_norm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp_block = RecurrentGemmaMlp(config)


class RecurrentGemmaModel(nn.Module):
    def __init__(self, config: RecurrentGemmaConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [RecurrentGemmaDecoderLayer(config, kind) for kind in config.layer_types]
        )
        self.final_norm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )
        # transformers keeps the normaliser as a bfloat16 buffer: use its rounded value.
        self.normalizer = float(ml_dtypes.bfloat16(config.hidden_size**0.5))
        self.sliding_window = config.sliding_window

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        x = op.Mul(x, self.normalizer)
        seq = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        bias = attention_bias(op, attention_mask, seq, x.dtype, self.sliding_window)
        reset = op.Unsqueeze(op.Equal(position_ids, 0), [-1])  # [batch, seq, 1]
        rope = self.rotary_emb(op, position_ids)
        presents = []
        for layer, layer_past in zip(self.layers, past, strict=True):
            x, present = layer(op, x, rope, bias, reset, layer_past)
            presents.append(present)
        return self.final_norm(op, x), presents


class RecurrentGemmaForCausalLM(LlamaForCausalLM):
    """Logits soft-capped: ``cap * tanh(logits / cap)``."""

    config_class = RecurrentGemmaConfig
    model_class = RecurrentGemmaModel

    def cache_layout(self):
        c = self.config
        kv = ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]
        recurrent = [
            ("conv_state", ["batch", c.lru_width, c.conv1d_width - 1]),
            ("ssm_state", ["batch", c.lru_width]),
        ]
        return [
            [("key", kv), ("value", kv)] if kind == "sliding_attention" else recurrent
            for kind in c.layer_types
        ]

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        logits, presents = super().forward(op, input_ids, attention_mask, position_ids, past)
        return softcap(op, logits, self.config.logits_soft_cap), presents


MODEL_TYPES = {"recurrent_gemma": RecurrentGemmaForCausalLM}
