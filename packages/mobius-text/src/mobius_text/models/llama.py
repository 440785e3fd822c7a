"""Llama: the generic pre-norm RoPE decoder that Mistral, Qwen2/3 and SmolLM3 vary."""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import (
    Attention,
    DecoderLayer,
    Embedding,
    GatedMLP,
    Linear,
    RMSNorm,
    TiedLMHead,
    attention_bias,
    make_rotary_embedding,
    rotary_dim,
)
from mobius.config import ArchitectureConfig
from mobius.model import Model

# onnxruntime-genai model types written as themselves: the generator (0.18) runs them as
# plain decoders, and mobius's tiny random builds of each generate like transformers in
# it. Every other family derived from Llama runs as the generator's generic decoder.
GENAI_TYPES = frozenset(
    """ernie4_5 gemma gemma2 gemma3_text granite lfm2 llama mistral nemotron olmo phi phimoe
    phi3 qwen2 qwen3 qwen3_5_text qwen3_5_moe_text smollm3""".split()
)


@dataclass
class LlamaConfig(ArchitectureConfig):
    """Llama needs nothing beyond the normalised fields."""

    @property
    def genai_type(self) -> str | None:
        """The family's own onnxruntime-genai model type where it has one (:data:`GENAI_TYPES`).

        Answered by ``model_type``, not by class: families share config classes
        (Qwen2 and Qwen3, Mistral and Ministral), and a family derived from one of
        these is not thereby one the generator was checked with.
        """
        return self.model_type if self.model_type in GENAI_TYPES else None


class LlamaModel(nn.Module):
    """Embeddings, decoder layers and the final norm (HF ``model.*``)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [self.make_layer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )

    def make_attention(self, config: LlamaConfig, layer_idx: int) -> Attention:
        return Attention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )

    def make_layer(self, config: LlamaConfig, layer_idx: int) -> DecoderLayer:
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=GatedMLP(
                config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_bias
            ),
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )

    def layer_uses_rope(self, layer_idx: int) -> bool:
        return True

    def layer_bias(self, op, kind: str, attention_mask, seq_len, dtype):
        """The attention bias of the layers of type ``kind``: causal, windowed where sliding."""
        windows = {"full_attention": None, "sliding_attention": self.config.sliding_window}
        return attention_bias(op, attention_mask, seq_len, dtype, windows[kind])

    def position_embeddings(self, op, position_ids) -> dict:
        """Per layer type, the ``(cos, sin)`` its layers rotate by; one table serves all here."""
        cos_sin = self.rotary_emb(op, position_ids)
        return dict.fromkeys(self.config.layer_types, cos_sin)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        rope = self.position_embeddings(op, position_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        biases = {
            kind: self.layer_bias(op, kind, attention_mask, seq_len, x.dtype)
            for kind in dict.fromkeys(self.config.layer_types)
        }
        presents = []
        for i, (layer, (past_key, past_value)) in enumerate(
            zip(self.layers, past_key_values, strict=True)
        ):
            kind = self.config.layer_types[i]
            position = rope[kind] if self.layer_uses_rope(i) else None
            x, present = layer(op, x, position, biases[kind], past_key, past_value)
            presents.append(present)
        return self.norm(op, x), presents


class LlamaForCausalLM(Model):
    """The causal LM: ``model`` plus ``lm_head`` (tied to the embeddings when the config says so).

    Families that keep this shape subclass it: they set ``model_class`` (any backbone called
    as ``(op, input_ids, attention_mask, position_ids, past)``), ``backbone_name`` where their
    checkpoints name it otherwise (``transformer``), :meth:`input_embedding` where the token
    embedding has another name, :meth:`make_head` for a head with a bias, and ``cache_layout``
    for caches that are not all key/value.
    """

    config_class = LlamaConfig
    model_class = LlamaModel
    backbone_name = "model"

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        setattr(self, self.backbone_name, self.model_class(config))
        self.lm_head = self.make_head(config)

    def input_embedding(self) -> Embedding:
        """The token embedding a tied ``lm_head`` shares."""
        return getattr(self, self.backbone_name).embed_tokens

    def make_head(self, config: LlamaConfig) -> nn.Module:
        """``lm_head``: the input embedding when tied, else its own ``weight [vocab, hidden]``."""
        if config.tie_word_embeddings:
            return TiedLMHead(self.input_embedding())
        return Linear(config.hidden_size, config.vocab_size)

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        """Per layer: (kv_heads, key head_dim, value head_dim)."""
        c = self.config
        return [(c.num_key_value_heads, c.head_dim, c.head_dim)] * c.num_hidden_layers

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        backbone = getattr(self, self.backbone_name)
        hidden, presents = backbone(op, input_ids, attention_mask, position_ids, past_key_values)
        return self.lm_head(op, hidden), presents

    def sanitize(self, weights: dict) -> dict:
        """Tied checkpoints may still carry a copy of the head: it is the embedding, so drop it."""
        if self.config.tie_word_embeddings:
            weights.pop("lm_head.weight", None)
        return weights


MODEL_TYPES = {"llama": LlamaForCausalLM}
