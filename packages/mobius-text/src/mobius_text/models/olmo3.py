"""OLMo 3: OLMo 2 with sliding-window layers and a RoPE schedule per layer type.

``layer_types`` defaults to three sliding-window layers then one full-attention
layer; ``rope_parameters`` holds one entry per layer type (HF puts a legacy
``rope_scaling`` on the full-attention layers only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from onnxscript import nn

from mobius.components import attention_bias, make_rotary_embedding
from mobius.config import RopeConfig
from mobius_text.models.olmo2 import Olmo2Config, Olmo2ForCausalLM, Olmo2Model


@dataclass
class Olmo3Config(Olmo2Config):
    # RoPE settings of each layer type ("sliding_attention", "full_attention").
    rope_by_layer_type: dict[str, RopeConfig] = field(default_factory=dict)

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields["rope_by_layer_type"] = {
            kind: RopeConfig.from_hf(
                SimpleNamespace(rope_parameters=hf_config.rope_parameters[kind])
            )
            for kind in set(fields["layer_types"])
        }
        # The model-wide entry only sizes the rotated channels (the same in every layer type).
        fields["rope"] = next(iter(fields["rope_by_layer_type"].values()))
        return fields


class Olmo3Model(Olmo2Model):
    def __init__(self, config: Olmo3Config) -> None:
        super().__init__(config)
        self.layer_kinds = sorted(config.rope_by_layer_type)
        self.rotary_emb = nn.ModuleList(
            [
                make_rotary_embedding(
                    config.rope_by_layer_type[kind], config.head_dim, config.max_position_embeddings
                )
                for kind in self.layer_kinds
            ]
        )

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        windows = {"full_attention": None, "sliding_attention": self.config.sliding_window}
        rope = {}
        bias = {}
        for kind, rotary in zip(self.layer_kinds, self.rotary_emb, strict=True):
            rope[kind] = rotary(op, position_ids)
            bias[kind] = attention_bias(op, attention_mask, seq_len, x.dtype, windows[kind])
        presents = []
        for layer, kind, (past_key, past_value) in zip(
            self.layers, self.config.layer_types, past_key_values, strict=True
        ):
            x, present = layer(op, x, rope[kind], bias[kind], past_key, past_value)
            presents.append(present)
        return self.norm(op, x), presents


class Olmo3ForCausalLM(Olmo2ForCausalLM):
    """OLMo 3's causal LM: the Llama head over :class:`Olmo3Model`."""

    config_class = Olmo3Config
    model_class = Olmo3Model


MODEL_TYPES = {"olmo3": Olmo3ForCausalLM}
