"""Jina Embeddings v3: XLM-RoBERTa with rotary positions instead of learned ones.

What differs from RoBERTa (:mod:`.roberta`):

- no position embeddings: rotate-half RoPE on q and k (``rope_parameters``, theta 20000);
- each layer is post-norm, ``post_attention_layernorm(x + self_attn(x))`` then
  ``post_mlp_layernorm(x + mlp(x))``, ``mlp`` being ``fc2(act(fc1(x)))``;
- heads: RoBERTa's ``lm_head``, ``classifier`` and ``qa_outputs`` (no multiple choice);
  the bare model's ``pooler`` is unread.

The module tree has transformers' names (``roberta.layers.N.self_attn.q_proj``...);
checkpoints keep Jina's flash-attention layout (``emb_ln``, ``encoder.layers.N.mixer.Wqkv``
with q, k, v stacked on the output axis, ``mixer.out_proj``, ``norm1`` / ``norm2``), which
:meth:`JinaEmbeddingsV3ForFeatureExtraction.sanitize` converts as transformers does.

Task LoRA adapters (``retrieval_query``, ``text_matching``...): transformers loads one as a
PEFT adapter (``load_adapter(..., subfolder=task)``) and applies it to every row, so a
build merges the chosen one, ``--adapter <checkpoint>/<task>``; the adapters name
transformers' modules, so they merge after the conversion
(:attr:`~JinaEmbeddingsV3ForFeatureExtraction.merge_adapters_after_sanitize`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from onnxscript import nn

from mobius.components import MLP, Embedding, LayerNorm, Linear, padding_bias
from mobius.config import EncoderConfig, RopeConfig
from mobius.errors import ConfigError
from mobius.weights import DerivedTensor
from mobius_text.models._encoder_rotary import EncoderRotary, rotate_heads, sequence_positions
from mobius_text.models.roberta import RobertaForFeatureExtraction


@dataclass
class JinaEmbeddingsV3Config(EncoderConfig):
    """Encoder fields plus the rope."""

    rope: RopeConfig = field(default_factory=RopeConfig)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return {**super().hf_fields(hf_config), "rope": RopeConfig.from_hf(hf_config)}


class JinaEmbeddings(nn.Module):
    """``LayerNorm(word + token type)``, type 0 where the graph takes no token types."""

    def __init__(self, config: JinaEmbeddingsV3Config) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.word_embeddings = Embedding(config.vocab_size, hidden)
        self.token_type_embeddings = Embedding(max(config.type_vocab_size, 1), hidden)
        self.LayerNorm = LayerNorm(hidden, config.layer_norm_eps)

    def forward(self, op, input_ids, token_type_ids):
        if token_type_ids is None:  # type 0 on every token, [batch, seq] so the sum stays 3-D
            token_type_ids = op.Expand(op.Constant(value_int=0), op.Shape(input_ids))
        x = self.word_embeddings(op, input_ids)  # [batch, seq, hidden]
        return self.LayerNorm(op, op.Add(x, self.token_type_embeddings(op, token_type_ids)))


class JinaAttention(nn.Module):
    """Multi-head self-attention with RoPE on q and k, every projection biased."""

    def __init__(self, config: JinaEmbeddingsV3Config) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.q_proj = Linear(hidden, hidden, bias=True)
        self.k_proj = Linear(hidden, hidden, bias=True)
        self.v_proj = Linear(hidden, hidden, bias=True)
        self.o_proj = Linear(hidden, hidden, bias=True)
        self.num_heads, self.scale = config.num_attention_heads, config.head_dim**-0.5

    def forward(self, op, x, rotary, bias):
        q = rotate_heads(op, self.q_proj(op, x), rotary, self.num_heads)
        k = rotate_heads(op, self.k_proj(op, x), rotary, self.num_heads)
        y = op.Attention(
            q, k, self.v_proj(op, x), bias,
            q_num_heads=self.num_heads, kv_num_heads=self.num_heads, scale=self.scale,
        )  # fmt: skip
        return self.o_proj(op, y)  # [batch, seq, hidden]


class JinaLayer(nn.Module):
    """``post_attention_layernorm(x + attn(x))``, then ``post_mlp_layernorm(x + mlp(x))``."""

    def __init__(self, config: JinaEmbeddingsV3Config) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.layer_norm_eps
        self.self_attn = JinaAttention(config)
        self.post_attention_layernorm = LayerNorm(hidden, eps)
        self.mlp = MLP(hidden, config.intermediate_size, config.hidden_act, bias=True)
        self.post_mlp_layernorm = LayerNorm(hidden, eps)

    def forward(self, op, x, rotary, bias):
        x = self.post_attention_layernorm(op, op.Add(x, self.self_attn(op, x, rotary, bias)))
        return self.post_mlp_layernorm(op, op.Add(x, self.mlp(op, x)))


class JinaEmbeddingsV3Model(nn.Module):
    def __init__(self, config: JinaEmbeddingsV3Config) -> None:
        super().__init__()
        self.embeddings = JinaEmbeddings(config)
        self.layers = nn.ModuleList([JinaLayer(config) for _ in range(config.num_hidden_layers)])
        self.rotary = EncoderRotary(config.rope, config.head_dim, config.max_position_embeddings)
        self.pooler = None  # the bare model's pooler: no head reads it

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        x = self.embeddings(op, input_ids, token_type_ids)  # [batch, seq, hidden]
        rotary = self.rotary(op, sequence_positions(op, input_ids))  # shared by every layer
        bias = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, seq, seq]
        for layer in self.layers:
            x = layer(op, x, rotary, bias)
        return x


# Jina's checkpoint names -> transformers' (its conversion mapping for jina_embeddings_v3).
SAVED_NAMES = (
    (".emb_ln.", ".embeddings.LayerNorm."),
    (".encoder.layers.", ".layers."),
    (".mixer.out_proj.", ".self_attn.o_proj."),
    (".norm1.", ".post_attention_layernorm."),
    (".norm2.", ".post_mlp_layernorm."),
)
FUSED_QKV = ".mixer.Wqkv."


def qkv_part(tensor, index: int) -> DerivedTensor:
    """Rows ``index`` of three equal blocks of a fused ``Wqkv`` weight or bias (q, k, v)."""
    rows = tensor.shape[0] // 3
    shape = (rows, *tensor.shape[1:])
    return DerivedTensor(
        lambda: tensor.numpy()[index * rows : (index + 1) * rows], shape, tensor.dtype
    )


class JinaEmbeddingsV3ForFeatureExtraction(RobertaForFeatureExtraction):
    """RoBERTa's heads (``lm_head``, ``classifier``, ``qa_outputs``) on the rotary encoder."""

    config_class = JinaEmbeddingsV3Config
    model_class = JinaEmbeddingsV3Model

    #: adapters name transformers' modules: :mod:`mobius.lora` merges them into what
    #: :meth:`sanitize` returns
    merge_adapters_after_sanitize = True
    #: an adapter made on the bare model names its modules without the ``roberta.`` prefix
    renames: ClassVar[dict[str, str]] = {"roberta.": ""}

    def __init__(self, config: JinaEmbeddingsV3Config) -> None:
        if config.head == "multiple-choice":
            raise ConfigError("--head multiple-choice is not built for jina_embeddings_v3")
        super().__init__(config)

    def sanitize(self, weights: dict) -> dict:
        """Jina's layout as transformers loads it: renamed, and ``Wqkv`` split into q, k, v."""
        converted = {}
        for key, value in super().sanitize(weights).items():
            for saved, loaded in SAVED_NAMES:
                key = key.replace(saved, loaded)
            if FUSED_QKV in key:
                head, tail = key.split(FUSED_QKV)
                for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
                    converted[f"{head}.self_attn.{name}.{tail}"] = qkv_part(value, i)
            else:
                converted[key] = value
        return converted


MODEL_TYPES = {"jina_embeddings_v3": JinaEmbeddingsV3ForFeatureExtraction}
