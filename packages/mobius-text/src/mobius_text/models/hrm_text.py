"""HRM-Text: a hierarchical recurrent decoder: two layer stacks (L and H) run in nested cycles.

    h = embed(ids) * embedding_scale;   l = z_L_init
    for each of H_cycles:
        for each of L_cycles:  l = L_module(l + h)
        h = H_module(h + l)
    logits = lm_head(h)

Each stack is ``num_layers_per_stack`` pre-norm layers and a final norm; every norm is
an RMSNorm without weight. Attention is multi-head (no grouped KV), with an output gate
``sigmoid(gate_proj(x))`` applied per channel before ``o_proj``; q, k, v and the gate
come from one fused ``gqkv_proj`` (rows ``[gate | q | k | v]``), the MLP's gate and up
projections from one ``gate_up_proj``, as the checkpoints store them.
Every stack invocation keeps its own KV cache, so the graph has
``num_layers_per_stack * H_cycles * (L_cycles + 1)`` cache entries (HF's
``num_hidden_layers``). The prefix-LM mask (bidirectional instruction block) needs
``token_type_ids``, which the causal-LM contract does not carry: prompts are causal,
as transformers runs them without ``token_type_ids``.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import (
    Embedding,
    Linear,
    WeightlessRMSNorm,
    apply_rotary,
    attention_bias,
    get_activation,
    make_rotary_embedding,
    merge_heads,
    split_heads,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM


@dataclass
class HrmTextConfig(LlamaConfig):
    num_layers_per_stack: int = 1
    H_cycles: int = 1
    L_cycles: int = 1
    embedding_scale: float = 1.0

    @classmethod
    def hf_fields(cls, hf_config):
        if hf_config.attention_bias or hf_config.mlp_bias:
            raise ValueError(
                "HRM-Text checkpoints fuse bias-free projections; biases are unsupported"
            )
        fields = super().hf_fields(hf_config)  # num_hidden_layers: one per stack invocation
        return {
            **fields,
            "num_key_value_heads": fields["num_attention_heads"],  # always MHA, whatever it says
            "num_layers_per_stack": hf_config.num_layers_per_stack,
            "H_cycles": hf_config.H_cycles,
            "L_cycles": hf_config.L_cycles,
            "embedding_scale": float(hf_config.embedding_scale),
        }


class GatedMHA(nn.Module):
    """Multi-head attention with a sigmoid output gate, from the fused ``gqkv_proj``."""

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int) -> None:
        super().__init__()
        self.gqkv_proj = Linear(hidden_size, 4 * num_heads * head_dim)
        self.o_proj = Linear(num_heads * head_dim, hidden_size)
        self.head_dim = head_dim
        self.scale = head_dim**-0.5

    def split_heads(self, op, x):
        return split_heads(op, x, head_dim=self.head_dim)  # [batch, heads, seq, head_dim]

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        gate, q, k, v = op.Split(self.gqkv_proj(op, x), axis=-1, num_outputs=4, _outputs=4)
        cos, sin = position_embeddings
        q = apply_rotary(op, self.split_heads(op, q), cos, sin, self.head_dim)
        k = apply_rotary(op, self.split_heads(op, k), cos, sin, self.head_dim)
        y, present_key, present_value = op.Attention(
            q, k, self.split_heads(op, v), bias, past_key, past_value, scale=self.scale, _outputs=3
        )
        y = merge_heads(op, y)
        return self.o_proj(op, op.Mul(op.Sigmoid(gate), y)), (present_key, present_value)


class FusedGatedMLP(nn.Module):
    """``down(act(gate) * up)`` with gate and up from one ``gate_up_proj`` (rows ``[gate | up]``)."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str) -> None:
        super().__init__()
        self.gate_up_proj = Linear(hidden_size, 2 * intermediate_size)
        self.down_proj = Linear(intermediate_size, hidden_size)
        self.act = get_activation(act)

    def forward(self, op, x):
        gate, up = op.Split(self.gate_up_proj(op, x), axis=-1, num_outputs=2, _outputs=2)
        return self.down_proj(op, op.Mul(self.act(op, gate), up))


class HrmTextDecoderLayer(nn.Module):
    """``x + attn(norm(x))`` then ``x + mlp(norm(x))``, the norms weightless."""

    def __init__(self, config: HrmTextConfig) -> None:
        super().__init__()
        c = config
        self.attn = GatedMHA(c.hidden_size, c.num_attention_heads, c.head_dim)
        self.mlp = FusedGatedMLP(c.hidden_size, c.intermediate_size, c.hidden_act)
        self.input_layernorm = WeightlessRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = WeightlessRMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, h)
        return op.Add(x, self.mlp(op, self.post_attention_layernorm(op, x))), present


class HrmTextStack(nn.Module):
    """``num_layers_per_stack`` layers and a weightless final norm."""

    def __init__(self, config: HrmTextConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [HrmTextDecoderLayer(config) for _ in range(config.num_layers_per_stack)]
        )
        self.final_norm = WeightlessRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, x, position_embeddings, bias, caches):
        presents = []
        for layer, (past_key, past_value) in zip(self.layers, caches, strict=True):
            x, present = layer(op, x, position_embeddings, bias, past_key, past_value)
            presents.append(present)
        return self.final_norm(op, x), presents


class HrmTextModel(nn.Module):
    """Embeddings, the L and H stacks and the initial low-level state (HF ``model.*``)."""

    def __init__(self, config: HrmTextConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.L_module = HrmTextStack(config)
        self.H_module = HrmTextStack(config)
        self.z_L_init = nn.Parameter([config.hidden_size])
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        c = self.config
        high = op.Mul(self.embed_tokens(op, input_ids), c.embedding_scale)  # [batch, seq, hidden]
        low = self.z_L_init  # [hidden], broadcast over batch and sequence
        rope = self.rotary_emb(op, position_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        bias = attention_bias(op, attention_mask, seq_len, high.dtype)
        per_stack = c.num_layers_per_stack
        presents = []

        def run(stack, x, invocation):
            caches = past_key_values[invocation * per_stack : (invocation + 1) * per_stack]
            x, stack_presents = stack(op, x, rope, bias, caches)
            presents.extend(stack_presents)
            return x

        invocation = 0  # HF's cycle_offset / num_layers_per_stack
        for _ in range(c.H_cycles):
            for _ in range(c.L_cycles):
                low = run(self.L_module, op.Add(low, high), invocation)
                invocation += 1
            high = run(self.H_module, op.Add(high, low), invocation)
            invocation += 1
        return high, presents


class HrmTextForCausalLM(LlamaForCausalLM):
    """HRM-Text's causal LM: ``lm_head`` over the final high-level state."""

    config_class = HrmTextConfig
    model_class = HrmTextModel


MODEL_TYPES = {"hrm_text": HrmTextForCausalLM}
