"""GPT-J: rotary embeddings on interleaved channel pairs (the first ``rotary_dim`` of each head),
and a parallel block where attention and MLP read the same ``ln_1`` output."""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, get_activation, make_rotary_embedding
from mobius.config import ArchitectureConfig, RopeConfig
from mobius_text.models._gpt_common import GPTBackbone, GPTForCausalLM, QKVOutAttention


@dataclass
class GPTJConfig(ArchitectureConfig):
    layer_norm_eps: float = 1e-5
    rotary_dim: int = 0  # leading channels of each head that rotate

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        hidden, heads = fields["hidden_size"], fields["num_attention_heads"]
        head_dim = hidden // heads
        fields.update(
            intermediate_size=hf_config.n_inner or 4 * hidden,
            num_key_value_heads=heads,
            head_dim=head_dim,
            hidden_act=hf_config.activation_function,
            layer_norm_eps=hf_config.layer_norm_epsilon,
            tie_word_embeddings=bool(hf_config.tie_word_embeddings),
            # HF sizes its table by hidden_size when rotary_dim is unset, which only runs
            # with a single head: the whole head rotates either way.
            rotary_dim=hf_config.rotary_dim or head_dim,
            rope=RopeConfig(theta=10000.0),
            sliding_window=None,
            layer_types=[],
        )
        return fields


class GPTJAttention(QKVOutAttention):
    """Bias-free q/k/v/out projections with interleaved rotary on the first ``rotary_dim``."""

    def __init__(self, config: GPTJConfig) -> None:
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.head_dim**-0.5,
            bias=False,
            out_bias=False,
        )
        self.rotary_dim = config.rotary_dim

    def rotate(self, op, q, k, position_embeddings):
        return rotate_interleaved(op, q, k, position_embeddings, self.rotary_dim)


def rotate_interleaved(op, q, k, position_embeddings, rotary_dim: int):
    """Rotary on channel pairs (2i, 2i+1) of the first ``rotary_dim``: HF's ``rotate_every_two``."""
    cos, sin = position_embeddings  # [batch, seq, rotary_dim/2], float32
    cos, sin = op.CastLike(cos, q), op.CastLike(sin, q)
    q = op.RotaryEmbedding(q, cos, sin, interleaved=1, rotary_embedding_dim=rotary_dim)
    k = op.RotaryEmbedding(k, cos, sin, interleaved=1, rotary_embedding_dim=rotary_dim)
    return q, k


class GPTJMLP(nn.Module):
    def __init__(self, config: GPTJConfig) -> None:
        super().__init__()
        self.fc_in = Linear(config.hidden_size, config.intermediate_size, bias=True)
        self.fc_out = Linear(config.intermediate_size, config.hidden_size, bias=True)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.fc_out(op, self.act(op, self.fc_in(op, x)))


class GPTJBlock(nn.Module):
    """``x + attn(ln_1(x)) + mlp(ln_1(x))``."""

    def __init__(self, attn, config: GPTJConfig) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.attn = attn
        self.mlp = GPTJMLP(config)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h = self.ln_1(op, x)
        attn_out, present = self.attn(op, h, position_embeddings, bias, past_key, past_value)
        return op.Add(op.Add(attn_out, self.mlp(op, h)), x), present


class GPTJModel(GPTBackbone):
    def __init__(self, config: GPTJConfig) -> None:
        super().__init__(config)
        self.wte = Embedding(config.vocab_size, config.hidden_size)
        self.h = nn.ModuleList(
            [
                GPTJBlock(self.make_attention(config), config)
                for _ in range(config.num_hidden_layers)
            ]
        )
        self.ln_f = LayerNorm(config.hidden_size, config.layer_norm_eps)
        # GPT-J's fixed schedule: base 10000 over the rotary channels only.
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.rotary_dim, config.max_position_embeddings
        )

    def make_attention(self, config):
        return GPTJAttention(config)

    def embed(self, op, input_ids, position_ids):
        return self.wte(op, input_ids)

    def position_embeddings(self, op, position_ids):
        return self.rotary_emb(op, position_ids)


class GPTJForCausalLM(GPTForCausalLM):
    """GPT-J's head always has a bias, also when its weight is tied to ``wte``."""

    config_class = GPTJConfig
    model_class = GPTJModel
    head_bias = True
    # Causal-mask buffers that older checkpoints saved with the weights.
    ignored = ("*.attn.bias", "*.attn.masked_bias")


MODEL_TYPES = {"gptj": GPTJForCausalLM}
