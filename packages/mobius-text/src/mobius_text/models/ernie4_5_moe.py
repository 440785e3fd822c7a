"""ERNIE 4.5 MoE: interleaved (GLM-style) RoPE, biased routing choice, shared experts.

The router softmaxes the logits in float32, *chooses* the top-k experts by
``probs + moe_statics.e_score_correction_bias`` but weights them by the unbiased
probabilities, renormalised by ``max(sum, moe_norm_min)``. Layers
``moe_layer_start_index..moe_layer_end_index`` on the ``moe_layer_interval`` grid are MoE
(routed experts plus ``shared_experts``); the others keep a dense MLP. ``use_bias``
puts biases on every attention projection, dense MLP, shared expert and the LM head.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import DecoderLayer, GatedMLP, Linear, RMSNorm, TransposedParameter
from mobius.components.moe import (
    ExpertList,
    dispatch_experts,
    flatten_tokens,
    top_k_routing,
    unflatten_tokens,
)
from mobius_text.models.helium import InterleavedRotaryAttention
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class Ernie4_5_MoeConfig(LlamaConfig):  # noqa: N801 (HF's class name)
    use_bias: bool = False
    num_experts: int = 64
    num_experts_per_tok: int = 6
    moe_intermediate_size: int = 1536
    moe_num_shared_experts: int = 0
    moe_layer_start_index: int = 1
    moe_layer_end_index: int = -1
    moe_layer_interval: int = 1
    moe_norm_min: float = 1e-12

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        use_bias = bool(hf_config.use_bias)
        if use_bias and fields["tie_word_embeddings"]:
            raise NotImplementedError("ernie4_5_moe with use_bias and tied embeddings")
        fields.update(
            use_bias=use_bias,
            num_experts=hf_config.moe_num_experts,
            num_experts_per_tok=hf_config.moe_k,
            moe_intermediate_size=hf_config.moe_intermediate_size,
            moe_num_shared_experts=hf_config.moe_num_shared_experts or 0,
            moe_layer_start_index=hf_config.moe_layer_start_index,
            moe_layer_end_index=hf_config.moe_layer_end_index,
            moe_layer_interval=hf_config.moe_layer_interval,
            moe_norm_min=float(hf_config.moe_norm_min),
        )
        return fields

    def is_moe_layer(self, i: int) -> bool:
        end = self.moe_layer_end_index
        end = self.num_hidden_layers - 1 if end == -1 else end
        return (i + 1) % self.moe_layer_interval == 0 and self.moe_layer_start_index <= i <= end


class MoeStatics(nn.Module):
    """``e_score_correction_bias [1, experts]``: shifts which experts are chosen, not their weights."""

    def __init__(self, num_experts: int) -> None:
        super().__init__()
        self.e_score_correction_bias = nn.Parameter([1, num_experts])

    def forward(self, op):
        return self.e_score_correction_bias


class ErnieRouter(nn.Module):
    def __init__(self, config: Ernie4_5_MoeConfig) -> None:
        super().__init__()
        self.weight = TransposedParameter(config.num_experts, config.hidden_size)
        self.top_k, self.norm_min = config.num_experts_per_tok, config.moe_norm_min

    def forward(self, op, x, choice_bias):
        routing = top_k_routing(
            op, op.MatMul(x, self.weight), self.top_k, normalize=False, choice_bias=choice_bias
        )  # float32, unselected experts zero
        total = op.Max(op.ReduceSum(routing, [-1], keepdims=1), self.norm_min)
        return op.Div(routing, total)


class ErnieMoeBlock(nn.Module):
    def __init__(self, config: Ernie4_5_MoeConfig) -> None:
        super().__init__()
        h, inter = config.hidden_size, config.moe_intermediate_size
        self.gate = ErnieRouter(config)
        # Checkpoints keep the choice bias beside the router, not inside it.
        self.moe_statics = MoeStatics(config.num_experts)
        self.experts = ExpertList(
            [GatedMLP(h, inter, config.hidden_act) for _ in range(config.num_experts)]
        )
        shared = config.moe_num_shared_experts
        self.shared_experts = (
            GatedMLP(h, inter * shared, config.hidden_act, config.use_bias) if shared else None
        )
        self.hidden_size = h

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)
        routing = self.gate(op, tokens, self.moe_statics(op))
        y = dispatch_experts(op, tokens, routing, list(self.experts))
        if self.shared_experts is not None:
            y = op.Add(y, self.shared_experts(op, tokens))
        return unflatten_tokens(op, y, x)


class Ernie4_5_MoeModel(LlamaModel):  # noqa: N801
    def make_attention(self, config, layer_idx):
        return InterleavedRotaryAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.use_bias,
            out_bias=config.use_bias,
        )

    def make_layer(self, config, layer_idx):
        if config.is_moe_layer(layer_idx):
            mlp = ErnieMoeBlock(config)
        else:
            mlp = GatedMLP(
                config.hidden_size, config.intermediate_size, config.hidden_act, config.use_bias
            )
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=mlp,
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class Ernie4_5_MoeForCausalLM(LlamaForCausalLM):  # noqa: N801
    config_class = Ernie4_5_MoeConfig
    model_class = Ernie4_5_MoeModel
    # Released checkpoints also carry the multi-token-prediction layers (transformers skips "mtp").
    ignored = ("*mtp*",)

    def make_head(self, config: Ernie4_5_MoeConfig):
        if config.tie_word_embeddings:
            return super().make_head(config)
        return Linear(config.hidden_size, config.vocab_size, bias=config.use_bias)


MODEL_TYPES = {"ernie4_5_moe": Ernie4_5_MoeForCausalLM}
