"""DBRX: fused, clipped ``Wqkv`` attention and a fine-grained MoE, with bias-free LayerNorms.

Checkpoint layout (``transformer.*``): each block holds ``norm_attn_norm.{norm_1, attn,
norm_2}`` and ``ffn.{router.layer, experts.mlp}``. The experts are three 2-D tensors
``w1``, ``v1``, ``w2`` of shape ``[experts * ffn_hidden, hidden]``: expert ``e`` computes
``(act(x @ w1[e].T) * (x @ v1[e].T)) @ w2[e]`` (``w2`` is used untransposed).
Routing: softmax over all experts, top-k, then the k weights divided by their
``moe_normalize_expert_weights``-norm.

transformers 5 builds the rotary table from the top-level ``rope_parameters`` and
ignores ``attn_config.rope_theta``, which is where DBRX checkpoints keep their theta;
we read ``attn_config.rope_theta`` when it is set (the value the model was trained with).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnxscript import nn

from mobius.components import (
    Attention,
    Embedding,
    LayerNorm,
    Linear,
    apply_rotary,
    attention_bias,
    get_activation,
    make_rotary_embedding,
    merge_heads,
)
from mobius.components.moe import dispatch_experts, flatten_tokens, top_k_routing, unflatten_tokens
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM

LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which DBRX uses everywhere


@dataclass
class DbrxConfig(LlamaConfig):
    clip_qkv: float | None = None
    num_experts: int = 4
    top_k: int = 1
    normalize_expert_weights: float | None = 1.0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        attn, ffn = hf_config.attn_config, hf_config.ffn_config
        rope = fields["rope"]
        if getattr(attn, "rope_theta", None) is not None:
            rope.theta = float(attn.rope_theta)
        fields.update(
            num_key_value_heads=attn.kv_n_heads,
            intermediate_size=ffn.ffn_hidden_size,
            hidden_act=(ffn.ffn_act_fn or {}).get("name", "silu"),
            rms_norm_eps=LAYER_NORM_EPS,
            clip_qkv=attn.clip_qkv,
            num_experts=ffn.moe_num_experts,
            top_k=ffn.moe_top_k,
            normalize_expert_weights=ffn.moe_normalize_expert_weights,
        )
        return fields


class DbrxAttention(Attention):
    """Attention with one fused ``Wqkv`` projection (optionally clamped) and ``out_proj``."""

    def __init__(self, config: DbrxConfig) -> None:
        nn.Module.__init__(self)
        hidden, heads, kv_heads = (
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
        )
        self.num_heads, self.num_kv_heads, self.head_dim = heads, kv_heads, config.head_dim
        self.rotary_dim, self.scale = config.head_dim, config.head_dim**-0.5
        self.Wqkv = Linear(hidden, hidden + 2 * kv_heads * config.head_dim)
        self.out_proj = Linear(hidden, hidden)
        self.clip_qkv = config.clip_qkv
        self.split_sizes = [heads * config.head_dim] + [kv_heads * config.head_dim] * 2

    def project_qkv(self, op, x):
        qkv = self.Wqkv(op, x)
        if self.clip_qkv is not None:
            qkv = op.Clip(qkv, op.CastLike(-self.clip_qkv, x), op.CastLike(self.clip_qkv, x))
        q, k, v = op.Split(qkv, op.Constant(value_ints=self.split_sizes), axis=-1, _outputs=3)
        return self.split_heads(op, q), self.split_heads(op, k), self.split_heads(op, v)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)
        cos, sin = position_embeddings
        q = apply_rotary(op, q, cos, sin, self.rotary_dim)
        k = apply_rotary(op, k, cos, sin, self.rotary_dim)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = merge_heads(op, y)
        return self.out_proj(op, y), (present_key, present_value)


class ExpertRowsParameter(nn.Parameter):
    """A ``[experts * rows, hidden]`` checkpoint tensor stored per expert, optionally transposed."""

    def __init__(self, num_experts: int, rows: int, hidden: int, transpose: bool) -> None:
        shape = [num_experts, hidden, rows] if transpose else [num_experts, rows, hidden]
        super().__init__(shape)
        self.checkpoint_shape = (num_experts * rows, hidden)
        self.split = (num_experts, rows, hidden)
        self.transpose = transpose

    def from_checkpoint(self, array: np.ndarray) -> np.ndarray:
        array = array.reshape(self.split)
        return np.ascontiguousarray(array.transpose(0, 2, 1) if self.transpose else array)


class DbrxExpertGLU(nn.Module):
    """``w1`` (gate), ``v1`` (up), ``w2`` (down) of every expert."""

    def __init__(self, config: DbrxConfig) -> None:
        super().__init__()
        e, f, h = config.num_experts, config.intermediate_size, config.hidden_size
        self.w1 = ExpertRowsParameter(e, f, h, transpose=True)  # [E, hidden, ffn]
        self.v1 = ExpertRowsParameter(e, f, h, transpose=True)
        self.w2 = ExpertRowsParameter(e, f, h, transpose=False)  # [E, ffn, hidden]
        self.act = get_activation(config.hidden_act)
        self.num_experts = e

    def expert(self, op, e: int, x):
        def take(w):
            return op.Gather(w, op.Constant(value_int=e), axis=0)

        gate = self.act(op, op.MatMul(x, take(self.w1)))
        return op.MatMul(op.Mul(gate, op.MatMul(x, take(self.v1))), take(self.w2))

    def forward(self, op, x, routing):
        experts = [lambda op, rows, e=e: self.expert(op, e, rows) for e in range(self.num_experts)]
        return dispatch_experts(op, x, routing, experts)


class DbrxExperts(nn.Module):
    def __init__(self, config: DbrxConfig) -> None:
        super().__init__()
        self.mlp = DbrxExpertGLU(config)

    def forward(self, op, x, routing):
        return self.mlp(op, x, routing)


class DbrxRouter(nn.Module):
    def __init__(self, config: DbrxConfig) -> None:
        super().__init__()
        self.layer = Linear(config.hidden_size, config.num_experts)

    def forward(self, op, x):
        return self.layer(op, x)


class DbrxFFN(nn.Module):
    def __init__(self, config: DbrxConfig) -> None:
        super().__init__()
        self.router = DbrxRouter(config)
        self.experts = DbrxExperts(config)
        self.hidden_size, self.top_k = config.hidden_size, config.top_k
        self.p = config.normalize_expert_weights

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)
        routing = top_k_routing(op, self.router(op, tokens), self.top_k, normalize=False)
        if self.p is not None:  # unselected experts are zero: the row norm is the top-k norm
            norm = op.Pow(
                op.ReduceSum(op.Pow(op.Abs(routing), self.p), [-1], keepdims=1), 1.0 / self.p
            )
            routing = op.Div(routing, norm)
        return unflatten_tokens(op, self.experts(op, tokens, routing), x)


class DbrxNormAttentionNorm(nn.Module):
    def __init__(self, config: DbrxConfig) -> None:
        super().__init__()
        self.norm_1 = LayerNorm(config.hidden_size, LAYER_NORM_EPS, bias=False)
        self.attn = DbrxAttention(config)
        self.norm_2 = LayerNorm(config.hidden_size, LAYER_NORM_EPS, bias=False)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        """Returns the residual stream after attention, its ``norm_2``, and the present cache."""
        h, present = self.attn(
            op, self.norm_1(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(h, x)
        return x, self.norm_2(op, x), present


class DbrxBlock(nn.Module):
    def __init__(self, config: DbrxConfig) -> None:
        super().__init__()
        self.norm_attn_norm = DbrxNormAttentionNorm(config)
        self.ffn = DbrxFFN(config)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        x, normed, present = self.norm_attn_norm(
            op, x, position_embeddings, bias, past_key, past_value
        )
        return op.Add(x, self.ffn(op, normed)), present


class DbrxTransformer(nn.Module):
    """``wte``, ``blocks`` and ``norm_f`` (HF ``transformer.*``)."""

    def __init__(self, config: DbrxConfig) -> None:
        super().__init__()
        self.wte = Embedding(config.vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList([DbrxBlock(config) for _ in range(config.num_hidden_layers)])
        self.norm_f = LayerNorm(config.hidden_size, LAYER_NORM_EPS, bias=False)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        x = self.wte(op, input_ids)
        rope = self.rotary_emb(op, position_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        bias = attention_bias(op, attention_mask, seq_len, x.dtype)
        presents = []
        for block, (past_key, past_value) in zip(self.blocks, past_key_values, strict=True):
            x, present = block(op, x, rope, bias, past_key, past_value)
            presents.append(present)
        return self.norm_f(op, x), presents


class DbrxForCausalLM(LlamaForCausalLM):
    config_class = DbrxConfig
    model_class = DbrxTransformer
    backbone_name = "transformer"

    def input_embedding(self):
        return self.transformer.wte


MODEL_TYPES = {"dbrx": DbrxForCausalLM}
