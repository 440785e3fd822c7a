"""GPT-NeoX (Pythia, StableLM-alpha...): partial rotary, a per-head fused ``query_key_value``,
and by default the parallel residual ``x + attn(ln1(x)) + mlp(ln2(x))``."""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    apply_rotary,
    get_activation,
    make_rotary_embedding,
    rotary_dim,
)
from mobius.config import ArchitectureConfig
from mobius_text.models._gpt_common import GPTBackbone, GPTForCausalLM, SelfAttention


@dataclass
class GPTNeoXConfig(ArchitectureConfig):
    layer_norm_eps: float = 1e-5
    use_parallel_residual: bool = True

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        heads = fields["num_attention_heads"]
        fields.update(
            num_key_value_heads=heads,  # never grouped
            head_dim=fields["hidden_size"] // heads,
            layer_norm_eps=hf_config.layer_norm_eps,
            use_parallel_residual=bool(getattr(hf_config, "use_parallel_residual", True)),
            sliding_window=None,
            layer_types=[],
        )
        return fields


class GPTNeoXAttention(SelfAttention):
    """``query_key_value`` → per head ``[q | k | v]``; rotary on the first channels; ``dense``."""

    def __init__(self, config: GPTNeoXConfig, bias: bool) -> None:
        heads = config.num_attention_heads
        super().__init__(heads, heads, config.head_dim, config.head_dim**-0.5)
        self.query_key_value = Linear(config.hidden_size, 3 * config.hidden_size, bias)
        self.dense = Linear(config.hidden_size, config.hidden_size, bias)
        self.rotary_dim = rotary_dim(config.rope, config.head_dim)

    def project_qkv(self, op, x):
        return self.split_fused_heads(op, self.query_key_value(op, x))

    def rotate(self, op, q, k, position_embeddings):
        cos, sin = position_embeddings
        return (
            apply_rotary(op, q, cos, sin, self.rotary_dim),
            apply_rotary(op, k, cos, sin, self.rotary_dim),
        )

    def project_out(self, op, y):
        return self.dense(op, y)


class GPTNeoXMLP(nn.Module):
    def __init__(self, hidden: int, inner: int, act: str, bias: bool = True) -> None:
        super().__init__()
        self.dense_h_to_4h = Linear(hidden, inner, bias)
        self.dense_4h_to_h = Linear(inner, hidden, bias)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.dense_4h_to_h(op, self.act(op, self.dense_h_to_4h(op, x)))


class GPTNeoXLayer(nn.Module):
    def __init__(self, attention, mlp, config: GPTNeoXConfig) -> None:
        super().__init__()
        self.input_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.post_attention_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.attention = attention
        self.mlp = mlp
        self.parallel = config.use_parallel_residual

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.attention(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        if self.parallel:  # x + attn(ln1(x)) + mlp(ln2(x))
            return op.Add(op.Add(self.mlp(op, self.post_attention_layernorm(op, x)), h), x), present
        h = op.Add(h, x)
        return op.Add(self.mlp(op, self.post_attention_layernorm(op, h)), h), present


class GPTNeoXModel(GPTBackbone):
    layers_name = "layers"
    norm_name = "final_layer_norm"

    def __init__(self, config: GPTNeoXConfig) -> None:
        super().__init__(config)
        self.embed_in = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [self.make_layer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.final_layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )

    def make_layer(self, config, layer_idx: int):
        return GPTNeoXLayer(
            GPTNeoXAttention(config, bias=config.attention_bias),
            GPTNeoXMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
            config,
        )

    def embed(self, op, input_ids, position_ids):
        return self.embed_in(op, input_ids)

    def position_embeddings(self, op, position_ids):
        return self.rotary_emb(op, position_ids)


class GPTNeoXForCausalLM(GPTForCausalLM):
    """Checkpoints keep the head under its original name, ``embed_out``."""

    config_class = GPTNeoXConfig
    model_class = GPTNeoXModel
    backbone_name = "gpt_neox"
    head_name = "embed_out"
    # Mask buffers and rotary caches that older checkpoints (Pythia...) saved with the weights.
    ignored = (
        "*.attention.bias",
        "*.attention.masked_bias",
        "*.attention.rotary_emb.inv_freq",
    )

    def input_embedding(self):
        return self.backbone.embed_in


MODEL_TYPES = {"gpt_neox": GPTNeoXForCausalLM}
