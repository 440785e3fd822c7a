"""Lara Mini: Qwen3.5's Gated DeltaNet beside sliding-window and NoPE full attention, MoE MLPs.

What changes from Qwen3.5-MoE:

* norms scale by ``weight`` (not ``1 + weight``), also the final and q/k norms;
* ``sliding_attention`` layers are Qwen3 attention (per-head q/k norms, no output gate)
  with full-width RoPE and a ``sliding_window``; ``full_attention`` layers have no
  positional encoding;
* the DeltaNet reads one fused ``in_proj`` (rows ``[q | k | v | z | b | a]``) and names its
  gated norm ``out_norm``, as checkpoints and transformers' ``save_pretrained`` do;
* MLPs: softmax top-k routing (renormalised with ``norm_topk_prob``) over fused
  ``experts.gate_up_proj`` / ``down_proj``, plus an ungated ``shared_expert``.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import (
    GatedMLP,
    Linear,
    RMSNorm,
    attention_bias,
)
from mobius.components.moe import (
    StackedGatedExperts,
    TopKRouter,
    flatten_tokens,
    unflatten_tokens,
)
from mobius.errors import ConfigError
from mobius_text.models.mamba import HybridDecoderLayer, real_token_scale
from mobius_text.models.olmo_hybrid import GatedDeltaNet, GatedRMSNormAfter
from mobius_text.models.qwen import QKNormAttention
from mobius_text.models.qwen3_5 import _WithDefaults
from mobius_text.models.qwen3_next import Qwen3NextConfig, Qwen3NextForCausalLM, Qwen3NextModel

KINDS = ("linear_attention", "sliding_attention", "full_attention")


@dataclass
class LaraMiniConfig(Qwen3NextConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        every_layer_moe = dict(intermediate_size=0, decoder_sparse_step=1, mlp_only_layers=[])
        fields = super().hf_fields(_WithDefaults(hf_config, **every_layer_moe))
        unknown = set(fields["layer_kinds"]) - set(KINDS)
        if unknown:
            raise ConfigError(f"lara_mini: unknown layer_types {sorted(unknown)}")
        window = hf_config.sliding_window
        if "sliding_attention" in fields["layer_kinds"] and (
            not isinstance(window, int) or isinstance(window, bool) or window < 1
        ):
            raise ConfigError(f"lara_mini: sliding_window must be a positive int, not {window!r}")
        # transformers' rotary spans the whole head whatever partial_rotary_factor says.
        fields["rope"].partial_rotary_factor = 1.0
        fields["sliding_window"] = window
        return fields


class LaraMiniGatedDeltaNet(GatedDeltaNet):
    """The Gated DeltaNet with one fused ``in_proj`` and the gated norm ``out_norm``."""

    def __init__(self, config: LaraMiniConfig) -> None:
        super().__init__(config)
        self.out_norm = GatedRMSNormAfter(self.dv, config.rms_norm_eps)
        self.out_proj = Linear(self.value_dim, config.hidden_size)

    def make_projections(self, config) -> None:
        rows = 2 * self.key_dim + 2 * self.value_dim + 2 * self.v_heads
        self.in_proj = Linear(config.hidden_size, rows)

    def project(self, op, x):
        splits = [2 * self.key_dim + self.value_dim, self.value_dim, self.v_heads, self.v_heads]
        return op.Split(self.in_proj(op, x), splits, axis=-1, _outputs=4)

    def output(self, op, o, gate):
        return self.out_proj(op, op.Reshape(self.out_norm(op, o, gate), [0, 0, -1]))


class LaraMiniSparseMoeBlock(nn.Module):
    """``gate`` (softmax top-k) over fused ``experts``, plus the ungated ``shared_expert``."""

    def __init__(self, config: LaraMiniConfig) -> None:
        super().__init__()
        c, h = config, config.hidden_size
        self.gate = TopKRouter(h, c.num_experts, c.num_experts_per_tok, normalize=c.norm_topk_prob)
        self.experts = StackedGatedExperts(c.num_experts, h, c.moe_intermediate_size, c.hidden_act)
        self.shared_expert = GatedMLP(h, c.shared_expert_intermediate_size, c.hidden_act)
        self.hidden_size = h

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)
        y = self.experts(op, tokens, self.gate(op, tokens))
        return unflatten_tokens(op, op.Add(y, self.shared_expert(op, tokens)), x)


class LaraMiniDecoderLayer(HybridDecoderLayer):
    norm_names = ("input_layernorm", "post_attention_layernorm")
    recurrent_name = "linear_attn"
    mlp_name = "mlp"

    def __init__(self, config: LaraMiniConfig, layer_idx: int) -> None:
        super().__init__(attends=config.layer_kinds[layer_idx] != "linear_attention")
        c = config
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        if self.attends:
            self.self_attn = QKNormAttention(
                c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                bias=c.attention_bias, out_bias=c.attention_bias, eps=c.rms_norm_eps,
            )  # fmt: skip
        else:
            self.linear_attn = LaraMiniGatedDeltaNet(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = LaraMiniSparseMoeBlock(c)


class LaraMiniModel(Qwen3NextModel):
    layer_class = LaraMiniDecoderLayer

    def __init__(self, config: LaraMiniConfig) -> None:
        super().__init__(config)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)  # weight, not 1 + weight
        self.config = config

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        x = self.embed_tokens(op, input_ids)
        rope = self.rotary_emb(op, position_ids)
        seq = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        window = self.config.sliding_window
        biases = {  # the sliding layers see the last ``window`` keys; the linear layers none
            "full_attention": attention_bias(op, attention_mask, seq, x.dtype),
            "sliding_attention": attention_bias(op, attention_mask, seq, x.dtype, window),
            "linear_attention": None,
        }
        real = real_token_scale(op, attention_mask, input_ids, x)
        presents = []
        for layer, kind, layer_past in zip(self.layers, self.config.layer_kinds, past, strict=True):
            layer_rope = rope if kind == "sliding_attention" else None  # full layers: NoPE
            x, present = layer(op, x, layer_rope, biases[kind], real, layer_past)
            presents.append(present)
        return self.norm(op, x), presents


class LaraMiniForCausalLM(Qwen3NextForCausalLM):
    config_class = LaraMiniConfig
    model_class = LaraMiniModel


MODEL_TYPES = {"lara_mini": LaraMiniForCausalLM}
