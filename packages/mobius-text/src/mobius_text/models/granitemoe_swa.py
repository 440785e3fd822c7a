"""Granite-MoE-SWA: Granite-MoE-Shared's layers with Granite SWA's attention and RoPE bases.

From Granite SWA: sliding-window layers (``layer_types``), a learned sink logit per
head (``self_attn.sinks``) and a RoPE base per layer (``layer_rope_theta``, 0: NoPE).
From Granite-MoE(-Shared): µP multipliers and the optional dense ``shared_mlp``. The
routed experts are stored fused, as transformers keeps them in memory:
``block_sparse_moe.experts.gate_up_proj [E, 2*inter, hidden]`` and ``down_proj``, with
the router's ``block_sparse_moe.router.weight`` (softmax over each token's top-k logits).
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components.moe import (
    StackedGatedExperts,
    TopKRouter,
    flatten_tokens,
    unflatten_tokens,
)
from mobius_text.models.granite_swa import GraniteSWAConfig, GraniteSWAModel
from mobius_text.models.granitemoe import (
    GraniteMoeConfig,
    GraniteMoeDecoderLayer,
    GraniteMoeForCausalLM,
    GraniteMoeModel,
)


@dataclass
class GraniteMoeSWAConfig(GraniteMoeConfig, GraniteSWAConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)  # Granite-MoE clears the window: restore it
        fields.update(
            sliding_window=hf_config.sliding_window, layer_types=list(hf_config.layer_types)
        )
        return fields


class GraniteMoeSWAMoE(nn.Module):
    """``router`` (top-k logits, softmax over them) over fused ``experts``."""

    def __init__(self, config: GraniteMoeSWAConfig) -> None:
        super().__init__()
        c = config
        self.router = TopKRouter(
            c.hidden_size, c.num_local_experts, c.num_experts_per_tok, softmax_first=False
        )
        self.experts = StackedGatedExperts(
            c.num_local_experts, c.hidden_size, c.intermediate_size, c.hidden_act
        )
        self.hidden_size = c.hidden_size

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)  # [batch*seq, hidden]
        return unflatten_tokens(op, self.experts(op, tokens, self.router(op, tokens)), x)


class GraniteMoeSWADecoderLayer(GraniteMoeDecoderLayer):
    def __init__(self, config: GraniteMoeSWAConfig, self_attn) -> None:
        super().__init__(config, self_attn)
        self.block_sparse_moe = GraniteMoeSWAMoE(config)


class GraniteMoeSWAModel(GraniteSWAModel, GraniteMoeModel):
    """Granite SWA's forward and sink attention; Granite-MoE's layers."""

    def make_layer(self, config, layer_idx):
        return GraniteMoeSWADecoderLayer(config, self.make_attention(config, layer_idx))


class GraniteMoeSWAForCausalLM(GraniteMoeForCausalLM):
    config_class = GraniteMoeSWAConfig
    model_class = GraniteMoeSWAModel


MODEL_TYPES = {"granitemoe_swa": GraniteMoeSWAForCausalLM}
