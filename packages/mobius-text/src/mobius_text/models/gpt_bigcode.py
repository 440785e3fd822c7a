"""GPT-BigCode (SantaCoder, StarCoder): GPT-2 with ordinary Linear layers and multi-query
attention, whose fused ``c_attn`` holds all query heads then one shared key and value."""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import Linear
from mobius_text.models._gpt_common import GPTForCausalLM, SelfAttention
from mobius_text.models.gpt2 import GPT2MLP, GPT2Config, GPT2Model


@dataclass
class GPTBigCodeConfig(GPT2Config):
    multi_query: bool = True

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        multi_query = bool(hf_config.multi_query)
        fields.update(
            multi_query=multi_query,
            num_key_value_heads=1 if multi_query else hf_config.n_head,
        )
        return fields


class GPTBigCodeAttention(SelfAttention):
    """``c_attn`` → ``[q (heads*head_dim) | k (head_dim) | v (head_dim)]`` with MQA, or
    ``[heads, q|k|v]`` per head without it."""

    def __init__(self, config: GPTBigCodeConfig) -> None:
        scale = config.head_dim**-0.5 if config.scale_attn_weights else 1.0
        super().__init__(
            config.num_attention_heads, config.num_key_value_heads, config.head_dim, scale
        )
        self.multi_query = config.multi_query
        kv_dim = config.num_key_value_heads * config.head_dim
        self.c_attn = Linear(config.hidden_size, config.hidden_size + 2 * kv_dim, bias=True)
        self.c_proj = Linear(config.hidden_size, config.hidden_size, bias=True)
        self.split_sizes = [config.hidden_size, kv_dim, kv_dim]

    def project_qkv(self, op, x):
        qkv = self.c_attn(op, x)
        if not self.multi_query:
            return self.split_fused_heads(op, qkv)
        q, k, v = op.Split(qkv, op.Constant(value_ints=self.split_sizes), axis=-1, _outputs=3)
        # k, v: [batch, seq, head_dim] -> [batch, 1, seq, head_dim]
        return self.split_heads(op, q), self.split_heads(op, k), self.split_heads(op, v)

    def project_out(self, op, y):
        return self.c_proj(op, y)


class GPTBigCodeModel(GPT2Model):
    def make_attention(self, config, layer_idx):
        return GPTBigCodeAttention(config)

    def make_mlp(self, config):
        hidden, inner = config.hidden_size, config.intermediate_size
        return GPT2MLP(
            Linear(hidden, inner, bias=True), Linear(inner, hidden, bias=True), config.hidden_act
        )


class GPTBigCodeForCausalLM(GPTForCausalLM):
    config_class = GPTBigCodeConfig
    model_class = GPTBigCodeModel
    # Causal-mask buffers that older checkpoints saved with the weights.
    ignored = ("*.attn.bias", "*.attn.masked_bias")


MODEL_TYPES = {"gpt_bigcode": GPTBigCodeForCausalLM}
