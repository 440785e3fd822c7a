"""Bailing hybrid (Ling 3): Kimi Linear's KDA and MLA layers with their own gates and names.

What changes from Kimi Linear:

* KDA's forget gate is one ``f_proj``; ``A_log`` is per head; with ``kda_safe_gate`` the
  log-decay is bounded, ``kda_lower_bound * sigmoid(exp(A_log) * (f_proj(x) + dt_bias))``,
  else Kimi's ``-exp(A_log) * softplus(...)``. The output gate is one ``g_proj``.
* MLA layers use RoPE (interleaved pairs, as DeepSeek-V3's ``rope_interleave``) and gate
  each head's output with ``sigmoid(g_proj(x))`` before the output projection.
* The checkpoint's names: ``word_embeddings``, ``attention`` for both mixers, ``dense``
  for their output projection, ``mlp`` for every MLP and the router's ``gate.expert_bias``.
  Multi-token-prediction layers stored after the decoder are not used (as in transformers).
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Embedding, GatedMLP, Linear, RMSNorm, make_rotary_embedding
from mobius.config import RopeConfig
from mobius.errors import ConfigError
from mobius_text.models.deepseek_v2 import DeepseekV2Attention, mla_softmax_scale
from mobius_text.models.kimi_linear import (
    KimiDeltaAttention,
    KimiLinearConfig,
    KimiLinearForCausalLM,
)
from mobius_text.models.mamba import HybridDecoderLayer, HybridModel
from mobius_text.models.sarvam_moe import SarvamMoESparseBlock, named


@dataclass
class BailingHybridConfig(KimiLinearConfig):
    kda_safe_gate: bool = True
    kda_lower_bound: float = -5.0
    num_mtp_layers: int = 0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        bound, mtp = hf_config.kda_lower_bound, hf_config.num_mtp_layers or 0
        if not isinstance(bound, (int, float)) or isinstance(bound, bool):
            raise ConfigError(f"bailing_hybrid: kda_lower_bound {bound!r} is not a number")
        if not isinstance(mtp, int) or isinstance(mtp, bool) or mtp < 0:
            raise ConfigError(f"bailing_hybrid: num_mtp_layers must be an int >= 0, not {mtp!r}")
        qk_head_dim = hf_config.qk_nope_head_dim + hf_config.qk_rope_head_dim
        fields.update(
            rope=RopeConfig.from_hf(hf_config),
            rope_layout="deinterleaved",
            softmax_scale=mla_softmax_scale(hf_config.rope_parameters or {}, qk_head_dim),
            kda_safe_gate=bool(hf_config.kda_safe_gate),
            kda_lower_bound=float(bound),
            num_mtp_layers=mtp,
        )
        return fields


class BailingHybridDeltaAttention(KimiDeltaAttention):
    """KDA with one-projection gates and a per-head ``A_log``; output projection ``dense``."""

    def __init__(self, config: BailingHybridConfig) -> None:
        super().__init__(config)
        named(self.o_proj, "dense")
        self.safe_gate, self.lower_bound = config.kda_safe_gate, config.kda_lower_bound

    def make_gates(self, config: BailingHybridConfig) -> None:
        dim = self.heads * self.head_dim
        self.A_log = nn.Parameter([self.heads])
        self.f_proj = Linear(config.hidden_size, dim)
        self.g_proj = Linear(config.hidden_size, dim)

    def log_decay(self, op, x):
        g = op.Reshape(op.Add(self.f_proj(op, x), self.dt_bias), [0, 0, self.heads, self.head_dim])
        rate = op.Reshape(op.Exp(self.A_log), [1, 1, self.heads, 1])
        if self.safe_gate:
            return op.Mul(op.Sigmoid(op.Mul(rate, g)), self.lower_bound)
        return op.Mul(op.Neg(rate), op.Softplus(g))

    def output_gate(self, op, x):
        return self.g_proj(op, x)


class BailingHybridAttention(DeepseekV2Attention):
    """MLA with RoPE, each head's output scaled by ``sigmoid(g_proj(x))``; ``dense`` out."""

    def __init__(self, config: BailingHybridConfig) -> None:
        super().__init__(config)
        named(self.o_proj, "dense")
        self.g_proj = Linear(config.hidden_size, config.num_attention_heads)

    def output(self, op, y, x):
        gate = op.Transpose(op.Sigmoid(self.g_proj(op, x)), perm=[0, 2, 1])  # [b, H, s]
        return super().output(op, op.Mul(y, op.Unsqueeze(gate, [-1])), x)


class BailingHybridDecoderLayer(HybridDecoderLayer):
    norm_names = ("input_layernorm", "post_attention_layernorm")
    attention_name = recurrent_name = "attention"
    mlp_name = "mlp"

    def __init__(self, config: BailingHybridConfig, layer_idx: int) -> None:
        super().__init__(attends=config.layer_kinds[layer_idx] == "full_attention")
        c = config
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.attention = (
            BailingHybridAttention(c) if self.attends else BailingHybridDeltaAttention(c)
        )
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        if c.mlp_layer_types[layer_idx] == "sparse":
            self.mlp = SarvamMoESparseBlock(c)  # DeepSeek-V3 routing, ``gate.expert_bias``
        else:
            self.mlp = GatedMLP(c.hidden_size, c.intermediate_size, c.hidden_act)


class BailingHybridModel(HybridModel):
    def __init__(self, config: BailingHybridConfig) -> None:
        super().__init__()
        self.embed_tokens = named(
            Embedding(config.vocab_size, config.hidden_size), "word_embeddings"
        )
        self.layers = nn.ModuleList(
            [BailingHybridDecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.qk_rope_head_dim, config.max_position_embeddings
        )


class BailingHybridForCausalLM(KimiLinearForCausalLM):
    config_class = BailingHybridConfig
    model_class = BailingHybridModel

    @property
    def ignored(self) -> tuple[str, ...]:
        """The multi-token-prediction layers stored after the decoder (``model.layers.{n}``,
        ``num_hidden_layers <= n < num_hidden_layers + num_mtp_layers``): generation does not
        read them, and transformers skips them by index."""
        c = self.config
        mtp = range(c.num_hidden_layers, c.num_hidden_layers + c.num_mtp_layers)
        return (*super().ignored, *(f"model.layers.{n}.*" for n in mtp))

    def sanitize(self, weights: dict) -> dict:
        """A bare ``BailingHybridModel`` saved by transformers keeps its own ``embed_tokens``
        (the rename back to ``word_embeddings`` is anchored on ``model.``): both are accepted."""
        bare = "model.embed_tokens."
        weights = {
            f"model.word_embeddings.{name.removeprefix(bare)}" if name.startswith(bare) else name: t
            for name, t in weights.items()
        }
        return super().sanitize(weights)


MODEL_TYPES = {"bailing_hybrid": BailingHybridForCausalLM}
