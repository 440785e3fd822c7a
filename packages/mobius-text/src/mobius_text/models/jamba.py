"""Jamba: Mamba mixers and attention layers (no positional encoding), with MoE feed-forwards.

``layers_block_type`` picks the mixer per layer (``mamba`` or ``attention``) and
``layers_num_experts`` the feed-forward (a gated MLP, or a top-k MoE whose
softmax weights are not renormalised). Jamba's Mamba mixer RMS-normalises dt,
B and C with learned scales before discretisation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxscript import nn

from mobius.components import Attention, Embedding, GatedMLP, RMSNorm
from mobius.components.moe import ExpertList, TopKRouter, flatten_tokens, unflatten_tokens
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM
from mobius_text.models.mamba import (
    HybridDecoderLayer,
    HybridModel,
    MambaConfig,
    MambaMixer,
)


@dataclass
class JambaConfig(LlamaConfig):
    layers_block_type: list[str] = field(default_factory=list)
    layers_num_experts: list[int] = field(default_factory=list)
    num_experts_per_tok: int = 2
    mamba: MambaConfig | None = None

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            rope=None,
            layers_block_type=list(hf_config.layers_block_type),
            layers_num_experts=list(hf_config.layers_num_experts),
            num_experts_per_tok=hf_config.num_experts_per_tok,
            mamba=MambaConfig(
                model_type=hf_config.model_type,
                vocab_size=hf_config.vocab_size,
                hidden_size=hf_config.hidden_size,
                intermediate_size=hf_config.mamba_expand * hf_config.hidden_size,
                num_hidden_layers=hf_config.num_hidden_layers,
                state_size=hf_config.mamba_d_state,
                conv_kernel=hf_config.mamba_d_conv,
                time_step_rank=hf_config.mamba_dt_rank,
                use_bias=hf_config.mamba_proj_bias,
                use_conv_bias=hf_config.mamba_conv_bias,
                hidden_act=hf_config.hidden_act,
                mixer_rms_eps=hf_config.rms_norm_eps,
            ),
        )
        return fields


class JambaMambaMixer(MambaMixer):
    """The Mamba mixer with learned RMS norms on dt (before ``dt_proj``), B and C."""

    def __init__(self, config: MambaConfig) -> None:
        super().__init__(config)
        self.dt_layernorm = RMSNorm(config.time_step_rank, config.mixer_rms_eps)
        self.b_layernorm = RMSNorm(config.state_size, config.mixer_rms_eps)
        self.c_layernorm = RMSNorm(config.state_size, config.mixer_rms_eps)

    def ssm_inputs(self, op, x):
        dt, b, c = super().ssm_inputs(op, x)
        return self.dt_layernorm(op, dt), self.b_layernorm(op, b), self.c_layernorm(op, c)


class JambaSparseMoeBlock(nn.Module):
    """``router`` picks the top-k ``experts`` by softmax weight (not renormalised)."""

    def __init__(self, config: JambaConfig, num_experts: int) -> None:
        super().__init__()
        self.router = TopKRouter(
            config.hidden_size, num_experts, config.num_experts_per_tok, normalize=False
        )
        self.experts = ExpertList(
            [
                GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
                for _ in range(num_experts)
            ]
        )
        self.hidden_size = config.hidden_size

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)  # [batch*seq, hidden]
        y = self.experts.dispatch(op, tokens, self.router(op, tokens))
        return unflatten_tokens(op, y, x)


class JambaDecoderLayer(HybridDecoderLayer):
    def __init__(self, config: JambaConfig, block_type: str, num_experts: int) -> None:
        super().__init__(block_type == "attention")
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if self.attends:  # no positional encoding: the layers get no rope
            self.self_attn = Attention(
                config.hidden_size,
                config.num_attention_heads,
                config.num_key_value_heads,
                config.head_dim,
            )
        else:
            self.mamba = JambaMambaMixer(config.mamba)
        self.pre_ff_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if num_experts > 1:
            self.feed_forward = JambaSparseMoeBlock(config, num_experts)
        else:
            self.feed_forward = GatedMLP(
                config.hidden_size, config.intermediate_size, config.hidden_act
            )


class JambaModel(HybridModel):
    """No positional encoding: ``rotary_emb`` stays None."""

    norm_name = "final_layernorm"

    def __init__(self, config: JambaConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [
                JambaDecoderLayer(config, kind, experts)
                for kind, experts in zip(
                    config.layers_block_type, config.layers_num_experts, strict=True
                )
            ]
        )
        self.final_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class JambaForCausalLM(LlamaForCausalLM):
    config_class = JambaConfig
    model_class = JambaModel

    def cache_layout(self):
        c, m = self.config, self.config.mamba
        kv = ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]
        return [
            [("key", kv), ("value", kv)] if kind == "attention" else m.state_layout()
            for kind in c.layers_block_type
        ]


MODEL_TYPES = {"jamba": JambaForCausalLM}
