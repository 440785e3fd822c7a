"""ConvNeXt: a patchify stem, stages of depthwise-7x7 / LayerNorm / MLP blocks with layer scale.

The module tree follows ``ConvNextFor*`` checkpoints (``convnext.embeddings.patch_embeddings``,
``convnext.encoder.stages.1.downsampling_layer.1``, ``...layers.0.pwconv1``, ``classifier``);
a bare ``ConvNextModel`` checkpoint gets the ``convnext.`` prefix. ``last_hidden_state``
is ``[batch, C, h, w]``; ``pooler_output`` is the LayerNorm of its spatial mean, ``[batch, C]``.

:class:`ConvNextBackbone` is transformers' ``ConvNextBackbone`` under a dense head (UperNet's
``backbone_config``): the stem's and stages' maps that ``out_features`` names, each through
its own channels-first LayerNorm (``hidden_states_norms.stage1``...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig, image_size_pair
from mobius_vision.models._backbone_config import (
    StageNorms,
    out_features,
    require_backbone_type,
    stage_names,
)
from mobius_vision.models._conv import (
    ChannelsLayerNorm,
    Conv2d,
    ConvNetForImageClassification,
    Sequential,
    activation,
)


@dataclass
class ConvNextConfig(VisionConfig):
    patch_size: int = 4
    hidden_sizes: tuple[int, ...] = (96, 192, 384, 768)
    depths: tuple[int, ...] = (3, 3, 9, 3)
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    layer_scale_init_value: float = 1e-6

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        patch_h, patch_w = image_size_pair(hf_config.patch_size)
        if patch_h != patch_w:
            raise ConfigError(f"{hf_config.model_type}: a non-square patch_size is not supported")
        stages = hf_config.num_stages
        return dict(
            super().hf_fields(hf_config),
            patch_size=patch_h,
            hidden_sizes=tuple(hf_config.hidden_sizes[:stages]),
            depths=tuple(hf_config.depths[:stages]),
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
            layer_scale_init_value=getattr(hf_config, "layer_scale_init_value", 0.0),
        )


class ConvNextEmbeddings(nn.Module):
    def __init__(self, config: ConvNextConfig) -> None:
        super().__init__()
        p, dim = config.patch_size, config.hidden_sizes[0]
        self.patch_embeddings = Conv2d(config.num_channels, dim, p, stride=p)
        self.layernorm = ChannelsLayerNorm(dim, eps=1e-6)

    def forward(self, op, pixel_values):
        return self.layernorm(op, self.patch_embeddings(op, pixel_values))


class ConvNextLayer(nn.Module):
    """``x + scale * pwconv2(act(pwconv1(norm(dwconv(x)))))``, the MLP channels-last."""

    def __init__(self, config: ConvNextConfig, dim: int) -> None:
        super().__init__()
        self.dwconv = Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.layernorm = LayerNorm(dim, eps=1e-6)
        self.pwconv1 = Linear(dim, 4 * dim, bias=True)
        self.act = activation(config.hidden_act)
        self.pwconv2 = Linear(4 * dim, dim, bias=True)
        scaled = config.layer_scale_init_value > 0
        self.layer_scale_parameter = nn.Parameter([dim]) if scaled else None

    def mlp(self, op, x):
        return self.pwconv2(op, self.act(op, self.pwconv1(op, x)))

    def forward(self, op, x):
        y = op.Transpose(self.dwconv(op, x), perm=[0, 2, 3, 1])  # [batch, h, w, C]
        y = self.mlp(op, self.layernorm(op, y))
        if self.layer_scale_parameter is not None:
            y = op.Mul(y, self.layer_scale_parameter)
        return op.Add(x, op.Transpose(y, perm=[0, 3, 1, 2]))


class ConvNextStage(nn.Module):
    layer_class = ConvNextLayer

    def __init__(self, config: ConvNextConfig, in_ch: int, out_ch: int, stride: int, depth: int):
        super().__init__()
        downsample = in_ch != out_ch or stride > 1
        self.downsampling_layer = (
            Sequential([ChannelsLayerNorm(in_ch, eps=1e-6), Conv2d(in_ch, out_ch, 2, stride=2)])
            if downsample
            else None
        )
        self.layers = Sequential([self.layer_class(config, out_ch) for _ in range(depth)])

    def forward(self, op, x):
        if self.downsampling_layer is not None:
            x = self.downsampling_layer(op, x)
        return self.layers(op, x)


class ConvNextEncoder(nn.Module):
    stage_class = ConvNextStage

    def __init__(self, config: ConvNextConfig) -> None:
        super().__init__()
        sizes = config.hidden_sizes
        self.stages = Sequential(
            [
                self.stage_class(config, sizes[max(i - 1, 0)], sizes[i], 2 if i else 1, depth)
                for i, depth in enumerate(config.depths)
            ]
        )

    def forward(self, op, x):
        return self.stages(op, x)


class ConvNextModel(nn.Module):
    encoder_class = ConvNextEncoder

    def __init__(self, config: ConvNextConfig) -> None:
        super().__init__()
        self.embeddings = ConvNextEmbeddings(config)
        self.encoder = self.encoder_class(config)
        self.layernorm = LayerNorm(config.hidden_sizes[-1], eps=config.layer_norm_eps)

    def forward(self, op, pixel_values):
        x = self.encoder(op, self.embeddings(op, pixel_values))
        pooled = op.ReduceMean(x, op.Constant(value_ints=[2, 3]), keepdims=0)
        return x, self.layernorm(op, pooled)


@dataclass
class ConvNextBackboneConfig(ConvNextConfig):
    """ConvNeXt as a backbone: the maps it returns, by transformers' stage names."""

    out_features: tuple[str, ...] = field(default=("stage4",))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # A variant's classifier (swinv2, convnextv2...) inherits this class's backbone_class.
        require_backbone_type(hf_config, "convnext")
        fields = super().hf_fields(hf_config)
        return dict(fields, out_features=out_features(hf_config, len(fields["depths"])))

    def feature_channels(self) -> list[int]:
        """The channels of each returned map."""
        names = stage_names(len(self.depths))
        channels = dict(zip(names, [self.hidden_sizes[0], *self.hidden_sizes], strict=True))
        return [channels[name] for name in self.out_features]

    def feature_grids(self) -> list[tuple[int, int]]:
        """The ``(h, w)`` of each returned map: the stem's stride, then half per stage."""
        h, w = (s // self.patch_size for s in self.image_size)
        grids = {"stem": (h, w), "stage1": (h, w)}
        for i in range(2, len(self.depths) + 1):
            h, w = h // 2, w // 2
            grids[f"stage{i}"] = (h, w)
        return [grids[name] for name in self.out_features]


class ConvNextStagesEncoder(ConvNextEncoder):
    """The encoder returning every stage's output, in order."""

    def forward(self, op, x) -> list:
        outputs = []
        for stage in self.stages:
            x = stage(op, x)
            outputs.append(x)
        return outputs


class ConvNextBackbone(nn.Module):
    """transformers' ``ConvNextBackbone``: ``feature_maps``, one per ``out_features`` entry."""

    config_class = ConvNextBackboneConfig
    #: Checkpoint tensors a backbone leaves unread.
    ignored: tuple[str, ...] = ()

    def __init__(self, config: ConvNextBackboneConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = ConvNextEmbeddings(config)
        self.encoder = ConvNextStagesEncoder(config)
        channels = zip(config.out_features, config.feature_channels(), strict=True)
        self.hidden_states_norms = StageNorms(
            {name: ChannelsLayerNorm(count, eps=1e-6) for name, count in channels}
        )

    def feature_channels(self) -> list[int]:
        return self.config.feature_channels()

    def forward(self, op, pixel_values) -> list:
        x = self.embeddings(op, pixel_values)
        stages = self.encoder(op, x)
        maps = dict(zip(stage_names(len(stages)), [x, *stages], strict=True))
        return self.hidden_states_norms(op, maps)


class ConvNextForImageClassification(ConvNetForImageClassification):
    config_class = ConvNextConfig
    model_class = ConvNextModel
    base_model_prefix = "convnext"
    #: What a dense head (UperNet) puts under itself (:mod:`._backbone`).
    backbone_class = ConvNextBackbone

    def make_classifier(self, config) -> nn.Module:
        return Linear(config.hidden_sizes[-1], config.num_labels, bias=True)

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        h, w = (s // c.patch_size for s in c.image_size)
        for _ in c.depths[1:]:
            h, w = h // 2, w // 2
        return {
            "last_hidden_state": ["batch", c.hidden_sizes[-1], h, w],
            "pooler_output": ["batch", c.hidden_sizes[-1]],
            "logits": ["batch", c.num_labels],
        }


MODEL_TYPES = {"convnext": ConvNextForImageClassification}
