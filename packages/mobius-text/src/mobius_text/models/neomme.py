"""NeoMME: a text-and-document-image encoder; built here on text (``input_ids``) alone.

What it has that BERT's family lacks:

- factorised token embeddings ``embedding_projection(word_embeddings(ids))`` (rank
  ``embedding_rank``), then a weightless RMSNorm whose output every layer mixes back in:
  ``lambdas[0] * x + lambdas[1] * x0`` before the layer's attention norm;
- layers of two kinds (``layer_types``): global ones and sliding ones whose window
  (keys within ``sliding_window`` of the query, both sides) comes per layer from
  ``per_layer_config``; each kind its own RoPE base and ``partial_rotary_factor``
  (rotate-half on the first channels of each head). Text positions run ``0, 1, 2...``
  on both axes of the M-RoPE, which then is plain RoPE;
- attention: grouped KV heads, weightless RMSNorm on each head of q and k before RoPE,
  ``value_embeddings(ids)`` added to v in the first and last global layers, "exclusive"
  self-attention (each head's output loses ``tanh(alpha)`` of its component along its
  own token's unit value), and a sigmoid output gate ``o_proj(y * sigmoid(gate_proj(h)))``;
- residual branches scaled by ``residual_multiplier``; ReLU² MLP ``down(act(up(x)))``;
- masked LM: ``lm_head(x @ unembedding_projection.weight)``, both tied to the factorised
  embeddings when ``tie_word_embeddings``.

``model.patch_embeddings`` projects image patches onto ``<image>`` placeholders: they
come in as ``pixel_values``, which the text feature-extraction contract has not, so a
text-only build leaves them unread. NeoMMEForRetrieval's heads are not built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from onnxscript import nn

from mobius.components import (
    Embedding,
    Linear,
    WeightlessRMSNorm,
    get_activation,
    padding_bias,
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

FULL, SLIDING = "full_attention", "sliding_attention"
UNIT_EPS = 1e-12  # F.normalize's floor on the norm


@dataclass
class NeoMMEConfig(EncoderConfig):
    """Encoder fields plus the factorised embedding, KV heads, layer kinds, windows and ropes."""

    embedding_rank: int = 0
    num_key_value_heads: int = 0
    head_dim: int = 0
    attention_bias: bool = False
    mlp_bias: bool = False
    residual_multiplier: float = 1.0
    layer_types: list[str] = field(default_factory=list)
    layer_windows: list[int | None] = field(default_factory=list)
    layer_ropes: dict[str, RopeConfig] = field(default_factory=dict)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        ropes = {
            kind: RopeConfig.from_hf(SimpleNamespace(rope_parameters=params))
            for kind, params in hf_config.rope_parameters.items()
        }
        windows = [layer.sliding_window for layer in hf_config.per_layer_config]
        kinds = list(hf_config.layer_types)
        if any((w is None) != (k == FULL) for w, k in zip(windows, kinds, strict=True)):
            raise ConfigError("NeoMME: a window on a global layer or none on a sliding one")
        return {
            **super().hf_fields(hf_config),
            "layer_norm_eps": float(hf_config.norm_eps),
            "embedding_rank": int(hf_config.embedding_rank),
            "num_key_value_heads": int(hf_config.num_key_value_heads),
            "head_dim": int(hf_config.head_dim),
            "attention_bias": bool(hf_config.attention_bias),
            "mlp_bias": bool(hf_config.mlp_bias),
            "residual_multiplier": float(hf_config.residual_multiplier),
            "layer_types": kinds,
            "layer_windows": windows,
            "layer_ropes": ropes,
        }


class NeoMMEEmbeddings(nn.Module):
    """``embedding_projection(word_embeddings(ids))``: vocab -> rank -> hidden."""

    def __init__(self, config: NeoMMEConfig) -> None:
        super().__init__()
        self.word_embeddings = Embedding(config.vocab_size, config.embedding_rank)
        self.embedding_projection = Linear(config.embedding_rank, config.hidden_size, bias=False)

    def forward(self, op, input_ids):
        return self.embedding_projection(op, self.word_embeddings(op, input_ids))


class NeoMMEExclusiveSelfAttention(nn.Module):
    """``y - tanh(alpha) * <y, u> u`` per head, ``u`` the unit value of the query's own token."""

    def __init__(self, config: NeoMMEConfig) -> None:
        super().__init__()
        self.alpha = nn.Parameter([config.num_attention_heads])
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim

    def forward(self, op, y, v):
        """``y [batch, seq, heads*dim]``, ``v [batch, seq, kv_heads*dim]`` -> like ``y``."""
        groups, dim = self.num_heads // self.num_kv_heads, self.head_dim
        v = op.Reshape(v, op.Constant(value_ints=[0, 0, self.num_kv_heads, 1, dim]))
        v = op.Expand(v, op.Constant(value_ints=[1, 1, 1, groups, 1]))  # [b, s, kv, groups, dim]
        v = op.Reshape(v, op.Constant(value_ints=[0, 0, self.num_heads, dim]))  # [b, s, heads, dim]
        norm = op.ReduceL2(v, [-1], keepdims=1)
        unit = op.Div(v, op.Max(norm, op.CastLike(UNIT_EPS, norm)))
        y = op.Reshape(y, op.Constant(value_ints=[0, 0, self.num_heads, dim]))
        along = op.ReduceSum(op.Mul(y, unit), [-1], keepdims=1)  # [b, s, heads, 1]
        scale = op.Unsqueeze(op.Tanh(self.alpha), [-1])  # [heads, 1]
        y = op.Sub(y, op.Mul(op.Mul(scale, along), unit))
        return op.Reshape(y, op.Constant(value_ints=[0, 0, -1]))


class NeoMMESigmoidGatedProjection(nn.Module):
    """``o_proj(y * sigmoid(gate_proj(h)))``, ``h`` the attention's (normed) input."""

    def __init__(self, config: NeoMMEConfig) -> None:
        super().__init__()
        width = config.num_attention_heads * config.head_dim
        self.gate_proj = Linear(config.hidden_size, width, bias=False)
        self.o_proj = Linear(width, config.hidden_size, bias=config.attention_bias)

    def forward(self, op, y, h):
        return self.o_proj(op, op.Mul(y, op.Sigmoid(self.gate_proj(op, h))))


class NeoMMEAttention(nn.Module):
    def __init__(self, config: NeoMMEConfig) -> None:
        super().__init__()
        hidden, dim, bias = config.hidden_size, config.head_dim, config.attention_bias
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.q_proj = Linear(hidden, self.num_heads * dim, bias)
        self.k_proj = Linear(hidden, self.num_kv_heads * dim, bias)
        self.v_proj = Linear(hidden, self.num_kv_heads * dim, bias)
        self.head_norm = WeightlessRMSNorm(dim, config.layer_norm_eps)  # q_norm and k_norm
        self.exclusive_self_attention = NeoMMEExclusiveSelfAttention(config)
        self.output_projection = NeoMMESigmoidGatedProjection(config)
        self.head_dim, self.scale = dim, dim**-0.5

    def norm_heads(self, op, x, heads: int):
        """RMSNorm over each head's channels of ``x [batch, seq, heads*dim]``."""
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, heads, self.head_dim]))
        return op.Reshape(self.head_norm(op, x), op.Constant(value_ints=[0, 0, -1]))

    def forward(self, op, h, rotary, bias, value_embeds):
        q = self.norm_heads(op, self.q_proj(op, h), self.num_heads)
        k = self.norm_heads(op, self.k_proj(op, h), self.num_kv_heads)
        q = rotate_heads(op, q, rotary, self.num_heads)
        k = rotate_heads(op, k, rotary, self.num_kv_heads)
        v = self.v_proj(op, h)  # [batch, seq, kv_heads*dim]
        if value_embeds is not None:
            v = op.Add(v, value_embeds)
        y = op.Attention(
            q, k, v, bias,
            q_num_heads=self.num_heads, kv_num_heads=self.num_kv_heads, scale=self.scale,
        )  # fmt: skip
        y = self.exclusive_self_attention(op, y, v)
        return self.output_projection(op, y, h)


class NeoMMEMLP(nn.Module):
    def __init__(self, config: NeoMMEConfig) -> None:
        super().__init__()
        self.up_proj = Linear(config.hidden_size, config.intermediate_size, config.mlp_bias)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, config.mlp_bias)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.down_proj(op, self.act(op, self.up_proj(op, x)))


class NeoMMEEncoderLayer(nn.Module):
    """``x + m * attn(norm(l0 x + l1 x0))``, then ``x + m * mlp(norm(x))``."""

    def __init__(self, config: NeoMMEConfig) -> None:
        super().__init__()
        self.lambdas = nn.Parameter([2])
        self.input_layernorm = WeightlessRMSNorm(config.hidden_size, config.layer_norm_eps)
        self.post_attention_layernorm = WeightlessRMSNorm(config.hidden_size, config.layer_norm_eps)
        self.self_attn = NeoMMEAttention(config)
        self.mlp = NeoMMEMLP(config)
        self.multiplier = config.residual_multiplier

    def forward(self, op, x, x0, rotary, bias, value_embeds):
        l0 = op.Gather(self.lambdas, op.Constant(value_int=0))
        l1 = op.Gather(self.lambdas, op.Constant(value_int=1))
        mixed = op.Add(op.Mul(l0, x), op.Mul(l1, x0))
        attn = self.self_attn(op, self.input_layernorm(op, mixed), rotary, bias, value_embeds)
        m = op.CastLike(self.multiplier, x)
        x = op.Add(x, op.Mul(m, attn))
        return op.Add(x, op.Mul(m, self.mlp(op, self.post_attention_layernorm(op, x))))


class NeoMMEModel(nn.Module):
    def __init__(self, config: NeoMMEConfig) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.layer_norm_eps
        self.embed_tokens = NeoMMEEmbeddings(config)
        self.embedding_norm = WeightlessRMSNorm(hidden, eps)
        self.final_norm = WeightlessRMSNorm(hidden, eps)
        self.layers = nn.ModuleList(
            [NeoMMEEncoderLayer(config) for _ in range(config.num_hidden_layers)]
        )
        width = config.num_key_value_heads * config.head_dim
        self.value_embeddings = Embedding(config.vocab_size, width)
        full = [i for i, kind in enumerate(config.layer_types) if kind == FULL]
        self.value_embedding_layers = {full[0], full[-1]}
        self.ropes = {
            kind: EncoderRotary(
                config.layer_ropes[kind], config.head_dim, config.max_position_embeddings
            )
            for kind in sorted(set(config.layer_types))
        }
        self.layer_types, self.layer_windows = config.layer_types, config.layer_windows

    def forward(self, op, input_ids, attention_mask):
        x = x0 = self.embedding_norm(op, self.embed_tokens(op, input_ids))  # [batch, seq, hidden]
        positions = sequence_positions(op, input_ids)  # [batch, seq]
        full = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, seq, seq]
        first_row = op.Slice(positions, [0], [1], [0])  # [1, seq]
        biases = {None: full}
        for window in set(self.layer_windows) - {None}:
            biases[window] = window_bias(op, full, first_row, window, x.dtype)
        rotary = {kind: rope(op, positions) for kind, rope in self.ropes.items()}
        value_embeds = self.value_embeddings(op, input_ids)  # [batch, seq, kv_heads*dim]
        for i, layer in enumerate(self.layers):
            extra = value_embeds if i in self.value_embedding_layers else None
            kind, window = self.layer_types[i], self.layer_windows[i]
            x = layer(op, x, x0, rotary[kind], biases[window], extra)
        return self.final_norm(op, x)


class _Matrix(nn.Module):
    """``x @ weight``, ``weight [rows, cols]`` as the checkpoint stores it (no transpose)."""

    def __init__(self, rows: int, cols: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([rows, cols])

    def forward(self, op, x):
        return op.MatMul(x, self.weight)


class NeoMMEForFeatureExtraction(EncoderForFeatureExtraction):
    """The text encoder (``model.*``) and the factorised masked-LM decoder."""

    config_class = NeoMMEConfig
    base_model_prefix = "model"
    model_class = NeoMMEModel
    head_names = ("unembedding_projection", "lm_head")
    unread = ("patch_embeddings.*",)  # image patches: pixel_values is no input of this contract
    tied_copies = ("unembedding_projection.weight", "lm_head.weight")

    def __init__(self, config: NeoMMEConfig) -> None:
        super().__init__(config)
        if config.head not in ("none", "masked-lm", "sentence-embedding"):
            raise ConfigError(f"--head {config.head} is not built for neomme (masked-lm only)")
        if config.head == "masked-lm" and not config.tie_word_embeddings:
            rank, hidden = config.embedding_rank, config.hidden_size
            # x @ weight: the checkpoint's [hidden, rank] as it is
            self.unembedding_projection = _Matrix(hidden, rank)
            self.lm_head = Linear(rank, config.vocab_size, bias=False)

    def logits(self, op, hidden):
        """``[batch, seq, vocab]``: back to rank through the projection, then onto the vocabulary."""
        if self.lm_head is not None:
            return self.lm_head(op, self.unembedding_projection(op, hidden))
        embeddings = self.model.embed_tokens
        back = op.Transpose(embeddings.embedding_projection.weight, perm=[1, 0])  # [hidden, rank]
        x = op.MatMul(hidden, back)  # [batch, seq, rank]
        return op.MatMul(x, op.Transpose(embeddings.word_embeddings.weight, perm=[1, 0]))

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.model(op, input_ids, attention_mask)
        outputs = {"last_hidden_state": hidden}
        if self.config.head == "masked-lm":
            outputs["logits"] = self.logits(op, hidden)
        return outputs


MODEL_TYPES = {"neomme": NeoMMEForFeatureExtraction}
