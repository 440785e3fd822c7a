"""DeiT: ViT with a second prefix token, the distillation token, after the class token.

The encoder is ViT's (same checkpoint keys under ``deit.``). ``DeiTForImageClassification``
classifies the class token; ``DeiTForImageClassificationWithTeacher`` averages the
``cls_classifier`` logits of the class token and the ``distillation_classifier``
logits of the distillation token. The bare model's pooler is ``dense`` (to
``pooler_output_size``) and ``pooler_act`` on the class token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius_vision.models.vit import (
    ViTConfig,
    ViTEmbeddings,
    ViTForImageClassification,
    ViTModel,
    ViTPooler,
)

TEACHER = "DeiTForImageClassificationWithTeacher"


@dataclass
class DeiTConfig(ViTConfig):
    pooler_output_size: int = 768
    teacher: bool = False  # the checkpoint has the two ``...WithTeacher`` classifiers

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        size = getattr(hf_config, "pooler_output_size", None) or hf_config.hidden_size
        return dict(
            fields, pooler_output_size=int(size), teacher=TEACHER in fields["architectures"]
        )


class DeiTEmbeddings(ViTEmbeddings):
    """``[cls, distillation, patches] + position_embeddings``."""

    extra_tokens = 2

    def __init__(self, config: DeiTConfig) -> None:
        super().__init__(config)
        self.distillation_token = nn.Parameter([1, 1, config.hidden_size])

    def prefix_tokens(self) -> list:
        return [self.cls_token, self.distillation_token]


class DeiTPooler(ViTPooler):
    def __init__(self, config: DeiTConfig) -> None:
        super().__init__(config)
        self.dense = Linear(config.hidden_size, config.pooler_output_size, bias=True)


class DeiTModel(ViTModel):
    embeddings_class = DeiTEmbeddings

    def __init__(self, config: DeiTConfig) -> None:
        super().__init__(config)
        if self.pooler is not None:
            self.pooler = DeiTPooler(config)


class DeiTForImageClassification(ViTForImageClassification):
    """The class-token classifier, or with a ``...WithTeacher`` checkpoint the mean of both heads."""

    config_class = DeiTConfig
    base_model_prefix = "deit"
    model_class = DeiTModel
    head_prefixes = ("classifier.", "cls_classifier.", "distillation_classifier.")

    def __init__(self, config: DeiTConfig) -> None:
        super().__init__(config)
        self.cls_classifier = self.distillation_classifier = None
        if config.teacher and self.classifier is not None:
            self.classifier = None
            d, n = config.hidden_size, config.num_labels
            self.cls_classifier = Linear(d, n, True)
            self.distillation_classifier = Linear(d, n, True)

    def output_shapes(self) -> dict[str, list]:
        shapes = super().output_shapes()
        return dict(shapes, pooler_output=["batch", self.config.pooler_output_size])

    def classify(self, op, hidden):
        if self.cls_classifier is None:
            return super().classify(op, hidden)
        cls = op.Gather(hidden, op.Constant(value_int=0), axis=1)
        distillation = op.Gather(hidden, op.Constant(value_int=1), axis=1)
        both = op.Add(self.cls_classifier(op, cls), self.distillation_classifier(op, distillation))
        return op.Mul(both, op.Constant(value_float=0.5))

    def forward(self, op, pixel_values):
        hidden, pooled = self.base_model(op, pixel_values)
        outputs = {"last_hidden_state": hidden}
        if pooled is not None:
            outputs["pooler_output"] = pooled
        if self.config.head == "image-classification":
            outputs["logits"] = self.classify(op, hidden)
        return outputs

    @property
    def ignored(self) -> tuple[str, ...]:
        ignored = list(super().ignored)
        if self.config.head != "image-classification":
            ignored += ["cls_classifier.*", "distillation_classifier.*"]
        return tuple(ignored)


MODEL_TYPES = {"deit": DeiTForImageClassification}
