"""A.X-K1: DeepSeek-V3 with an RMS norm on the output of each MoE block.

The MoE block (routed experts plus shared experts) is normalised by
``post_mlp_layernorm`` before the residual add. Checkpoints keep that norm at the
decoder-layer level (``layers.{i}.post_mlp_layernorm``), and only sparse layers
have it. The queries always go through the low-rank ``q_a_proj`` / ``q_b_proj`` path.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components import RMSNorm
from mobius_text.models.deepseek_v2 import DeepseekV2Model
from mobius_text.models.deepseek_v3 import DeepseekV3Config, DeepseekV3ForCausalLM


class PostMoeNormDecoderLayer(nn.Module):
    """``x + attn(norm(x))``, then ``x + post_mlp_layernorm(moe(norm(x)))``."""

    def __init__(self, self_attn, mlp, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.input_layernorm = RMSNorm(hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(hidden_size, eps)
        self.post_mlp_layernorm = RMSNorm(hidden_size, eps)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, h)
        h = self.mlp(op, self.post_attention_layernorm(op, x))
        return op.Add(x, self.post_mlp_layernorm(op, h)), present


class AXK1Model(DeepseekV2Model):
    """DeepSeek-V3's layers; the sparse ones normalise their MoE output."""

    def make_layer(self, config, layer_idx):
        if config.mlp_layer_types[layer_idx] != "sparse":
            return super().make_layer(config, layer_idx)
        return PostMoeNormDecoderLayer(
            self.make_attention(config, layer_idx),
            self.make_mlp(config, layer_idx),
            config.hidden_size,
            config.rms_norm_eps,
        )


class AXK1ForCausalLM(DeepseekV3ForCausalLM):
    """A.X-K1 causal LM (HF ``AXK1ForCausalLM``)."""

    config_class = DeepseekV3Config
    model_class = AXK1Model


MODEL_TYPES = {"axk1": AXK1ForCausalLM}
