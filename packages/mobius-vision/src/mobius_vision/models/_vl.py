"""What every vision–language family shares: a tower and a decoder found through the registry.

A VL model is composed, never copied: its vision tower is the ``tower_class`` of
whatever mobius registers for ``vision_config.model_type`` (CLIP's, SigLIP's...),
and its text decoder is the causal LM mobius-text registers for
``text_config.model_type``, built from the same config class a text-only build
uses. The family adds the projector and says which tower states it reads.
"""

from __future__ import annotations

from typing import ClassVar

from onnxscript import nn

from mobius import registry
from mobius.components import module_scope
from mobius.errors import ConfigError
from mobius.tasks import MultimodalDecoderModel
from mobius_vision.models._compose import merge_image_features


def vision_tower(config) -> nn.Module:
    """The vision tower mobius registers for ``config.model_type``."""
    top = registry.get(config.model_type).module_class()
    tower = getattr(top, "tower_class", None)
    if tower is None:
        raise ConfigError(f"{config.model_type} is not a vision tower mobius can compose")
    return tower(config)


def text_decoder(config) -> nn.Module:
    """The causal LM mobius registers for ``config.model_type``."""
    entry = registry.get(config.model_type)
    if entry.task != "causal-lm":
        raise ConfigError(f"{config.model_type} is a {entry.task} model, not a text decoder")
    return entry.module_class()(config)


def layer_index(layer: int, num_layers: int) -> int:
    """``hidden_states[layer]`` as a non-negative index (``hidden_states`` has ``num_layers + 1``)."""
    return layer if layer >= 0 else num_layers + 1 + layer


def flatten_images(op, features):
    """``[num_images, tokens, hidden]`` to ``[num_images * tokens, hidden]``.

    Sizes come from the shape (not ``-1``) so that no images (a single-graph decode
    step) give an empty result rather than an error.
    """
    rows = op.ReduceProd(op.Shape(features, start=0, end=2), keepdims=1)
    return op.Reshape(features, op.Concat(rows, op.Shape(features, start=2), axis=0))


class VisionLanguageModel(MultimodalDecoderModel):
    """``vision_tower``, ``multi_modal_projector`` and ``language_model``, composed.

    Subclasses set ``config_class``, build the projector in :meth:`make_projector`,
    and compute ``image_features`` (``[image_tokens, text_hidden]``).
    """

    task = "vision-language"
    #: Checkpoint key prefixes and the module paths they map to, tried in order (longest
    #: first): every layout (hub, transformers 4.5x, 5) to the module tree.
    renames: ClassVar[dict[str, str]] = {
        "model.vision_tower.": "vision_tower.",
        "vision_tower.vision_model.": "vision_tower.",
        "model.multi_modal_projector.": "multi_modal_projector.",
        "model.language_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.vision_tower = self.make_vision_tower(config)
        self.multi_modal_projector = self.make_projector(config)
        self.language_model = self.make_language_model(config)

    def make_vision_tower(self, config) -> nn.Module:
        """The tower mobius registers for the vision config's type."""
        return vision_tower(config.vision)

    def make_projector(self, config) -> nn.Module:
        raise NotImplementedError

    def make_language_model(self, config) -> nn.Module:
        """The causal LM mobius-text registers for the text config's type."""
        return text_decoder(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        """The vision graph's inputs: ``(name, dtype, shape)``."""
        height, width = self.config.vision.image_size
        channels = self.config.vision.num_channels
        return [("pixel_values", dtype, ["num_images", channels, height, width])]

    def vision_outputs(self) -> list[tuple]:
        """The vision graph's outputs ``(name, shape)``; :meth:`image_features` returns one value
        per entry (several as a tuple), and the embedding graph takes them all."""
        return [("image_features", ["num_image_tokens", self.config.text.hidden_size])]

    def vision_modules(self) -> list[nn.Module]:
        """The submodules :meth:`image_features` reads."""
        return [self.vision_tower, self.multi_modal_projector]

    def tower_states(self, op, pixel_values, num_layers: int | None = None) -> list:
        """The tower's ``hidden_states``, under the tower's own parameter names."""
        with module_scope(op, self.vision_tower):
            return self.vision_tower.hidden_states(op, pixel_values, num_layers)

    def embed(self, op, input_ids, image_features):
        """Token embeddings with the image placeholders replaced by ``image_features``."""
        embeds = self.token_embeddings(op, input_ids)  # [batch, sequence, hidden]
        return merge_image_features(
            op, embeds, input_ids, image_features, self.config.image_token_id
        )
