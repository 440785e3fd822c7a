"""MPT: ALiBi attention with a fused ``Wqkv``, optional ``clip_qkv``, no biases anywhere.

MPT's ALiBi uses the raw cache index of each key (no correction for left padding,
unlike Bloom) and its own slope schedule (``alibi_bias_max``, heads rounded up to
a power of two). LayerNorms have weights only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnxscript import nn

from mobius.components import Attention, Embedding, LayerNorm, Linear, merge_heads
from mobius.config import ArchitectureConfig
from mobius_text.models._alibi import alibi, alibi_attention_bias
from mobius_text.models.llama import LlamaForCausalLM


def mpt_alibi_slopes(num_heads: int, alibi_bias_max: float = 8.0) -> np.ndarray:
    """Per-head slopes ``[heads]`` float32, as MPT computes them.

    ``1 / 2**(i * max / n)`` for ``n`` = heads rounded up to a power of two; when
    that rounding changed ``n``, the odd-indexed slopes come first, then the even.
    """
    padded = 2 ** math.ceil(math.log2(num_heads))
    exponents = np.arange(1, padded + 1, dtype=np.float32) * np.float32(alibi_bias_max / padded)
    slopes = (np.float32(1.0) / np.power(np.float32(2.0), exponents)).astype(np.float32)
    if padded != num_heads:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:num_heads]
    return slopes


@dataclass
class MptConfig(ArchitectureConfig):
    clip_qkv: float | None = None
    softmax_scale: float | None = None
    alibi_bias_max: float = 8.0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        attn = hf_config.attn_config
        if not hf_config.no_bias:
            raise NotImplementedError("MPT with biases (no_bias=False) is not supported")
        if not attn.alibi:
            raise NotImplementedError("MPT without ALiBi (learned positions) is not supported")
        heads = hf_config.n_heads
        return {
            **fields,
            "num_key_value_heads": heads,  # multi-head only, as transformers implements it
            "head_dim": hf_config.d_model // heads,
            "intermediate_size": int(hf_config.expansion_ratio * hf_config.d_model),
            "hidden_act": "gelu",
            "rms_norm_eps": hf_config.layer_norm_epsilon,
            "max_position_embeddings": hf_config.max_seq_len,
            "rope": None,
            "layer_types": [],
            "sliding_window": None,
            "clip_qkv": attn.clip_qkv,
            "softmax_scale": attn.softmax_scale,
            "alibi_bias_max": attn.alibi_bias_max,
        }


class MptAttention(Attention):
    """Fused ``Wqkv`` (q, k, v concatenated), clamped to ``±clip_qkv`` when set; output ``out_proj``."""

    def __init__(self, config: MptConfig) -> None:
        nn.Module.__init__(self)  # no separate q/k/v projections: the checkpoint fuses them
        hidden = config.hidden_size
        self.Wqkv = Linear(hidden, 3 * hidden)
        self.out_proj = Linear(hidden, hidden)
        self.num_heads = self.num_kv_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.scale = config.softmax_scale or self.head_dim**-0.5
        self.clip_qkv = config.clip_qkv

    def project_qkv(self, op, x):
        qkv = self.Wqkv(op, x)
        if self.clip_qkv:
            qkv = op.Clip(qkv, -float(self.clip_qkv), float(self.clip_qkv))
        q, k, v = op.Split(qkv, axis=-1, num_outputs=3, _outputs=3)
        return self.split_heads(op, q), self.split_heads(op, k), self.split_heads(op, v)

    def forward(self, op, x, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = merge_heads(op, y)
        return self.out_proj(op, y), (present_key, present_value)


class MptMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.up_proj = Linear(hidden_size, intermediate_size)
        self.down_proj = Linear(intermediate_size, hidden_size)

    def forward(self, op, x):
        return self.down_proj(op, op.Gelu(self.up_proj(op, x), approximate="none"))


class MptBlock(nn.Module):
    def __init__(self, config: MptConfig) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.norm_1 = LayerNorm(hidden, eps, bias=False)
        self.attn = MptAttention(config)
        self.norm_2 = LayerNorm(hidden, eps, bias=False)
        self.ffn = MptMLP(hidden, config.intermediate_size)

    def forward(self, op, x, bias, past_key, past_value):
        h, present = self.attn(op, self.norm_1(op, x), bias, past_key, past_value)
        x = op.Add(x, h)
        return op.Add(x, self.ffn(op, self.norm_2(op, x))), present


class MptModel(nn.Module):
    """HF ``transformer.*``: ``wte``, ``blocks``, ``norm_f``."""

    def __init__(self, config: MptConfig) -> None:
        super().__init__()
        self.wte = Embedding(config.vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList([MptBlock(config) for _ in range(config.num_hidden_layers)])
        self.norm_f = LayerNorm(config.hidden_size, config.rms_norm_eps, bias=False)
        self.slopes = mpt_alibi_slopes(config.num_attention_heads, config.alibi_bias_max)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        # ALiBi: positions come from the cache index; position_ids is part of the contract only.
        x = self.wte(op, input_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        # Raw cache index of each key, padding included: transformers' MPT slices its
        # ALiBi table by cache length only (rows differ from it by a constant, which softmax ignores).
        total = op.Squeeze(op.Shape(attention_mask, start=1, end=2), [0])
        key_index = op.Unsqueeze(op.Range(0, total, 1), [0])  # [1, total]
        linear_bias = alibi(op, self.slopes, key_index)
        bias = alibi_attention_bias(op, attention_mask, seq_len, x.dtype, linear_bias)
        presents = []
        for block, (past_key, past_value) in zip(self.blocks, past_key_values, strict=True):
            x, present = block(op, x, bias, past_key, past_value)
            presents.append(present)
        return self.norm_f(op, x), presents


class MptForCausalLM(LlamaForCausalLM):
    """The causal LM: ``transformer`` plus an ``lm_head`` (tied to ``wte`` by default)."""

    config_class = MptConfig
    model_class = MptModel
    backbone_name = "transformer"

    def input_embedding(self):
        return self.transformer.wte


MODEL_TYPES = {"mpt": MptForCausalLM}
