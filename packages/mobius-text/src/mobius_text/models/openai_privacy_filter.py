"""OpenAI Privacy Filter: GPT-OSS's layers made a bidirectional sliding-window token tagger.

What differs from GPT-OSS (:mod:`.gpt_oss`):

- attention is bidirectional, every layer within ``sliding_window`` of the query on both
  sides (inclusive), with GPT-OSS's per-head sink logit in the softmax; q and k each
  scaled by ``head_dim ** -0.25`` (one ``head_dim ** -0.5`` on the scores here);
- RoPE (YaRN by default) rotates interleaved channel pairs;
- the experts' ``gate_up_proj`` holds gate and up as *halves* of the last axis (GPT-OSS
  interleaves them); the router's softmax over the top-k logits is divided by k and the
  mixture multiplied by k again (a no-op, left out);
- no KV cache, no LM head: ``score`` tags every token (token classification).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    Linear,
    RMSNorm,
    merge_heads,
    padding_bias,
    repeat_kv,
    split_heads,
)
from mobius.config import EncoderConfig, RopeConfig
from mobius.errors import ConfigError
from mobius_text.models._bert_common import EncoderForFeatureExtraction
from mobius_text.models._encoder_rotary import (
    EncoderRotary,
    rotate_heads,
    sequence_positions,
    window_bias,
)
from mobius_text.models.gpt_oss import GptOssExperts, GptOssMLP


@dataclass
class OpenAIPrivacyFilterConfig(EncoderConfig):
    """Encoder fields plus GPT-OSS's attention and expert fields and the window."""

    num_key_value_heads: int = 0
    head_dim: int = 0
    rope: RopeConfig = field(default_factory=RopeConfig)
    attention_bias: bool = True
    sliding_window: int = 128
    num_local_experts: int = 0
    num_experts_per_tok: int = 0
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return {
            **super().hf_fields(hf_config),
            "hidden_act": "swiglu",  # the experts' clamped SwiGLU; the config names none
            "layer_norm_eps": float(hf_config.rms_norm_eps),
            "tie_word_embeddings": False,  # no head reads the embeddings
            "num_key_value_heads": int(hf_config.num_key_value_heads),
            "head_dim": int(hf_config.head_dim),
            "rope": RopeConfig.from_hf(hf_config),
            "attention_bias": bool(hf_config.attention_bias),
            "sliding_window": int(hf_config.sliding_window),
            "num_local_experts": int(hf_config.num_local_experts),
            "num_experts_per_tok": int(hf_config.num_experts_per_tok),
            "swiglu_alpha": float(hf_config.swiglu_alpha),
            "swiglu_limit": float(hf_config.swiglu_limit),
        }


class OpenAIPrivacyFilterAttention(nn.Module):
    """Bidirectional grouped-query attention with a learned sink logit per head.

    Written out (the ONNX ``Attention`` op has no sink input):
    ``softmax([q·kᵀ·scale + bias, sink])``, the sink column dropped before the values.
    """

    def __init__(self, config: OpenAIPrivacyFilterConfig) -> None:
        super().__init__()
        hidden, dim, bias = config.hidden_size, config.head_dim, config.attention_bias
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.q_proj = Linear(hidden, self.num_heads * dim, bias)
        self.k_proj = Linear(hidden, self.num_kv_heads * dim, bias)
        self.v_proj = Linear(hidden, self.num_kv_heads * dim, bias)
        self.o_proj = Linear(self.num_heads * dim, hidden, bias)
        self.sinks = nn.Parameter([self.num_heads])
        self.head_dim, self.scale = dim, dim**-0.5

    def forward(self, op, x, rotary, bias):
        heads, kv_heads, dim = self.num_heads, self.num_kv_heads, self.head_dim
        q = rotate_heads(op, self.q_proj(op, x), rotary, heads, interleaved=True)
        k = rotate_heads(op, self.k_proj(op, x), rotary, kv_heads, interleaved=True)
        q = split_heads(op, q, heads, dim)  # [batch, heads, seq, dim]
        k = repeat_kv(op, split_heads(op, k, kv_heads, dim), heads, kv_heads, dim)
        v = repeat_kv(op, split_heads(op, self.v_proj(op, x), kv_heads, dim), heads, kv_heads, dim)
        scores = op.Mul(op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2])), self.scale)
        scores = op.Add(scores, bias)  # [batch, heads, seq, seq]
        sink_shape = op.Concat(op.Shape(scores, end=3), op.Constant(value_ints=[1]), axis=0)
        sinks = op.Reshape(self.sinks, op.Constant(value_ints=[1, heads, 1, 1]))
        sinks = op.Expand(op.CastLike(sinks, scores), sink_shape)  # [batch, heads, seq, 1]
        probs = op.Softmax(op.Concat(scores, sinks, axis=-1), axis=-1)
        probs = op.Slice(probs, [0], [-1], [3])  # the sink column dropped
        return self.o_proj(op, merge_heads(op, op.MatMul(probs, v)))


class OpenAIPrivacyFilterExperts(GptOssExperts):
    """GPT-OSS's experts with gate and up as the two halves of ``gate_up_proj``'s last axis."""

    def expert(self, op, x: ir.Value, e: int) -> ir.Value:
        index = op.Constant(value_int=e)
        gate_up = op.MatMul(x, op.Gather(self.gate_up_proj, index, axis=0))  # [n, 2*inter]
        gate_up = op.Add(gate_up, op.Gather(self.gate_up_proj_bias, index, axis=0))
        gate, up = op.Split(gate_up, num_outputs=2, axis=-1, _outputs=2)
        gate = op.Min(gate, op.CastLike(self.limit, gate))  # clamped from above only
        up = op.Clip(up, op.CastLike(-self.limit, up), op.CastLike(self.limit, up))
        glu = op.Mul(gate, op.Sigmoid(op.Mul(gate, op.CastLike(self.alpha, gate))))
        y = op.Mul(op.Add(up, op.CastLike(1.0, up)), glu)
        y = op.MatMul(y, op.Gather(self.down_proj, index, axis=0))
        return op.Add(y, op.Gather(self.down_proj_bias, index, axis=0))


class OpenAIPrivacyFilterMLP(GptOssMLP):
    """GPT-OSS's routing (softmax over the top-k router logits) over the half-split experts."""

    def __init__(self, config: OpenAIPrivacyFilterConfig) -> None:
        super().__init__(config)
        self.experts = OpenAIPrivacyFilterExperts(
            config.hidden_size,
            config.intermediate_size,
            config.num_local_experts,
            config.swiglu_alpha,
            config.swiglu_limit,
        )


class OpenAIPrivacyFilterEncoderLayer(nn.Module):
    def __init__(self, config: OpenAIPrivacyFilterConfig) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.layer_norm_eps
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = OpenAIPrivacyFilterAttention(config)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = OpenAIPrivacyFilterMLP(config)

    def forward(self, op, x, rotary, bias):
        x = op.Add(x, self.self_attn(op, self.input_layernorm(op, x), rotary, bias))
        return op.Add(x, self.mlp(op, self.post_attention_layernorm(op, x)))


class OpenAIPrivacyFilterModel(nn.Module):
    def __init__(self, config: OpenAIPrivacyFilterConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        layers = [OpenAIPrivacyFilterEncoderLayer(config) for _ in range(config.num_hidden_layers)]
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(config.hidden_size, config.layer_norm_eps)
        self.rotary = EncoderRotary(config.rope, config.head_dim, config.max_position_embeddings)
        self.window = config.sliding_window

    def forward(self, op, input_ids, attention_mask):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        positions = sequence_positions(op, input_ids)  # [batch, seq]
        first_row = op.Slice(positions, [0], [1], [0])  # [1, seq]
        bias = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, seq, seq]
        bias = window_bias(op, bias, first_row, self.window, x.dtype)
        rotary = self.rotary(op, positions)  # shared by every layer
        for layer in self.layers:
            x = layer(op, x, rotary, bias)
        return self.norm(op, x)


class OpenAIPrivacyFilterForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder (``model.*``) and, for token classification, ``score``."""

    config_class = OpenAIPrivacyFilterConfig
    base_model_prefix = "model"
    model_class = OpenAIPrivacyFilterModel
    head_names = ("score",)

    def __init__(self, config: OpenAIPrivacyFilterConfig) -> None:
        if config.head not in ("none", "token-classification", "sentence-embedding"):
            raise ConfigError(
                f"--head {config.head} is not built for openai_privacy_filter: its one head "
                "is token-classification"
            )
        super().__init__(config)
        if config.head == "token-classification":
            self.score = Linear(config.hidden_size, config.num_labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.model(op, input_ids, attention_mask)
        outputs = {"last_hidden_state": hidden}
        if self.score is not None:
            outputs["logits"] = self.score(op, hidden)  # [batch, seq, num_labels]
        return outputs


MODEL_TYPES = {"openai_privacy_filter": OpenAIPrivacyFilterForFeatureExtraction}
