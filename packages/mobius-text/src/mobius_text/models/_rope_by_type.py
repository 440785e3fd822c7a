"""RoPE settings per layer type, for the families whose full and sliding layers rotate differently.

transformers 5 keeps one ``rope_parameters`` dict per layer type (OLMo 3, Laguna, Dory,
ZAYA...). The config holds them as ``rope_by_layer_type``; the backbone builds one rotary
table per type (``rotary_emb.{i}``, types in sorted order) and gives each layer its type's
table and mask.
"""

from __future__ import annotations

from types import SimpleNamespace

from onnxscript import nn

from mobius.components import attention_bias, make_rotary_embedding
from mobius.config import RopeConfig


def rope_by_layer_type_fields(hf_config, layer_types) -> dict:
    """``rope_by_layer_type`` (one :class:`RopeConfig` per type) and ``rope``, the first of them:
    the model-wide entry only sizes the rotated channels (the same in every layer type)."""
    by_kind = {
        kind: RopeConfig.from_hf(SimpleNamespace(rope_parameters=hf_config.rope_parameters[kind]))
        for kind in set(layer_types)
    }
    return dict(rope_by_layer_type=by_kind, rope=next(iter(by_kind.values())))


class RotaryByLayerType:
    """Backbone mixin: a rotary table and a mask per layer type.

    :meth:`make_rotary_by_layer_type` sets ``layer_kinds`` and ``rotary_emb``;
    :meth:`position_embeddings` gives each type's ``(cos, sin)`` (LlamaModel's forward reads
    it), and :meth:`ropes_and_biases` also each type's mask, windowed for the types in
    :attr:`windowed_kinds`.
    """

    windowed_kinds: tuple[str, ...] = ("sliding_attention",)

    def make_rotary_by_layer_type(self, config) -> None:
        self.layer_kinds = sorted(config.rope_by_layer_type)
        self.rotary_emb = nn.ModuleList(
            [
                make_rotary_embedding(
                    config.rope_by_layer_type[kind], config.head_dim, config.max_position_embeddings
                )
                for kind in self.layer_kinds
            ]
        )

    def position_embeddings(self, op, position_ids) -> dict:
        """Per layer type, its own table's ``(cos, sin)``."""
        return {
            kind: rotary(op, position_ids)
            for kind, rotary in zip(self.layer_kinds, self.rotary_emb, strict=True)
        }

    def ropes_and_biases(self, op, input_ids, attention_mask, position_ids, dtype):
        """Per layer type: its ``(cos, sin)`` and its attention bias (for backbones that run
        their layers themselves)."""
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        rope = self.position_embeddings(op, position_ids)
        bias = {
            kind: attention_bias(
                op,
                attention_mask,
                seq_len,
                dtype,
                self.config.sliding_window if kind in self.windowed_kinds else None,
            )
            for kind in rope
        }
        return rope, bias
