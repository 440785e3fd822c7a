"""Table Transformer: DETR with pre-norm layers, and a final LayerNorm after the encoder too.

Each encoder and decoder block normalises its input and adds its output to the residual
(DETR normalises after the sum); the checkpoint names are DETR's, plus
``model.encoder.layernorm``, with learned position tables under ``model.backbone``.
"""

from __future__ import annotations

from mobius.components import LayerNorm
from mobius_vision.models._detr import (
    DetrDecoder,
    DetrDecoderLayer,
    DetrEncoder,
    DetrEncoderLayer,
    DetrForObjectDetection,
    DetrModel,
)


class TableTransformerEncoderLayer(DetrEncoderLayer):
    """Pre-norm: ``h + attn(norm(h))``, then ``h + ffn(norm(h))``."""

    def forward(self, op, hidden, bias, positions):
        normed = self.self_attn_layer_norm(op, hidden)
        hidden = op.Add(hidden, self.self_attn(op, normed, normed, bias, positions, positions))
        return op.Add(hidden, self.update(op, self.final_layer_norm(op, hidden)))


class TableTransformerDecoderLayer(DetrDecoderLayer):
    """Pre-norm self-attention, cross-attention and feed-forward blocks."""

    def forward(self, op, hidden, memory, memory_bias, query_positions, memory_positions):
        normed = self.self_attn_layer_norm(op, hidden)
        attended = self.self_attn(op, normed, normed, None, query_positions, query_positions)
        hidden = op.Add(hidden, attended)
        normed = self.encoder_attn_layer_norm(op, hidden)
        attended = self.encoder_attn(
            op, normed, memory, memory_bias, query_positions, memory_positions
        )
        hidden = op.Add(hidden, attended)
        return op.Add(hidden, self.update(op, self.final_layer_norm(op, hidden)))


class TableTransformerEncoder(DetrEncoder):
    """The pre-norm layers, then ``layernorm``."""

    layer_class = TableTransformerEncoderLayer

    def __init__(self, config) -> None:
        super().__init__(config)
        self.layernorm = LayerNorm(config.d_model)

    def forward(self, op, hidden, bias, positions):
        return self.layernorm(op, super().forward(op, hidden, bias, positions))


class TableTransformerDecoder(DetrDecoder):
    layer_class = TableTransformerDecoderLayer


class TableTransformerModel(DetrModel):
    encoder_class = TableTransformerEncoder
    decoder_class = TableTransformerDecoder


class TableTransformerForObjectDetection(DetrForObjectDetection):
    model_class = TableTransformerModel

    def sanitize(self, weights: dict) -> dict:
        """Learned position tables sit under the backbone here (transformers' older
        ``TableTransformerConvModel``): ``model.backbone.position_embedding.``."""
        old, new = "model.backbone.position_embedding.", "model.position_embedding."
        weights = super().sanitize(weights)
        return {new + k[len(old) :] if k.startswith(old) else k: v for k, v in weights.items()}


MODEL_TYPES = {"table-transformer": TableTransformerForObjectDetection}
