"""The text decoder of Qwen3-VL: Qwen3 with interleaved multimodal rotary positions.

As Qwen2-VL's decoder (``qwen2_vl_text``), it reads ``position_ids [3, batch, sequence]``
(temporal, height, width streams), but the streams are interleaved over the rotary
channels rather than given in sections: channel ``c`` (of ``head_dim/2``) reads the
height stream when ``c % 3 == 1`` and ``c < 3 * mrope_section[1]``, the width stream
when ``c % 3 == 2`` and ``c < 3 * mrope_section[2]``, and the temporal one otherwise
(transformers' ``Qwen3VLTextRotaryEmbedding``).

``qwen3_vl_moe_text`` is the same over Qwen3-MoE layers: top-k weights always
renormalised, experts fused as ``experts.gate_up_proj [experts, 2*inter, hidden]`` and
``experts.down_proj [experts, hidden, inter]`` (as transformers saves them); the hub's
transposed layout (``[experts, hidden, 2*inter]``, ``[experts, inter, hidden]``) is
transposed on load exactly when transformers transposes it (its shape differs).

Built only as the decoders of ``qwen3_vl`` and ``qwen3_vl_moe`` (which read 3-D positions
and add their DeepStack features after the first layers), so not registered on their own.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from mobius.components import GatedMLP
from mobius.components.moe import StackedGatedExperts, TopKRouter
from mobius.weights import DerivedTensor
from mobius_text.models.mixtral import SparseMoeBlock
from mobius_text.models.qwen import Qwen3ForCausalLM, Qwen3Model
from mobius_text.models.qwen2_vl_text import MRopeRotary, Qwen2VLTextConfig
from mobius_text.models.qwen3_moe import Qwen3MoeConfig, Qwen3MoeForCausalLM, Qwen3MoeModel

#: transformers' section when the config names none
DEFAULT_MROPE_SECTION = [24, 20, 20]


@dataclass
class Qwen3VLTextConfig(Qwen2VLTextConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        params = dict(getattr(hf_config, "rope_parameters", None) or {})
        if "mrope_section" not in params:
            hf_config = copy.copy(hf_config)
            hf_config.rope_parameters = {**params, "mrope_section": DEFAULT_MROPE_SECTION}
        return super().hf_fields(hf_config)


class InterleavedMRopeRotary(MRopeRotary):
    """M-RoPE whose height and width streams interleave with the temporal one (see above)."""

    def __init__(self, theta: float, head_dim: int, mrope_section: list[int]) -> None:
        super().__init__(theta, head_dim, mrope_section)
        channel = np.arange(head_dim // 2)
        stream = np.zeros(head_dim // 2, dtype=np.int64)
        for i in (1, 2):
            stream[(channel % 3 == i) & (channel < 3 * mrope_section[i])] = i
        self.stream = stream


class Qwen3VLTextModel(Qwen3Model):
    def __init__(self, config: Qwen3VLTextConfig) -> None:
        super().__init__(config)
        self.rotary_emb = InterleavedMRopeRotary(
            config.rope.theta, config.head_dim, config.mrope_section
        )


class Qwen3VLTextForCausalLM(Qwen3ForCausalLM):
    """Qwen3 over interleaved 3-D positions; built by ``qwen3_vl`` (see the module docstring)."""

    config_class = Qwen3VLTextConfig
    model_class = Qwen3VLTextModel


class _RenormalisedTopK:
    """An HF MoE text config seen with ``norm_topk_prob`` (which its class lacks: always on)."""

    def __init__(self, hf_config) -> None:
        self._hf_config = hf_config

    def __getattr__(self, name):
        return True if name == "norm_topk_prob" else getattr(self._hf_config, name)


@dataclass
class Qwen3VLMoeTextConfig(Qwen3VLTextConfig, Qwen3MoeConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        return super().hf_fields(_RenormalisedTopK(hf_config))


class StackedExperts(StackedGatedExperts):
    """Fused experts, dispatched as :class:`SparseMoeBlock` dispatches an expert list."""

    def dispatch(self, op, x, routing):
        return self(op, x, routing)


class Qwen3VLMoeTextModel(Qwen3MoeModel):
    def __init__(self, config: Qwen3VLMoeTextConfig) -> None:
        super().__init__(config)
        self.rotary_emb = InterleavedMRopeRotary(
            config.rope.theta, config.head_dim, config.mrope_section
        )

    def make_mlp(self, config, layer_idx):
        if not config.is_moe_layer(layer_idx):
            return GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        c = config
        router = TopKRouter(c.hidden_size, c.num_experts, c.num_experts_per_tok, normalize=True)
        experts = StackedExperts(
            c.num_experts, c.hidden_size, c.moe_intermediate_size, c.hidden_act
        )
        return SparseMoeBlock(router, experts, c.hidden_size)


def _transposed(tensor) -> DerivedTensor:
    shape = (tensor.shape[0], tensor.shape[2], tensor.shape[1])
    return DerivedTensor(
        lambda: np.ascontiguousarray(tensor.numpy().transpose(0, 2, 1)), shape, tensor.dtype
    )


class Qwen3VLMoeTextForCausalLM(Qwen3MoeForCausalLM):
    """Qwen3-MoE over interleaved 3-D positions with fused experts (see the module docstring)."""

    config_class = Qwen3VLMoeTextConfig
    model_class = Qwen3VLMoeTextModel

    def sanitize(self, weights: dict) -> dict:
        c = self.config
        expected = {  # transformers' layout of each fused expert tensor
            "gate_up_proj": (c.num_experts, 2 * c.moe_intermediate_size, c.hidden_size),
            "down_proj": (c.num_experts, c.hidden_size, c.moe_intermediate_size),
        }
        for key, tensor in list(weights.items()):
            shape = expected.get(key.rsplit(".", 1)[-1]) if ".mlp.experts." in key else None
            if shape is not None and tuple(tensor.shape) != shape:  # the hub's layout
                weights[key] = _transposed(tensor)
        return super().sanitize(weights)


MODEL_TYPES: dict = {}  # qwen3_vl_text, qwen3_vl_moe_text: parts of qwen3_vl, qwen3_vl_moe only
