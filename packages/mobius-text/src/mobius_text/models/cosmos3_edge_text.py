"""The text decoder of Cosmos3 Edge: Llama with a ReLU-squared two-layer MLP, over Qwen3-VL's
interleaved M-RoPE.

What differs from Llama: each layer's ``mlp`` is ``fc2(act(fc1(x)))`` (``hidden_act``
``relu2`` on the hub; biases as ``mlp_bias`` says), not a gated MLP; and positions are
``position_ids [3, batch, sequence]`` rotated as Qwen3-VL's decoder rotates them
(``rope_parameters.mrope_section``, transformers' default ``[24, 20, 20]``; default rope
only).

Built only as the decoder of ``cosmos3_edge``: transformers has no causal-LM class for
``cosmos3_edge_text``, so it is not registered on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import MLP, DecoderLayer, RMSNorm
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel
from mobius_text.models.qwen3_vl_text import InterleavedMRopeRotary, Qwen3VLTextConfig


@dataclass
class Cosmos3EdgeTextConfig(Qwen3VLTextConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        # Qwen's reading drops MLP biases; Cosmos3 Edge's follow mlp_bias
        mlp_bias = bool(getattr(hf_config, "mlp_bias", False))
        return dict(super().hf_fields(hf_config), mlp_bias=mlp_bias)


class Cosmos3EdgeTextModel(LlamaModel):
    def __init__(self, config: Cosmos3EdgeTextConfig) -> None:
        super().__init__(config)
        self.rotary_emb = InterleavedMRopeRotary(
            config.rope.theta, config.head_dim, config.mrope_section
        )

    def make_layer(self, config: Cosmos3EdgeTextConfig, layer_idx: int) -> DecoderLayer:
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=MLP(
                config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_bias
            ),
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class Cosmos3EdgeTextForCausalLM(LlamaForCausalLM):
    """Llama's causal LM over :class:`Cosmos3EdgeTextModel`; built by ``cosmos3_edge``."""

    config_class = Cosmos3EdgeTextConfig
    model_class = Cosmos3EdgeTextModel


MODEL_TYPES: dict = {}  # cosmos3_edge_text: a part of cosmos3_edge only
