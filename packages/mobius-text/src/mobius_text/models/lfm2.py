"""LFM2: gated short-convolution layers and attention layers (with QK norms), each with a SwiGLU MLP.

``layer_types`` says which layers attend (``full_attention``, KV cache) and
which run the short convolution (``conv``): ``in_proj`` gives B, C and x;
``y = C * conv(B * x)`` with a causal depthwise convolution of
``conv_L_cache`` taps and no activation. A conv layer caches its last
``conv_L_cache - 1`` inputs (``conv_state``). As transformers does, padding
positions are zeroed *before* ``in_proj`` only (with ``conv_bias`` the padded
positions still feed the bias through the convolution). The final norm is
named ``embedding_norm`` in checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import (
    Embedding,
    Linear,
    RMSNorm,
    apply_rotary,
    make_rotary_embedding,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM
from mobius_text.models.mamba import (
    DepthwiseConv1d,
    HybridDecoderLayer,
    HybridModel,
)


@dataclass
class Lfm2Config(LlamaConfig):
    conv_L_cache: int = 3
    conv_bias: bool = False

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        inter = hf_config.intermediate_size
        if getattr(hf_config, "block_auto_adjust_ff_dim", False):  # LFM2-MoE has none
            inter = int(2 * inter / 3)
            if hf_config.block_ffn_dim_multiplier is not None:
                inter = int(hf_config.block_ffn_dim_multiplier * inter)
                multiple = hf_config.block_multiple_of
                inter = multiple * ((inter + multiple - 1) // multiple)
        fields.update(
            intermediate_size=inter,
            rms_norm_eps=hf_config.norm_eps,
            head_dim=hf_config.hidden_size // hf_config.num_attention_heads,
            sliding_window=None,
            conv_L_cache=hf_config.conv_L_cache,
            conv_bias=bool(hf_config.conv_bias),
        )
        return fields


class Lfm2MLP(nn.Module):
    """SwiGLU with the checkpoint's ``w1`` (gate), ``w3`` (up) and ``w2`` (down) names."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.w1 = Linear(hidden, intermediate)
        self.w3 = Linear(hidden, intermediate)
        self.w2 = Linear(intermediate, hidden)

    def forward(self, op, x):
        gate = self.w1(op, x)
        return self.w2(op, op.Mul(op.Mul(gate, op.Sigmoid(gate)), self.w3(op, x)))


class Lfm2Attention(nn.Module):
    """GQA attention with per-head RMS norms on queries and keys (before RoPE), ``out_proj`` out."""

    def __init__(self, config: Lfm2Config) -> None:
        super().__init__()
        heads, kv_heads, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.q_proj = Linear(config.hidden_size, heads * d)
        self.k_proj = Linear(config.hidden_size, kv_heads * d)
        self.v_proj = Linear(config.hidden_size, kv_heads * d)
        self.out_proj = Linear(heads * d, config.hidden_size)
        self.q_layernorm = RMSNorm(d, config.rms_norm_eps)
        self.k_layernorm = RMSNorm(d, config.rms_norm_eps)
        self.head_dim, self.num_heads, self.num_kv_heads = d, heads, kv_heads

    def forward(self, op, x, rope, bias, past_key, past_value):
        cos, sin = rope
        d = self.head_dim
        q, k, v = (
            split_heads(op, p(op, x), head_dim=d) for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        q = apply_rotary(op, self.q_layernorm(op, q), cos, sin, d)
        k = apply_rotary(op, self.k_layernorm(op, k), cos, sin, d)
        y, key, value = scaled_dot_product_attention(
            op, q, k, v, bias, past_key, past_value, num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, scale=self.head_dim**-0.5,
        )  # fmt: skip
        return self.out_proj(op, merge_heads(op, y)), (key, value)


class Lfm2ShortConv(nn.Module):
    """``out_proj(C * conv(B * x))`` with B, C, x from ``in_proj``; a causal depthwise conv."""

    def __init__(self, config: Lfm2Config) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.in_proj = Linear(hidden, 3 * hidden, config.conv_bias)
        self.conv = DepthwiseConv1d(hidden, config.conv_L_cache, config.conv_bias)
        self.out_proj = Linear(hidden, hidden, config.conv_bias)

    def forward(self, op, x, real, conv_state):
        bcx = op.Transpose(self.in_proj(op, op.Mul(x, real)), perm=[0, 2, 1])  # [batch, 3h, seq]
        b, c, xs = op.Split(bcx, num_outputs=3, axis=1, _outputs=3)
        y, new_conv_state = self.conv.causal(op, conv_state, op.Mul(b, xs))
        y = op.Mul(c, y)  # [batch, h, seq]
        return self.out_proj(op, op.Transpose(y, perm=[0, 2, 1])), (new_conv_state,)


class Lfm2DecoderLayer(HybridDecoderLayer):
    norm_names = ("operator_norm", "ffn_norm")
    recurrent_name = "conv"

    def __init__(self, config: Lfm2Config, attends: bool) -> None:
        super().__init__(attends)
        self.operator_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if attends:
            self.self_attn = Lfm2Attention(config)
        else:
            self.conv = Lfm2ShortConv(config)
        self.ffn_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.feed_forward = Lfm2MLP(config.hidden_size, config.intermediate_size)


class Lfm2Model(HybridModel):
    norm_name = "embedding_norm"

    def __init__(self, config: Lfm2Config) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [Lfm2DecoderLayer(config, kind != "conv") for kind in config.layer_types]
        )
        self.embedding_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)  # the final norm
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )


class Lfm2ForCausalLM(LlamaForCausalLM):
    config_class = Lfm2Config
    model_class = Lfm2Model

    def cache_layout(self):
        c = self.config
        kv = ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]
        conv = [("conv_state", ["batch", c.hidden_size, c.conv_L_cache - 1])]
        return [conv if kind == "conv" else [("key", kv), ("value", kv)] for kind in c.layer_types]


MODEL_TYPES = {"lfm2": Lfm2ForCausalLM}
