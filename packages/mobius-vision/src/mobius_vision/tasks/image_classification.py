"""The vision-encoder contract: image features and, with a head, class logits.

Input: ``pixel_values`` float [batch, num_channels, height, width], at the
config's ``image_size`` (position tables are built for it).
Outputs, as the module declares them in ``output_shapes()``:

- ``last_hidden_state``: [batch, tokens, hidden] for transformers (ViT: the
  class token first), [batch, channels, height', width'] for convolutional nets;
- ``pooler_output`` [batch, hidden] where the checkpoint has a pooler (or the
  family pools by definition);
- ``logits`` [batch, num_labels] with ``--head image-classification``.

``--head auto`` (the default) builds the head the checkpoint has: its architecture
class says (``ViTForImageClassification``: image-classification; ``ViTModel``: none).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import onnx_ir as ir

from mobius.errors import ConfigError
from mobius.tasks import IR_VERSION, ModelTask, set_output
from mobius_vision.config import VISION_HEADS, VisionConfig

# Architecture classes whose checkpoints hold a classifier (``--head auto``).
_CLASSIFIERS = ("ForImageClassification", "ForImageClassificationWithTeacher")


def vision_head(hf_config: Any, head: str = "auto") -> str:
    """The head of a vision encoder build: ``--head auto`` reads the architecture class."""
    if head not in ("auto", *VISION_HEADS):
        raise ConfigError(
            f"head {head!r} does not apply to vision encoders; choose auto or "
            f"{', '.join(VISION_HEADS)}"
        )
    if head == "auto":
        architectures = getattr(hf_config, "architectures", None) or []
        classifies = any(a.endswith(_CLASSIFIERS) for a in architectures)
        head = "image-classification" if classifies else "none"
    return head


class ImageClassificationTask(ModelTask):
    """One graph; the module takes ``pixel_values`` and returns a dict of its outputs."""

    name = "image-classification"

    def configure(self, config, options, source):
        """The config with ``--head`` applied (see :func:`vision_head`).

        ``--pooling`` and ``--normalize`` are refused: they shape an encoder's
        sentence embedding.
        """
        if options.pooling is not None or options.normalize is not None:
            raise ConfigError(
                f"--head, --pooling and --normalize apply to encoder models; "
                f"{source.entry.key} is a {self.name} model"
            )
        head = vision_head(source.hf_config, options.head)
        if isinstance(config, VisionConfig):
            config = dataclasses.replace(config, head=head)
        return config

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("image_classification")
        height, width = config.image_size
        pixel_values = builder.input(
            "pixel_values", dtype, ["batch", config.num_channels, height, width]
        )
        outputs = module(builder.op, pixel_values)
        shapes = module.output_shapes()
        for name, value in outputs.items():
            set_output(builder, value, name, dtype, shapes[name])
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
