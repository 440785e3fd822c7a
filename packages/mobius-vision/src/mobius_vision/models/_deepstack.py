"""DeepStack: image features that the text decoder adds again, at the image tokens, after its
first layers.

A family gives ``levels`` and its :meth:`image_features` returns ``(features, deepstack)``,
``deepstack [levels, image_tokens, text_hidden]``. In the split form the vision graph
writes ``deepstack_features``; the embedding graph scatters each level to the image
placeholders as ``deepstack_embeds [levels, batch, sequence, text_hidden]`` (zeros
elsewhere and on decode steps), which the decoder graph adds after layer ``i`` for level
``i``. The decoder itself stays its text-only build. Qwen3-VL and Granite-Docling use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import onnx_ir as ir

from mobius_vision.models._compose import merge_image_features


@contextlib.contextmanager
def layer_outputs_added(op, layers, additions: list, at: list[int] | None = None) -> Iterator:
    """Within the block, ``layers[at[i]]`` returns its hidden states plus ``additions[i]``.

    ``at`` defaults to the first ``len(additions)`` layers. For a decoder whose layers return
    ``(hidden_states, *rest)``; the decoder itself is left as its text-only build.
    """
    at = list(range(len(additions))) if at is None else at
    patched = [list(layers)[i] for i in at]
    for layer, addition in zip(patched, additions, strict=True):
        forward = layer.forward

        def added(op, *args, _forward=forward, _addition=addition, **kwargs):
            x, *rest = _forward(op, *args, **kwargs)
            return (op.Add(x, _addition), *rest)

        object.__setattr__(layer, "forward", added)
    try:
        yield
    finally:
        for layer in patched:
            object.__delattr__(layer, "forward")


class DeepStackMixin:
    """Mixed in before :class:`~mobius_vision.models._vl.VisionLanguageModel`."""

    @property
    def levels(self) -> int:
        raise NotImplementedError

    def deepstack_layers(self) -> list[int]:
        """The decoder layers after which the levels are added, in level order."""
        return list(range(self.levels))

    def vision_outputs(self) -> list[tuple]:
        hidden = self.config.text.hidden_size
        return [
            ("image_features", ["num_image_tokens", hidden]),
            ("deepstack_features", [self.levels, "num_image_tokens", hidden]),
        ]

    def embedding_outputs(self) -> list[tuple]:
        hidden = self.config.text.hidden_size
        return [("deepstack_embeds", [self.levels, "batch", "sequence", hidden])]

    def embed(self, op, input_ids, image_features, deepstack_features):
        embeds = super().embed(op, input_ids, image_features)  # [batch, sequence, hidden]
        zeros = op.ConstantOfShape(op.Shape(embeds), value=ir.tensor([0.0], dtype=embeds.dtype))
        levels = [
            merge_image_features(
                op,
                zeros,
                input_ids,
                op.Gather(deepstack_features, op.Constant(value_int=i), axis=0),
                self.config.image_token_id,
            )
            for i in range(self.levels)
        ]
        deepstack = op.Concat(*(op.Unsqueeze(level, [0]) for level in levels), axis=0)
        return embeds, deepstack  # deepstack: [levels, batch, sequence, hidden]

    def decode(self, op, inputs_embeds, attention_mask, position_ids, past_key_values, deepstack):
        additions = [
            op.Gather(deepstack, op.Constant(value_int=i), axis=0) for i in range(self.levels)
        ]
        layers = self.language_model.model.layers
        with layer_outputs_added(op, layers, additions, self.deepstack_layers()):
            return super().decode(op, inputs_embeds, attention_mask, position_ids, past_key_values)
