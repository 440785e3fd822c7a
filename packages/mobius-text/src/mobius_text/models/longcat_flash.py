"""LongCat-Flash: DeepSeek-V3's MLA in doubled layers with a shortcut MoE with zero experts.

Each of the ``num_layers`` decoder layers holds two attention sublayers (each with
its own cache, so the model has ``2 * num_layers`` caches) and two dense MLPs:

    x = x + attn0(norm0(x));  h = post0(x)
    shortcut = moe(h);        x = x + mlps0(h)
    x = x + attn1(norm1(x));  x = x + mlps1(post1(x)) + shortcut

The MLA queries are scaled by ``sqrt(hidden / q_lora_rank)`` (folded here into the
softmax scale: both query parts are scaled, and RoPE is linear) and the normalised
latent by ``sqrt(hidden / kv_lora_rank)`` before the cache. RoPE pairs are
interleaved in the checkpoint. The MoE router scores ``n_routed_experts +
zero_expert_num`` experts with a softmax, chooses on ``score +
e_score_correction_bias``, and weights by the raw scores times
``routed_scaling_factor`` (no renormalisation); a zero expert returns its input.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    GatedMLP,
    Linear,
    RMSNorm,
    attention_bias,
    make_rotary_embedding,
)
from mobius.components.moe import (
    ExpertList,
    dispatch_experts,
    flatten_tokens,
    top_k_routing,
    unflatten_tokens,
)
from mobius_text.models.deepseek_v2 import (
    LOW_RANK_NORM_EPS,
    DeepseekV2Attention,
    DeepseekV2Config,
)
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel


@dataclass
class LongcatFlashConfig(DeepseekV2Config):
    """DeepSeek-V2's MLA fields plus the number of zero (identity) experts."""

    zero_expert_num: int = 0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            rope_layout="deinterleaved",  # HF always rotates LongCat's interleaved pairs
            n_shared_experts=0,
            zero_expert_num=hf_config.zero_expert_num or 0,
        )
        return fields


class ScaledRMSNorm(RMSNorm):
    """An RMS norm whose output is multiplied by a constant."""

    def __init__(self, dim: int, eps: float, scale: float) -> None:
        super().__init__(dim, eps)
        self.scale = scale

    def forward(self, op, x: ir.Value) -> ir.Value:
        return op.Mul(super().forward(op, x), self.scale)


class LongcatFlashMLA(DeepseekV2Attention):
    """MLA with LongCat's LoRA scalings of the query and of the cached latent."""

    def __init__(self, config: LongcatFlashConfig) -> None:
        super().__init__(config)
        hidden = config.hidden_size
        self.scale *= (hidden / config.q_lora_rank) ** 0.5  # q_nope and q_rot both scaled
        self.kv_a_layernorm = ScaledRMSNorm(
            config.kv_lora_rank, LOW_RANK_NORM_EPS, (hidden / config.kv_lora_rank) ** 0.5
        )


class LongcatFlashRouter(nn.Module):
    """Softmax over routed + zero experts; bias-corrected choice; scaled, unnormalised weights."""

    def __init__(self, config: LongcatFlashConfig) -> None:
        super().__init__()
        total = config.n_routed_experts + config.zero_expert_num
        self.classifier = Linear(config.hidden_size, total)
        self.e_score_correction_bias = nn.Parameter([total])
        self.top_k, self.scale = config.num_experts_per_tok, config.routed_scaling_factor

    def forward(self, op, x: ir.Value) -> ir.Value:
        logits = op.Cast(self.classifier(op, x), to=ir.DataType.FLOAT)  # [tokens, total]
        routing = top_k_routing(
            op, logits, self.top_k, normalize=False, choice_bias=self.e_score_correction_bias
        )
        return op.Mul(routing, self.scale)  # [tokens, routed + zero experts]


class LongcatFlashMoE(nn.Module):
    """Routed gated experts plus identity ("zero") experts."""

    def __init__(self, config: LongcatFlashConfig) -> None:
        super().__init__()
        self.router = LongcatFlashRouter(config)
        self.experts = ExpertList(
            [
                GatedMLP(config.hidden_size, config.moe_intermediate_size, config.hidden_act)
                for _ in range(config.n_routed_experts)
            ]
        )
        self.zero_experts, self.hidden = config.zero_expert_num, config.hidden_size

    def forward(self, op, x: ir.Value) -> ir.Value:
        flat = flatten_tokens(op, x, self.hidden)  # [tokens, hidden]
        identity = [lambda op, rows: rows] * self.zero_experts
        out = dispatch_experts(op, flat, self.router(op, flat), [*self.experts, *identity])
        return unflatten_tokens(op, out, x)


class LongcatFlashDecoderLayer(nn.Module):
    """Two attention + MLP sublayers, with the MoE of the first one added at the end."""

    def __init__(self, config: LongcatFlashConfig) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.mlp = LongcatFlashMoE(config)
        self.self_attn = nn.ModuleList([LongcatFlashMLA(config) for _ in range(2)])
        self.mlps = nn.ModuleList(
            [GatedMLP(hidden, config.intermediate_size, config.hidden_act) for _ in range(2)]
        )
        self.input_layernorm = nn.ModuleList([RMSNorm(hidden, eps) for _ in range(2)])
        self.post_attention_layernorm = nn.ModuleList([RMSNorm(hidden, eps) for _ in range(2)])

    def forward(self, op, x, position_embeddings, bias, past):
        """``past``: the two sublayers' ``(latent, k_rot)`` caches; returns their presents."""
        presents, shortcut = [], None
        for i in range(2):
            h, present = self.self_attn[i](
                op, self.input_layernorm[i](op, x), position_embeddings, bias, *past[i]
            )
            presents.append(present)
            x = op.Add(x, h)
            h = self.post_attention_layernorm[i](op, x)
            if i == 0:
                shortcut = self.mlp(op, h)
            x = op.Add(x, self.mlps[i](op, h))
        return op.Add(x, shortcut), presents


class LongcatFlashModel(LlamaModel):
    """Llama's embeddings, final norm and RoPE around ``num_layers`` doubled layers."""

    def __init__(self, config: LongcatFlashConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        num_layers = config.num_hidden_layers // 2  # HF's num_hidden_layers counts sublayers
        self.layers = nn.ModuleList([LongcatFlashDecoderLayer(config) for _ in range(num_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        cos_sin = self.rotary_emb(op, position_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        bias = attention_bias(op, attention_mask, seq_len, x.dtype)
        presents = []
        for i, layer in enumerate(self.layers):
            x, layer_presents = layer(op, x, cos_sin, bias, past_key_values[2 * i : 2 * i + 2])
            presents.extend(layer_presents)
        return self.norm(op, x), presents


class LongcatFlashForCausalLM(LlamaForCausalLM):
    """LongCat-Flash causal LM (multi-token-prediction layers, when a checkpoint has them, are not used)."""

    config_class = LongcatFlashConfig
    model_class = LongcatFlashModel
    ignored = ("model.mtp.*",)  # multi-token-prediction heads: not part of the LM

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        c = self.config
        return [(1, c.kv_lora_rank, c.qk_rope_head_dim)] * c.num_hidden_layers

    def sanitize(self, weights: dict) -> dict:
        """transformers' fused ``gate_up_proj`` has rows for the zero experts too, which
        ``save_pretrained`` writes as ``experts.{e}`` for ``e >= n_routed_experts``; an
        identity expert never reads them."""
        routed = self.config.n_routed_experts
        for name in list(weights):
            parts = name.split(".")
            index = parts[parts.index("experts") + 1] if "experts" in parts else ""
            if index.isdigit() and int(index) >= routed:
                weights.pop(name)
        return super().sanitize(weights)


MODEL_TYPES = {"longcat_flash": LongcatFlashForCausalLM}
