"""MiniMax-Text-01: softmax attention layers alternating with lightning (linear) attention, MoE MLPs.

A lightning layer keeps a ``[head_dim, head_dim]`` state per head, decayed by
``exp(-slope)`` at every token: ``S_t = exp(-slope) S_{t-1} + k_t^T v_t`` and
``o_t = q_t S_t``. transformers computes a prompt without a state block by block
from the checkpoint's ``query_decay``/``key_decay``/``diagonal_decay`` tables and
later tokens by that recurrence from ``slope_rate``; both are written here in
closed form over the whole step (``[seq, seq]`` decay weights per head), and the
graph picks the block form when there is no past. Residuals are scaled:
``norm(x) * alpha + f(norm(x)) * beta`` (the residual is the *normed* input).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Attention,
    Embedding,
    Linear,
    RMSNorm,
    attention_bias,
    get_activation,
    make_rotary_embedding,
    merge_heads,
    rotary_dim,
    split_heads,
)
from mobius.model import Model
from mobius.weights import DerivedTensor
from mobius_text.models.mamba import real_token_scale
from mobius_text.models.mixtral import MixtralConfig, MixtralModel

INT64 = ir.DataType.INT64


@dataclass
class MiniMaxConfig(MixtralConfig):
    block_size: int = 256
    full_attn_alpha_factor: float = 1.0
    full_attn_beta_factor: float = 1.0
    linear_attn_alpha_factor: float = 1.0
    linear_attn_beta_factor: float = 1.0
    mlp_alpha_factor: float = 1.0
    mlp_beta_factor: float = 1.0

    @classmethod
    def hf_fields(cls, hf_config):
        names = [
            "block_size",
            "full_attn_alpha_factor",
            "full_attn_beta_factor",
            "linear_attn_alpha_factor",
            "linear_attn_beta_factor",
            "mlp_alpha_factor",
            "mlp_beta_factor",
        ]
        return {**super().hf_fields(hf_config), **{n: getattr(hf_config, n) for n in names}}


def decay_tables(config: MiniMaxConfig, layer_idx: int) -> dict[str, np.ndarray]:
    """transformers' ``slope_rate`` and decay tables of a lightning layer, from the config."""
    heads, block, layers = config.num_attention_heads, config.block_size, config.num_hidden_layers
    base = 1 / (2 ** (8 / heads))
    factor = 1 - layer_idx / (layers - 1 + 1e-5) + 1e-5
    slope = (base ** np.arange(1, heads + 1) * factor)[:, None, None]  # [H, 1, 1]
    steps = np.arange(1, block + 1)[:, None]  # [B, 1]
    dist = slope * (steps - steps.T)[None]  # [H, B, B]
    diagonal = np.exp(np.where(dist >= 0, -dist, -np.inf))[None]
    tables = {
        "slope_rate": slope,
        "query_decay": np.exp(-slope * steps),
        "key_decay": np.exp(-slope * (block - steps)),
        "diagonal_decay": diagonal,
    }
    return {name: t.astype(np.float32) for name, t in tables.items()}


def _scale(op, x, factor: float):
    return x if factor == 1.0 else op.Mul(x, op.CastLike(op.Constant(value_float=factor), x))


def _decay(op, slope, steps):
    """``exp(-slope * steps)``: slope ``[heads, 1, 1]``, steps int64 broadcast against it."""
    return op.Exp(op.Neg(op.Mul(slope, op.CastLike(steps, slope))))


class LightningAttention(nn.Module):
    """Linear attention with a per-head exponential decay and a ``[heads, dim, dim]`` state."""

    def __init__(self, config: MiniMaxConfig) -> None:
        super().__init__()
        heads, dim, block = config.num_attention_heads, config.head_dim, config.block_size
        self.qkv_proj = Linear(config.hidden_size, 3 * heads * dim)
        self.output_gate = Linear(config.hidden_size, heads * dim)
        self.out_proj = Linear(heads * dim, config.hidden_size)
        self.norm = RMSNorm(heads * dim)  # transformers keeps its default eps here
        # The checkpoint's decay tables, used as stored (they are what transformers runs).
        self.slope_rate = nn.Parameter([heads, 1, 1])
        self.query_decay = nn.Parameter([heads, block, 1])
        self.key_decay = nn.Parameter([heads, block, 1])
        self.diagonal_decay = nn.Parameter([1, heads, block, block])
        self.act = get_activation(config.hidden_act)
        self.heads, self.dim, self.block = heads, dim, block

    def block_weights(self, op, pos, seq):
        """Prompt without past, block by block: ``[heads, seq, seq]`` weights and key scales.

        Within a block the weight is ``diagonal_decay``; an earlier block's key reaches a
        query through ``key_decay * block_decay^gap * query_decay``. The final state scales
        key ``j`` by the ``key_decay`` of its (possibly short, last) block and the decays of
        the blocks after it.
        """
        block = op.Constant(value_int=self.block)
        blk, off = op.Div(pos, block), op.Mod(pos, block)  # [seq]
        diag = op.Gather(op.Squeeze(self.diagonal_decay, [0]), off, axis=1)  # [H, seq, B]
        diag = op.Gather(diag, off, axis=2)  # [H, seq, seq]
        query_decay = op.Gather(self.query_decay, off, axis=1)  # [H, seq, 1]
        key_decay = op.Transpose(op.Gather(self.key_decay, off, axis=1), perm=[0, 2, 1])
        q_blk, k_blk = op.Unsqueeze(blk, [1]), op.Unsqueeze(blk, [0])  # [seq,1], [1,seq]
        gap = op.Max(op.Sub(op.Sub(q_blk, k_blk), 1), op.Constant(value_int=0))
        full_block_decay = _decay(op, self.slope_rate, block)  # [H, 1, 1]
        between = op.Pow(full_block_decay, op.CastLike(gap, full_block_decay))
        earlier = op.Mul(op.Mul(query_decay, between), key_decay)  # [H, seq, seq]
        zero = op.CastLike(op.Constant(value_float=0.0), diag)
        weights = op.Where(
            op.Equal(q_blk, k_blk), diag, op.Where(op.Less(k_blk, q_blk), earlier, zero)
        )
        # State: keys of the last block (length `tail`) use key_decay[B - tail:].
        last = op.Div(op.Sub(seq, 1), block)
        tail = op.Sub(seq, op.Mul(last, block))
        in_last = op.Equal(blk, last)
        shift = op.Where(in_last, op.Sub(block, tail), op.Constant(value_int=0))
        state_key_decay = op.Gather(self.key_decay, op.Add(off, shift), axis=1)  # [H, seq, 1]
        after = op.Mul(
            op.Pow(full_block_decay, op.CastLike(op.Sub(op.Sub(last, 1), blk), diag)),
            _decay(op, self.slope_rate, tail),
        )  # [H, 1, seq]: decay of the blocks after key j's
        one = op.CastLike(op.Constant(value_float=1.0), diag)
        after = op.Transpose(op.Where(op.Unsqueeze(in_last, [0]), one, after), perm=[0, 2, 1])
        return weights, op.Mul(state_key_decay, after)

    def recurrent_weights(self, op, pos, seq):
        """After a past: ``exp(-slope * (t - j))`` weights, query and key scales of the step."""
        dist = op.Sub(op.Unsqueeze(pos, [1]), op.Unsqueeze(pos, [0]))  # [seq, seq]
        causal = op.GreaterOrEqual(dist, op.Constant(value_int=0))
        decay = _decay(op, self.slope_rate, op.Where(causal, dist, op.Constant(value_int=0)))
        zero = op.CastLike(op.Constant(value_float=0.0), decay)
        weights = op.Where(causal, decay, zero)  # [H, seq, seq]
        query_scale = _decay(op, self.slope_rate, op.Unsqueeze(op.Add(pos, 1), [1]))  # [H,seq,1]
        key_scale = _decay(op, self.slope_rate, op.Unsqueeze(op.Sub(op.Sub(seq, 1), pos), [1]))
        return weights, query_scale, key_scale, _decay(op, self.slope_rate, seq)

    def forward(self, op, x, real, past_len, state):
        qkv = op.Mul(self.act(op, self.qkv_proj(op, x)), real)  # padding gives q = k = v = 0
        qkv = split_heads(op, qkv, self.heads, 3 * self.dim)  # [batch, H, seq, 3*dim]
        q, k, v = op.Split(qkv, num_outputs=3, axis=-1, _outputs=3)  # each [batch, H, seq, dim]
        seq = op.Squeeze(op.Shape(x, start=1, end=2), [0])
        pos = op.Range(op.Constant(value_int=0), seq, op.Constant(value_int=1))  # [seq]
        scores = op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2]))  # [batch, H, seq, seq]

        block_w, block_key_scale = self.block_weights(op, pos, seq)
        block_out = op.MatMul(op.Mul(scores, block_w), v)
        block_state = op.MatMul(op.Transpose(op.Mul(k, block_key_scale), perm=[0, 1, 3, 2]), v)

        rec_w, query_scale, key_scale, state_decay = self.recurrent_weights(op, pos, seq)
        rec_out = op.Add(
            op.MatMul(op.Mul(scores, rec_w), v), op.MatMul(op.Mul(q, query_scale), state)
        )
        rec_state = op.Add(
            op.Mul(state, state_decay),
            op.MatMul(op.Transpose(op.Mul(k, key_scale), perm=[0, 1, 3, 2]), v),
        )

        first = op.Equal(past_len, op.Constant(value_int=0))
        y = op.Where(first, block_out, rec_out)  # [batch, H, seq, dim]
        new_state = op.Where(first, block_state, rec_state)  # [batch, H, dim, dim]
        y = merge_heads(op, y)
        y = op.Mul(op.Sigmoid(self.output_gate(op, x)), self.norm(op, y))
        return self.out_proj(op, y), (new_state,)


class MiniMaxDecoderLayer(nn.Module):
    """``h = norm(x); x = h*alpha + mixer(h)*beta``, then the same with the sparse MoE."""

    def __init__(self, config: MiniMaxConfig, layer_idx: int, moe) -> None:
        super().__init__()
        self.linear = config.layer_types[layer_idx] == "linear_attention"
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if self.linear:
            self.self_attn = LightningAttention(config)
            self.alpha = config.linear_attn_alpha_factor
            self.beta = config.linear_attn_beta_factor
        else:
            self.self_attn = Attention(
                config.hidden_size,
                config.num_attention_heads,
                config.num_key_value_heads,
                config.head_dim,
                rotary_dim=rotary_dim(config.rope, config.head_dim),
            )
            self.alpha = config.full_attn_alpha_factor
            self.beta = config.full_attn_beta_factor
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.block_sparse_moe = moe
        self.mlp_alpha, self.mlp_beta = config.mlp_alpha_factor, config.mlp_beta_factor

    def forward(self, op, x, rope, bias, real, past_len, past):
        h = self.input_layernorm(op, x)
        if self.linear:
            y, present = self.self_attn(op, h, real, past_len, *past)
        else:
            y, present = self.self_attn(op, h, rope, bias, *past)
        x = op.Add(_scale(op, h, self.alpha), _scale(op, y, self.beta))
        h = self.post_attention_layernorm(op, x)
        y = self.block_sparse_moe(op, h)
        return op.Add(_scale(op, h, self.mlp_alpha), _scale(op, y, self.mlp_beta)), present


class MiniMaxModel(nn.Module):
    def __init__(self, config: MiniMaxConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        make_moe = MixtralModel.make_moe
        self.layers = nn.ModuleList(
            [
                MiniMaxDecoderLayer(config, i, make_moe(None, config))
                for i in range(config.num_hidden_layers)
            ]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        seq = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        total = op.Squeeze(op.Shape(attention_mask, start=1, end=2), [0])
        past_len = op.Sub(total, seq)
        # transformers masks full attention with its sliding window when the config has one.
        bias = attention_bias(op, attention_mask, seq, x.dtype, self.config.sliding_window)
        real = real_token_scale(op, attention_mask, input_ids, x)  # [batch, seq, 1]
        rope = self.rotary_emb(op, position_ids)
        presents = []
        for layer, layer_past in zip(self.layers, past, strict=True):
            x, present = layer(op, x, rope, bias, real, past_len, layer_past)
            presents.append(present)
        return self.norm(op, x), presents


class MiniMaxForCausalLM(Model):
    """MiniMax causal LM; the cache holds key/value for attention layers, a state for lightning."""

    config_class = MiniMaxConfig

    def __init__(self, config: MiniMaxConfig) -> None:
        super().__init__()
        self.config = config
        self.model = MiniMaxModel(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size)

    def cache_layout(self):
        c = self.config
        kv = ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]
        attention = [("key", kv), ("value", kv)]
        lightning = [("state", ["batch", c.num_attention_heads, c.head_dim, c.head_dim])]
        return [lightning if k == "linear_attention" else attention for k in c.layer_types]

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        hidden, presents = self.model(op, input_ids, attention_mask, position_ids, past)
        return self.lm_head(op, hidden), presents

    def sanitize(self, weights: dict) -> dict:
        """Checkpoints without the (derived) decay buffers get them as transformers computes them."""
        for i, kind in enumerate(self.config.layer_types):
            prefix = f"model.layers.{i}.self_attn."
            if kind != "linear_attention" or prefix + "slope_rate" in weights:
                continue
            for name, table in decay_tables(self.config, i).items():
                weights[prefix + name] = DerivedTensor(
                    lambda t=table: t, table.shape, ir.DataType.FLOAT
                )
        return weights


MODEL_TYPES = {"minimax": MiniMaxForCausalLM}
