"""OWLv2: OWL-ViT (:mod:`mobius_vision.models.owlvit`) under ``owlv2.*``, with an objectness head.

``objectness_head`` (the box head's shape, one output) scores how likely each patch holds
an object at all, whatever the queries: the image graph adds ``objectness_logits``
[batch, patches]. OWLv2's image processor pads each image to a square before resizing
(the runner's concern, not the graph's).
"""

from __future__ import annotations

from mobius_vision.models.owlvit import BoxPredictionHead, OwlViTConfig, OwlViTForObjectDetection


class Owlv2ForObjectDetection(OwlViTForObjectDetection):
    """OWL-ViT's detector plus ``objectness_head``."""

    towers_name = "owlv2"

    def __init__(self, config: OwlViTConfig) -> None:
        super().__init__(config)
        self.objectness_head = BoxPredictionHead(config.vision.hidden_size, out_dim=1)

    def heads(self, op, feats, text_embeds) -> dict:
        outputs = super().heads(op, feats, text_embeds)
        objectness = op.Squeeze(self.objectness_head(op, feats), [-1])
        return dict(outputs, objectness_logits=objectness)

    def image_outputs(self) -> dict[str, list]:
        high, wide = self.config.patch_grid
        return dict(super().image_outputs(), objectness_logits=["batch", high * wide])


MODEL_TYPES = {"owlv2": Owlv2ForObjectDetection}
