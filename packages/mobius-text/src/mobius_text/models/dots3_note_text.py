"""Dots 3 Note's text decoder: GLM-MoE-DSA's indexed MLA beside sliding-window MLA layers.

``layer_types`` gives each layer ``indexed_attention`` (MLA over the keys its own
lightning indexer picks, GLM's interleaved indexer RoPE), ``sliding_attention`` (MLA over
a ``sliding_window``, no indexer, its own sizes from ``per_layer_config``: heads, LoRA
ranks, head dims) or ``full_attention`` (MLA over every key). Each layer type has its
own RoPE base. What the MLA adds to DeepSeek's:

* the normalised query and key/value latents are scaled by ``sqrt(hidden / rank)``
  (the query latent before the indexer reads it too), and the norms use ``rms_norm_eps``;
* the shared ``k_rot`` is RMS-normalised (``k_rope_only_layernorm``) before RoPE;
* each head's output is scaled by ``sigmoid(g_proj(x))``; softmax scale ``qk_dim**-0.5``.

Shared experts are ``shared_experts_intermediate_size * n_shared_experts`` wide.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from onnxscript import nn

from mobius.components import (
    GatedMLP,
    Linear,
    RMSNorm,
    attention_bias,
    make_rotary_embedding,
)
from mobius.config import RopeConfig
from mobius.errors import ConfigError
from mobius_text.models.deepseek_v2 import DeepseekV2MoE
from mobius_text.models.deepseek_v32 import DeepseekV32Config, DeepseekV32ForCausalLM
from mobius_text.models.glm_moe_dsa import GlmMoeDsaAttention, GlmMoeDsaModel

KINDS = ("indexed_attention", "sliding_attention", "full_attention")
# What ``per_layer_config`` may set for the sliding layers.
SLIDING_FIELDS = (
    "num_attention_heads",
    "num_key_value_heads",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)


def _positive_int(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"dots3_note_text: {name} must be a positive int, not {value!r}")
    return value


@dataclass
class Dots3NoteTextConfig(DeepseekV32Config):
    shared_experts_intermediate_size: int = 1536
    layer_kinds: list[str] = field(default_factory=list)
    rope_thetas: dict[str, float] = field(default_factory=dict)
    sliding_fields: dict[str, int] = field(default_factory=dict)

    @classmethod
    def hf_fields(cls, hf_config):
        kinds = list(hf_config.layer_types)
        sliding_config = None
        if "sliding_attention" in kinds:  # sizes vary by layer: read the others' from one of them
            per_layer = hf_config.per_layer_config
            sliding_config = per_layer["sliding_attention"]
            main = next((i for i, kind in enumerate(kinds) if kind != "sliding_attention"), 0)
            hf_config = per_layer[main]
        fields = super().hf_fields(hf_config)
        if len(kinds) != fields["num_hidden_layers"] or set(kinds) - set(KINDS):
            raise ConfigError(f"dots3_note_text: layer_types needs one of {KINDS} per layer")
        thetas = {}
        for kind in set(kinds):
            params = (hf_config.rope_parameters or {}).get(kind) or {}
            if params.get("rope_type", "default") != "default":
                raise ConfigError(f"dots3_note_text: {kind} RoPE {params['rope_type']!r}")
            thetas[kind] = float(params.get("rope_theta", 10000.0))
        sliding = {}
        if "sliding_attention" in kinds:
            window = _positive_int("sliding_window", hf_config.sliding_window)
            sliding = {
                name: _positive_int(name, getattr(sliding_config, name)) for name in SLIDING_FIELDS
            }
            fields["sliding_window"] = window
        for rank in (fields["q_lora_rank"], sliding.get("q_lora_rank", 1)):
            _positive_int("q_lora_rank", rank)  # Dots 3's queries are always low-rank
        fields.update(
            layer_types=[],
            layer_kinds=kinds,
            rope_thetas=thetas,
            sliding_fields=sliding,
            softmax_scale=(hf_config.qk_nope_head_dim + hf_config.qk_rope_head_dim) ** -0.5,
            shared_experts_intermediate_size=hf_config.shared_experts_intermediate_size,
        )
        return fields

    def has_indexer(self, layer_idx: int) -> bool:
        return self.layer_kinds[layer_idx] == "indexed_attention"

    def layer_config(self, layer_idx: int) -> Dots3NoteTextConfig:
        """The config a layer's attention is built from (the sliding layers' own sizes)."""
        if self.layer_kinds[layer_idx] != "sliding_attention":
            return self
        s = self.sliding_fields
        qk = s["qk_nope_head_dim"] + s["qk_rope_head_dim"]
        return dataclasses.replace(
            self, **s, head_dim=s["qk_rope_head_dim"], softmax_scale=qk**-0.5
        )


class ScaledRMSNorm(RMSNorm):
    """``rms_norm(x) * weight * scale``."""

    def __init__(self, dim: int, eps: float, scale: float) -> None:
        super().__init__(dim, eps)
        self.scale = scale

    def forward(self, op, x):
        return op.Mul(super().forward(op, x), op.CastLike(self.scale, x))


class Dots3NoteTextAttention(GlmMoeDsaAttention):
    def __init__(self, config: Dots3NoteTextConfig, has_indexer: bool = True) -> None:
        super().__init__(config, has_indexer)
        c, eps = config, config.rms_norm_eps
        self.q_a_layernorm = ScaledRMSNorm(
            c.q_lora_rank, eps, (c.hidden_size / c.q_lora_rank) ** 0.5
        )
        self.kv_a_layernorm = ScaledRMSNorm(
            c.kv_lora_rank, eps, (c.hidden_size / c.kv_lora_rank) ** 0.5
        )
        self.k_rope_only_layernorm = RMSNorm(c.qk_rope_head_dim, eps)
        self.g_proj = Linear(c.hidden_size, c.num_attention_heads)

    def project_query(self, op, x):
        q_resid, q, _ = super().project_query(op, x)
        gate = op.Unsqueeze(self.g_proj(op, x), [-1])  # [b, s, H, 1]: one gate per head
        gate = op.Expand(gate, op.Constant(value_ints=[1, 1, 1, self.v_dim]))
        return q_resid, q, op.Reshape(gate, op.Constant(value_ints=[0, 0, -1]))

    def key_rotary_input(self, op, k_rot):
        return self.k_rope_only_layernorm(op, k_rot)


class Dots3NoteTextMoE(DeepseekV2MoE):
    def __init__(self, config: Dots3NoteTextConfig) -> None:
        super().__init__(config)
        c = config
        width = c.shared_experts_intermediate_size * c.n_shared_experts
        self.shared_experts = GatedMLP(c.hidden_size, width, c.hidden_act)


class Dots3NoteTextModel(GlmMoeDsaModel):
    attention_class = Dots3NoteTextAttention

    def __init__(self, config: Dots3NoteTextConfig) -> None:
        super().__init__(config)
        self.config = config
        self.kinds = sorted(set(config.layer_kinds))
        self.rotary_emb = nn.ModuleList(
            [
                make_rotary_embedding(
                    RopeConfig(theta=config.rope_thetas[kind]),
                    self.rope_dim(config, kind),
                    config.max_position_embeddings,
                )
                for kind in self.kinds
            ]
        )

    @staticmethod
    def rope_dim(config: Dots3NoteTextConfig, kind: str) -> int:
        if kind == "sliding_attention":
            return config.sliding_fields["qk_rope_head_dim"]
        return config.qk_rope_head_dim

    def make_attention(self, config, layer_idx):
        return self.attention_class(config.layer_config(layer_idx), config.has_indexer(layer_idx))

    def make_mlp(self, config, layer_idx):
        if config.mlp_layer_types[layer_idx] == "sparse":
            return Dots3NoteTextMoE(config)
        return GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        seq_len = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        rope = {
            kind: rotary(op, position_ids)
            for kind, rotary in zip(self.kinds, self.rotary_emb, strict=True)
        }
        windows = {kind: None for kind in self.kinds}
        windows["sliding_attention"] = self.config.sliding_window
        biases = {
            kind: attention_bias(op, attention_mask, seq_len, x.dtype, windows[kind])
            for kind in self.kinds
        }
        presents = []
        for layer, kind, past in zip(
            self.layers, self.config.layer_kinds, past_key_values, strict=True
        ):  # every layer selects its own keys, or attends to all of its window
            x, present, _ = layer(op, x, rope[kind], biases[kind], None, *past)
            presents.append(present)
        return self.norm(op, x), presents


class Dots3NoteForCausalLM(DeepseekV32ForCausalLM):
    config_class = Dots3NoteTextConfig
    model_class = Dots3NoteTextModel

    def cache_layout(self):
        c = self.config
        layout = []
        for i in range(c.num_hidden_layers):
            lc = c.layer_config(i)
            layer = [
                ("key", ["batch", 1, "past_sequence", lc.kv_lora_rank]),
                ("value", ["batch", 1, "past_sequence", lc.qk_rope_head_dim]),
            ]
            if c.has_indexer(i):
                layer.append(("index_key", ["batch", 1, "past_sequence", c.index_head_dim]))
            layout.append(layer)
        return layout


MODEL_TYPES = {"dots3_note_text": Dots3NoteForCausalLM}
