"""ModernBERT decoder (HF ``modernbert-decoder``): ModernBERT's blocks run causally with a KV cache.

What differs from Llama:

- LayerNorm everywhere (bias per ``norm_bias``), including right after the token
  embedding; layer 0 has no attention norm (the embedding norm plays its part);
- alternating global and local (sliding-window ``local_attention // 2``) layers, each kind
  with its own RoPE base (``rope_parameters`` is keyed by layer type);
- a fused GLU MLP ``Wo(act(x) * gate)`` with ``[x, gate] = Wi(h)`` (``x`` first);
- the output goes through a prediction head (dense, activation, LayerNorm) before
  ``decoder``: a vocabulary projection with a bias, tied to the token embeddings by default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from onnxscript import nn

from mobius.components import (
    Attention,
    Linear,
    TiedLMHead,
    attention_bias,
    make_rotary_embedding,
)
from mobius.config import RopeConfig
from mobius.model import Model
from mobius_text.models.llama import LlamaConfig
from mobius_text.models.modernbert import (
    ModernBertEmbeddings,
    ModernBertMLP,
    ModernBertPredictionHead,
    norm,
)


@dataclass
class ModernBertDecoderConfig(LlamaConfig):
    """Llama fields plus norm/decoder biases, the head activation and one RoPE per layer type."""

    norm_bias: bool = False
    decoder_bias: bool = True
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    # "full_attention" / "sliding_attention" -> that kind's rope
    layer_ropes: dict[str, RopeConfig] = field(default_factory=dict)

    @classmethod
    def hf_fields(cls, hf_config):
        ropes = {
            kind: RopeConfig.from_hf(SimpleNamespace(rope_parameters=params))
            for kind, params in hf_config.rope_parameters.items()
        }
        return {
            **super().hf_fields(hf_config),
            "num_key_value_heads": hf_config.num_attention_heads,  # no GQA
            "hidden_act": hf_config.hidden_activation,
            "rms_norm_eps": hf_config.norm_eps,
            "norm_bias": bool(hf_config.norm_bias),
            "decoder_bias": bool(hf_config.decoder_bias),
            "classifier_bias": bool(hf_config.classifier_bias),
            "classifier_activation": hf_config.classifier_activation,
            "rope": None,
            "layer_ropes": ropes,
        }

    @property
    def layer_norm_eps(self) -> float:
        """The LayerNorms' epsilon under ModernBERT's name, for the encoder's modules reused here."""
        return self.rms_norm_eps


class ModernBertDecoderAttention(Attention):
    """Attention whose output projection is HF's ``Wo``."""

    def __init__(self, config: ModernBertDecoderConfig) -> None:
        # Not Attention.__init__: it would register an ``o_proj`` the checkpoint calls ``Wo``.
        nn.Module.__init__(self)
        hidden, heads, dim = config.hidden_size, config.num_attention_heads, config.head_dim
        bias = config.attention_bias
        self.q_proj = Linear(hidden, heads * dim, bias)
        self.k_proj = Linear(hidden, heads * dim, bias)
        self.v_proj = Linear(hidden, heads * dim, bias)
        self.Wo = Linear(heads * dim, hidden, bias)
        self.num_heads = self.num_kv_heads = heads
        self.head_dim = self.rotary_dim = dim
        self.scale = dim**-0.5

    @property
    def o_proj(self):
        return self.Wo


class ModernBertDecoderLayer(nn.Module):
    def __init__(self, config: ModernBertDecoderConfig, layer_idx: int) -> None:
        super().__init__()
        self.attn_norm = norm(config) if layer_idx != 0 else None
        self.attn = ModernBertDecoderAttention(config)
        self.mlp_norm = norm(config)
        self.mlp = ModernBertMLP(config)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h = self.attn_norm(op, x) if self.attn_norm is not None else x
        h, present = self.attn(op, h, position_embeddings, bias, past_key, past_value)
        x = op.Add(x, h)
        return op.Add(x, self.mlp(op, self.mlp_norm(op, x))), present


class ModernBertDecoderModel(nn.Module):
    def __init__(self, config: ModernBertDecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(
            [ModernBertDecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.final_norm = norm(config)
        # Built per layer kind at graph time (no parameters): a plain dict, not submodules.
        self.rotary = {
            kind: make_rotary_embedding(rope, config.head_dim, config.max_position_embeddings)
            for kind, rope in config.layer_ropes.items()
        }

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        x = self.embeddings(op, input_ids)  # [batch, seq, hidden]
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        windows = {"full_attention": None, "sliding_attention": self.config.sliding_window}
        kinds = sorted(set(self.config.layer_types))
        biases = {
            k: attention_bias(op, attention_mask, seq_len, x.dtype, windows[k]) for k in kinds
        }
        cos_sin = {k: self.rotary[k](op, position_ids) for k in kinds}
        presents = []
        for i, (layer, (past_key, past_value)) in enumerate(
            zip(self.layers, past_key_values, strict=True)
        ):
            kind = self.config.layer_types[i]
            x, present = layer(op, x, cos_sin[kind], biases[kind], past_key, past_value)
            presents.append(present)
        return self.final_norm(op, x), presents


class ModernBertDecoderForCausalLM(Model):
    """The causal LM: ``model``, the prediction head ``lm_head`` and the vocabulary projection ``decoder``."""

    config_class = ModernBertDecoderConfig

    def __init__(self, config: ModernBertDecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.model = ModernBertDecoderModel(config)
        self.lm_head = ModernBertPredictionHead(config)
        if config.tie_word_embeddings:
            self.decoder = TiedLMHead(self.model.embeddings.tok_embeddings, config.decoder_bias)
        else:
            self.decoder = Linear(config.hidden_size, config.vocab_size, config.decoder_bias)

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        c = self.config
        return [(c.num_attention_heads, c.head_dim, c.head_dim)] * c.num_hidden_layers

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        hidden, presents = self.model(op, input_ids, attention_mask, position_ids, past_key_values)
        return self.decoder(op, self.lm_head(op, hidden)), presents

    def sanitize(self, weights: dict) -> dict:
        """A tied checkpoint may still carry the decoder matrix: it is the embedding, so drop it."""
        if self.config.tie_word_embeddings:
            weights.pop("decoder.weight", None)
        return weights


MODEL_TYPES = {"modernbert-decoder": ModernBertDecoderForCausalLM}
