"""GPT-2 (and GPT-SW3, whose checkpoints are ``gpt2``): learned positions, pre-norm blocks,
Conv1D projections stored ``[in, out]`` with a fused ``c_attn``."""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Embedding, LayerNorm, get_activation
from mobius.config import ArchitectureConfig
from mobius_text.models._gpt_common import Conv1D, GPTBackbone, GPTForCausalLM, SelfAttention


@dataclass
class GPT2Config(ArchitectureConfig):
    """GPT-2's fields; ``layer_norm_eps`` is the epsilon of every LayerNorm."""

    layer_norm_eps: float = 1e-5
    scale_attn_weights: bool = True
    # Scores of layer i are further divided by i + 1 (Mistral's GPT-2 recipe).
    scale_attn_by_inverse_layer_idx: bool = False

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        hidden, heads = fields["hidden_size"], fields["num_attention_heads"]
        fields.update(
            # n_inner, not a stray intermediate_size key, sizes the MLP; heads are never grouped.
            intermediate_size=getattr(hf_config, "n_inner", None) or 4 * hidden,
            num_key_value_heads=heads,
            head_dim=hidden // heads,
            hidden_act=getattr(hf_config, "activation_function", fields["hidden_act"]),
            layer_norm_eps=hf_config.layer_norm_epsilon,
            tie_word_embeddings=bool(hf_config.tie_word_embeddings),
            scale_attn_weights=bool(getattr(hf_config, "scale_attn_weights", True)),
            scale_attn_by_inverse_layer_idx=bool(
                getattr(hf_config, "scale_attn_by_inverse_layer_idx", False)
            ),
            rope=None,
            sliding_window=None,
            layer_types=[],
        )
        return fields


class GPT2Attention(SelfAttention):
    """One fused ``c_attn`` ``[hidden, 3*hidden]`` split into q | k | v, then ``c_proj``."""

    def __init__(self, config: GPT2Config, layer_idx: int) -> None:
        scale = config.head_dim**-0.5 if config.scale_attn_weights else 1.0
        if config.scale_attn_by_inverse_layer_idx:
            scale /= float(layer_idx + 1)
        heads = config.num_attention_heads
        super().__init__(heads, heads, config.head_dim, scale)
        self.c_attn = Conv1D(config.hidden_size, 3 * config.hidden_size)
        self.c_proj = Conv1D(config.hidden_size, config.hidden_size)

    def project_qkv(self, op, x):
        q, k, v = op.Split(self.c_attn(op, x), num_outputs=3, axis=-1, _outputs=3)
        return self.split_heads(op, q), self.split_heads(op, k), self.split_heads(op, v)

    def project_out(self, op, y):
        return self.c_proj(op, y)


class GPT2MLP(nn.Module):
    """``c_proj(act(c_fc(x)))`` with the family's projection type (Conv1D or Linear)."""

    def __init__(self, c_fc, c_proj, act: str) -> None:
        super().__init__()
        self.c_fc = c_fc
        self.c_proj = c_proj
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.c_proj(op, self.act(op, self.c_fc(op, x)))


class GPT2Block(nn.Module):
    """``x + attn(ln_1(x))`` then ``x + mlp(ln_2(x))``."""

    def __init__(self, attn, mlp, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(hidden_size, eps)
        self.attn = attn
        self.ln_2 = LayerNorm(hidden_size, eps)
        self.mlp = mlp

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.attn(
            op, self.ln_1(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, h)
        return op.Add(x, self.mlp(op, self.ln_2(op, x))), present


class GPT2Model(GPTBackbone):
    """``wte + wpe[position_ids]``, blocks ``h``, final ``ln_f``."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__(config)
        self.wte = Embedding(config.vocab_size, config.hidden_size)
        self.wpe = Embedding(config.max_position_embeddings, config.hidden_size)
        self.h = nn.ModuleList(
            [
                GPT2Block(
                    self.make_attention(config, i),
                    self.make_mlp(config),
                    config.hidden_size,
                    config.layer_norm_eps,
                )
                for i in range(config.num_hidden_layers)
            ]
        )
        self.ln_f = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def make_attention(self, config, layer_idx: int):
        return GPT2Attention(config, layer_idx)

    def make_mlp(self, config):
        hidden, inner = config.hidden_size, config.intermediate_size
        return GPT2MLP(Conv1D(hidden, inner), Conv1D(inner, hidden), config.hidden_act)

    def embed(self, op, input_ids, position_ids):
        return op.Add(self.wte(op, input_ids), self.wpe(op, position_ids))


class GPT2LMHeadModel(GPTForCausalLM):
    """GPT-2 with its head (tied to ``wte`` unless the config unties it)."""

    config_class = GPT2Config
    model_class = GPT2Model
    # Causal-mask buffers that older checkpoints saved with the weights.
    ignored = ("*.attn.bias", "*.attn.masked_bias")


# transformers maps "gpt-sw3" to GPT2Config/GPT2LMHeadModel: the same architecture.
MODEL_TYPES = {"gpt2": GPT2LMHeadModel, "gpt-sw3": GPT2LMHeadModel}
