"""GLM-4.6V (``glm46v``) and GLM-GA (``glmga``): GLM-4.1V's tower and contract over either
GLM-V text decoder.

transformers' ``Glm46VForConditionalGeneration`` is GLM-4.1V's class with its tower and
decoder made from their configs' types (``AutoModel``), and ``glmga`` is the same class
under another config name. So a config names GLM-4.1V's dense ``glm4v_text`` decoder or
GLM-4.5V's MoE ``glm4v_moe_text``; the tower (``glm4v_vision`` or ``glm4v_moe_vision``,
the same layers), the checkpoint layout, the image processor and the M-RoPE positions
are GLM-4.1V's (:mod:`.glm4v`).

transformers 5.24 saves a GLM-4.6V's experts fused (``mlp.experts.gate_up_proj
[experts, 2 * inter, hidden]``, ``mlp.experts.down_proj [experts, hidden, inter]``: it has
no per-expert conversion for ``glm46v`` as it has for ``glm4v_moe``); they are split here
into the per-expert tensors GLM-4.5V's decoder reads, which are also read as they are.
The multi-token-prediction layer after the last one (``layers.{num_hidden_layers}``) is
not read by generation: it is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from onnxscript import nn

from mobius.errors import ConfigError
from mobius.weights import DerivedTensor
from mobius_text.models.glm4v_moe_text import Glm4vMoeTextConfig, Glm4vMoeTextForCausalLM
from mobius_text.models.glm4v_text import Glm4vTextConfig, Glm4vTextForCausalLM
from mobius_vision.models.glm4v import Glm4vConfig, Glm4vForConditionalGeneration

#: ``text_config.model_type`` -> the decoder's config class and module class
TEXT_DECODERS = {
    "glm4v_text": (Glm4vTextConfig, Glm4vTextForCausalLM),
    "glm4v_moe_text": (Glm4vMoeTextConfig, Glm4vMoeTextForCausalLM),
}


def text_decoder_of(model_type: str, text_type: Any) -> tuple[type, type]:
    """The ``(config class, decoder class)`` of a GLM-4.6V text config's ``model_type``."""
    if text_type not in TEXT_DECODERS:
        raise ConfigError(
            f"{model_type}: text_config.model_type {text_type!r} is not a GLM-V decoder "
            f"(one of {', '.join(TEXT_DECODERS)})"
        )
    return TEXT_DECODERS[text_type]


@dataclass
class Glm46VConfig(Glm4vConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        text_type = getattr(hf_config.text_config, "model_type", None)
        text_config_class, _ = text_decoder_of(hf_config.model_type, text_type)
        return dict(
            model_type=hf_config.model_type,
            vision=cls.vision_config_class.from_hf(hf_config.vision_config),
            text=text_config_class.from_hf(cls.text_hf_config(hf_config)),
            image_token_id=int(hf_config.image_token_id),
        )


class Glm46VForConditionalGeneration(Glm4vForConditionalGeneration):
    """GLM-4.1V's model over the decoder ``text_config.model_type`` names (see the module
    docstring)."""

    config_class = Glm46VConfig

    def __init__(self, config: Glm46VConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = self.tower_class(config.vision)
        decoder = next(m for c, m in TEXT_DECODERS.values() if type(config.text) is c)
        self.language_model = decoder(config.text)

    @property
    def ignored(self) -> tuple[str, ...]:
        """The multi-token-prediction layer GLM's MoE checkpoints carry after the last layer
        (transformers' GLM-4.5V ignores it by index)."""
        layers = self.config.text.num_hidden_layers
        return (*super().ignored, f"language_model.model.layers.{layers}.*")

    def sanitize(self, weights: dict) -> dict:
        return super().sanitize(per_expert(weights))


def per_expert(weights: dict) -> dict:
    """``weights`` with each fused ``mlp.experts.gate_up_proj`` / ``down_proj`` split into
    ``mlp.experts.{e}.gate_proj.weight``, ``up_proj`` and ``down_proj`` (see the module
    docstring); other tensors unchanged."""
    split = {}
    for name, tensor in weights.items():
        prefix, _, leaf = name.rpartition(".")
        if not prefix.endswith(".mlp.experts") or leaf not in ("gate_up_proj", "down_proj"):
            split[name] = tensor
            continue
        if len(tensor.shape) != 3:
            raise ConfigError(f"{name}: fused experts of shape {tuple(tensor.shape)}, not 3-D")
        experts, rows, _ = tensor.shape
        if leaf == "down_proj":
            parts = {"down_proj": (0, rows)}
        else:
            parts = {"gate_proj": (0, rows // 2), "up_proj": (rows // 2, rows)}
        for e in range(experts):
            for part, (start, stop) in parts.items():
                split[f"{prefix}.{e}.{part}.weight"] = _rows(tensor, e, start, stop)
    return split


def _rows(tensor, expert: int, start: int, stop: int) -> DerivedTensor:
    """``tensor[expert, start:stop]``, read when needed."""
    shape = (stop - start, tensor.shape[2])
    return DerivedTensor(
        lambda: np.ascontiguousarray(tensor.numpy()[expert, start:stop]), shape, tensor.dtype
    )


MODEL_TYPES = {
    "glm46v": Glm46VForConditionalGeneration,
    "glmga": Glm46VForConditionalGeneration,  # transformers maps it to GLM-4.6V's classes
}
