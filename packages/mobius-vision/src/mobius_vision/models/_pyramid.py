"""What the pyramid backbones (PVT, PVTv2, PoolFormer) share: stages of a patch-embedding
conv and blocks over a shrinking grid, configured by per-stage lists, classified from the last
stage's features.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._conv import ConvNetForImageClassification


@dataclass
class PyramidConfig(VisionConfig):
    """Per-stage lists; every field is read from its transformers namesake."""

    hidden_sizes: tuple[int, ...] = ()
    depths: tuple[int, ...] = ()
    patch_sizes: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    hidden_act: str = "gelu"

    #: Per-stage lists that must hold ints (transformers also takes pairs there).
    square_lists: ClassVar[tuple[str, ...]] = ("patch_sizes",)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        """Every field from its namesake, per-stage lists cut to ``num_encoder_blocks``."""
        n, t = hf_config.num_encoder_blocks, hf_config.model_type
        for name in cls.square_lists:
            if not all(isinstance(v, int) for v in getattr(hf_config, name)[:n]):
                raise ConfigError(f"{t}: only square (int) {name} are supported")
        if hf_config.hidden_sizes[-1] != hf_config.hidden_sizes[n - 1]:
            raise ConfigError(f"{t}: the head's hidden_sizes[-1] is not the last stage's")
        own = [f.name for f in fields(cls) if f.name not in VisionConfig.__dataclass_fields__]
        values = {f: getattr(hf_config, f) for f in own}
        values = {f: tuple(v[:n]) if isinstance(v, list | tuple) else v for f, v in values.items()}
        result = dict(super().hf_fields(hf_config), **values)
        cls(**result).check()
        return result

    def check(self) -> None:
        """Refuse what transformers cannot run; families add their own refusals."""

    def grids(self) -> list[tuple[int, int]]:
        """Each stage's token grid ``(h, w)``."""
        raise NotImplementedError


def conv_grids(image_size, kernels, strides, paddings) -> list[tuple[int, int]]:
    """The ``(h, w)`` after each of a chain of convs, from ``image_size``."""
    (h, w), grids = image_size, []
    for k, s, p in zip(kernels, strides, paddings, strict=True):
        h, w = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        grids.append((h, w))
    return grids


def tokens_to_grid(op, x, channels: int, h: int, w: int):
    """``[batch, h*w, C]`` -> ``[batch, C, h, w]``."""
    x = op.Transpose(x, perm=[0, 2, 1])
    return op.Reshape(x, op.Constant(value_ints=[0, channels, h, w]))


def grid_to_tokens(op, x):
    """``[batch, C, h, w]`` -> ``[batch, h*w, C]``."""
    return op.Transpose(op.Reshape(x, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])


class PyramidModel(nn.Module):
    """The backbone: an ``encoder`` of the family's ``encoder_class``."""

    encoder_class: type

    def __init__(self, config: PyramidConfig) -> None:
        super().__init__()
        self.encoder = self.encoder_class(config)

    def forward(self, op, pixel_values):
        return self.encoder(op, pixel_values)


class PyramidForImageClassification(ConvNetForImageClassification):
    """``last_hidden_state`` ``[batch, C, h, w]`` and, with the head, ``classifier`` on :meth:`pool`."""

    def make_classifier(self, config) -> nn.Module:
        return Linear(config.hidden_sizes[-1], config.num_labels, bias=True)

    def hidden_shape(self) -> list[int]:
        """``last_hidden_state`` of one image: the last stage's ``[C, h, w]``."""
        return [self.config.hidden_sizes[-1], *self.config.grids()[-1]]

    def output_shapes(self) -> dict[str, list]:
        return {
            "last_hidden_state": ["batch", *self.hidden_shape()],
            "logits": ["batch", self.config.num_labels],
        }

    def pool(self, op, hidden):
        """The classifier's input: the spatial mean ``[batch, C]``."""
        return op.ReduceMean(hidden, op.Constant(value_ints=[2, 3]), keepdims=0)

    def forward(self, op, pixel_values):
        hidden = self.base_model(op, pixel_values)
        if self.classifier is None:
            return {"last_hidden_state": hidden}
        return {"last_hidden_state": hidden, "logits": self.classifier(op, self.pool(op, hidden))}
