"""Building blocks of the convolutional families: Conv2d, eval-mode BatchNorm, pooling.

Parameters are named as ``torch.nn`` names them (``weight``, ``bias``,
``running_mean``, ``running_var``), so checkpoints map by identity.
"""

from __future__ import annotations

import math

from onnxscript import nn

from mobius.components import BatchNorm, Conv2d, Linear, get_activation
from mobius.model import Model
from mobius_vision.models._common import prefix_bare_names

__all__ = ["BatchNorm2d", "Conv2d"]  # re-exported: the vision families import them from here

#: Checkpoint tensors no graph reads: BatchNorm's training-step counter.
BATCHNORM_COUNTERS = "*.num_batches_tracked"


def activation(name: str | None):
    """An HF ``hidden_act`` (plus the convnets' ``relu6``, ``hardswish``); ``None`` is the identity."""
    if name is None:
        return lambda op, x: x
    if name == "relu6":
        return lambda op, x: op.Clip(x, op.CastLike(0.0, x), op.CastLike(6.0, x))
    if name == "sigmoid":
        return lambda op, x: op.Sigmoid(x)
    if name == "hardswish":
        return lambda op, x: op.HardSwish(x)
    return get_activation(name)


def same_size(size: int, stride: int) -> int:
    """The spatial size after a "same"-padded (``k // 2`` or TF SAME) strided layer."""
    return math.ceil(size / stride)


#: ``torch.nn.BatchNorm2d`` in eval mode; the vision families import it by this name.
BatchNorm2d = BatchNorm


class ChannelsLayerNorm(nn.Module):
    """LayerNorm over the channels of ``[batch, channels, h, w]`` (ConvNeXt's ``channels_first``)."""

    def __init__(self, num_features: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter([num_features])
        self.bias = nn.Parameter([num_features])
        self.eps = eps

    def forward(self, op, x):
        x = op.Transpose(x, perm=[0, 2, 3, 1])
        x = op.LayerNormalization(x, self.weight, self.bias, axis=-1, epsilon=self.eps)
        return op.Transpose(x, perm=[0, 3, 1, 2])


class Identity(nn.Module):
    """A parameterless step (``nn.Flatten``, ``nn.Dropout`` or ``nn.Identity`` in a Sequential)."""

    def forward(self, op, x):
        return x


class Activation(nn.Module):
    """A parameterless activation step (``nn.ReLU()``, ``nn.Sigmoid()``) in a Sequential."""

    def __init__(self, name: str | None) -> None:
        super().__init__()
        self.act = activation(name)

    def forward(self, op, x):
        return self.act(op, x)


class Sequential(nn.ModuleList):
    """``torch.nn.Sequential``: children named ``0``, ``1``... applied in order.

    Its children carry qualified names (``layer.0``), so calling it opens no scope of its own.
    """

    def __call__(self, op, x):
        return self.forward(op, x)

    def forward(self, op, x):
        for module in self:
            x = module(op, x)
        return x


class FlattenLinear(Sequential):
    """``Sequential(Flatten(), Linear)``: the classifier over ``[batch, C, 1, 1]`` pooled features."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__([Identity(), Linear(in_features, out_features, bias=True)])

    def forward(self, op, x):
        return self[1](op, op.Flatten(x, axis=1))


def global_average_pool(op, x):
    """``AdaptiveAvgPool2d((1, 1))``: ``[batch, C, h, w]`` -> ``[batch, C, 1, 1]``."""
    return op.GlobalAveragePool(x)


class ConvNetForImageClassification(Model):
    """A backbone (``base_model_prefix``) returning ``(last_hidden_state, pooler_output)`` and,
    with ``--head image-classification``, ``classifier`` on the pooled features.

    Families set the class attributes and :meth:`make_classifier`, :meth:`output_shapes`.
    """

    config_class: type
    model_class: type
    base_model_prefix: str
    #: The heads beside the backbone: a bare backbone checkpoint lacks them and the prefix.
    head_prefixes: tuple[str, ...] = ("classifier",)
    task = "image-classification"

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        setattr(self, self.base_model_prefix, self.model_class(config))
        classify = config.head == "image-classification"
        self.classifier = self.make_classifier(config) if classify else None

    def make_classifier(self, config) -> nn.Module:
        return FlattenLinear(config.hidden_sizes[-1], config.num_labels)

    @property
    def base_model(self) -> nn.Module:
        return getattr(self, self.base_model_prefix)

    def output_shapes(self) -> dict[str, list]:
        raise NotImplementedError

    def forward(self, op, pixel_values):
        hidden, pooled = self.base_model(op, pixel_values)
        if self.classifier is not None:
            return {"last_hidden_state": hidden, "logits": self.classifier(op, pooled)}
        return {"last_hidden_state": hidden, "pooler_output": pooled}

    @property
    def ignored(self) -> tuple[str, ...]:
        """BatchNorm counters and, without the head, the classifier."""
        return (BATCHNORM_COUNTERS,) + (() if self.classifier is not None else ("classifier.*",))

    def sanitize(self, weights: dict) -> dict:
        """A bare backbone checkpoint gets the base prefix."""
        return prefix_bare_names(weights, f"{self.base_model_prefix}.", self.head_prefixes)
