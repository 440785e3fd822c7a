"""Cohere Compass (text): Cohere2's parallel block with rotate-half RoPE set per layer type.

What differs from Cohere2 (``cohere2``):

- ``rope_parameters`` holds one entry per layer type (``full_attention``,
  ``sliding_attention``): a rope schedule of its own (its ``rope_theta``), or None for
  layers without positional encoding; every layer type the model uses must be named;
- RoPE rotates the two halves of each head (Llama's layout), not adjacent channel pairs;
- ``layer_types`` defaults to all ``full_attention``; ``logit_scale`` may be None (no
  scaling).

transformers' ``CohereCompassForCausalLM`` is the text-only model; as the decoder of
``cohere_compass`` it reads 3-D M-RoPE positions (``mobius_vision.models.cohere_compass``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from mobius.components import Attention, make_rotary_embedding
from mobius.config import RopeConfig
from mobius.errors import ConfigError
from mobius_text.models.cohere import CohereAttention
from mobius_text.models.cohere2 import Cohere2Config, Cohere2ForCausalLM, Cohere2Model


@dataclass
class CohereCompassTextConfig(Cohere2Config):
    #: Per layer type its rope schedule, or None for a type without RoPE (NoPE layers).
    layer_ropes: dict[str, RopeConfig | None] = field(default_factory=dict)

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(_LogitScaleOrOne(hf_config))
        params = dict(getattr(hf_config, "rope_parameters", None) or {})
        ropes = {}
        for kind in dict.fromkeys(fields["layer_types"]):
            if kind not in params:
                raise ConfigError(
                    f"{hf_config.model_type}: rope_parameters names no {kind!r} entry "
                    f"(it has {sorted(params)})"
                )
            ropes[kind] = layer_rope(hf_config.model_type, kind, params[kind])
        return dict(fields, layer_ropes=ropes)


def layer_rope(model_type: str, kind: str, params) -> RopeConfig | None:
    """One layer type's rope schedule (None: no RoPE), checked to be one mobius rotates."""
    if params is None:
        return None
    if not isinstance(params, dict) or not isinstance(params.get("rope_theta"), (int, float)):
        raise ConfigError(f"{model_type}: rope_parameters[{kind!r}] has no numeric rope_theta")
    rope = RopeConfig.from_hf(SimpleNamespace(rope_parameters=params))
    if rope.partial_rotary_factor != 1.0:  # transformers rotates whole heads whatever it says
        raise ConfigError(
            f"{model_type}: rope_parameters[{kind!r}] rotates part of each head "
            f"(partial_rotary_factor {rope.partial_rotary_factor}); Cohere Compass rotates all"
        )
    return rope


class _LogitScaleOrOne:
    """An HF config seen with ``logit_scale`` 1.0 where it is None (transformers' default)."""

    def __init__(self, hf_config) -> None:
        self._hf_config = hf_config

    def __getattr__(self, name):
        value = getattr(self._hf_config, name)
        return 1.0 if name == "logit_scale" and value is None else value


class CohereCompassAttention(CohereAttention):
    """Cohere's projections, rotated by halves (the base attention's rotation)."""

    forward = Attention.forward


class CohereCompassTextModel(Cohere2Model):
    def __init__(self, config: CohereCompassTextConfig) -> None:
        super().__init__(config)
        # one table per layer type with RoPE (the inherited ``rotary_emb`` goes unused)
        self.layer_rotary = {
            kind: self.make_rotary(config, kind)
            for kind, rope in config.layer_ropes.items()
            if rope is not None
        }

    def make_rotary(self, config: CohereCompassTextConfig, kind: str):
        """The rotary table of layer type ``kind`` (one with RoPE)."""
        rope = config.layer_ropes[kind]
        return make_rotary_embedding(rope, config.head_dim, config.max_position_embeddings)

    def make_attention(self, config, layer_idx):
        return CohereCompassAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
        )

    def layer_uses_rope(self, layer_idx: int) -> bool:
        return self.config.layer_ropes[self.config.layer_types[layer_idx]] is not None

    def position_embeddings(self, op, position_ids) -> dict:
        return {kind: table(op, position_ids) for kind, table in self.layer_rotary.items()}


class CohereCompassForCausalLM(Cohere2ForCausalLM):
    """Cohere Compass's causal LM: the Cohere head over :class:`CohereCompassTextModel`."""

    config_class = CohereCompassTextConfig
    model_class = CohereCompassTextModel


MODEL_TYPES = {"cohere_compass_text": CohereCompassForCausalLM}
