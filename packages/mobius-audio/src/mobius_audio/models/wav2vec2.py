"""Wav2Vec2: a strided conv feature encoder, a projection, a conv position embedding, a transformer.

The module tree follows ``Wav2Vec2For*`` checkpoints (``wav2vec2.feature_extractor.
conv_layers.0.conv``..., ``lm_head``, ``projector``/``classifier``, the x-vector's
``tdnn``/``feature_extractor``); a bare
``Wav2Vec2Model`` checkpoint gets the ``wav2vec2.`` prefix added. Padded samples
are masked frame by frame: the sample mask's lengths go through every conv's
``(length - kernel) // stride + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    LayerNorm,
    Linear,
    bidirectional_attention,
    get_activation,
    padding_bias,
)
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.heads import head_of
from mobius_audio.models._xvector import TDNNLayer, statistics_pooling

#: Every head of the family; a type transformers gives fewer heads narrows ``heads``.
ALL_HEADS = ("none", "ctc", "sequence-classification", "audio-frame-classification", "xvector")
UTTERANCE_HEADS = ALL_HEADS[:3]  # HuBERT, UniSpeech, SEW: no frame or x-vector head
#: The x-vector's embedding Linear: top-level keys, not the base model's ``feature_extractor.*``.
XVECTOR_EMBEDDING = ("feature_extractor.weight", "feature_extractor.bias")


@dataclass
class Wav2Vec2Config:
    model_type: str
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-5
    conv_dim: tuple[int, ...] = (512,) * 7
    conv_kernel: tuple[int, ...] = (10, 3, 3, 3, 3, 2, 2)
    conv_stride: tuple[int, ...] = (5, 2, 2, 2, 2, 2, 2)
    conv_bias: bool = False
    feat_extract_norm: str = "group"  # group: GroupNorm on the first conv; layer: LayerNorm on each
    feat_extract_activation: str = "gelu"
    num_conv_pos_embeddings: int = 128
    num_conv_pos_embedding_groups: int = 16
    do_stable_layer_norm: bool = False  # pre-LN layers and a final norm
    feat_proj_layer_norm: bool = True  # HuBERT may project the conv features unnormalised
    vocab_size: int = 32
    num_labels: int = 2
    classifier_proj_size: int = 256
    use_weighted_layer_sum: bool = False
    tdnn_dim: tuple[int, ...] = (512, 512, 512, 512, 1500)  # the x-vector head's TDNN layers
    tdnn_kernel: tuple[int, ...] = (5, 3, 3, 1, 1)
    tdnn_dilation: tuple[int, ...] = (1, 2, 3, 1, 1)
    xvector_output_dim: int = 512
    head: str = "none"  # one of ALL_HEADS

    @classmethod
    def from_hf(cls, hf_config: Any) -> Wav2Vec2Config:
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "add_adapter", False):
            raise ConfigError(f"{hf_config.model_type} adapters (add_adapter) are not built")
        return dict(
            model_type=hf_config.model_type,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=hf_config.num_attention_heads,
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
            conv_dim=tuple(hf_config.conv_dim),
            conv_kernel=tuple(hf_config.conv_kernel),
            conv_stride=tuple(hf_config.conv_stride),
            conv_bias=bool(hf_config.conv_bias),
            feat_extract_norm=getattr(hf_config, "feat_extract_norm", "layer"),
            feat_extract_activation=hf_config.feat_extract_activation,
            num_conv_pos_embeddings=hf_config.num_conv_pos_embeddings,
            num_conv_pos_embedding_groups=hf_config.num_conv_pos_embedding_groups,
            do_stable_layer_norm=bool(getattr(hf_config, "do_stable_layer_norm", False)),
            feat_proj_layer_norm=bool(getattr(hf_config, "feat_proj_layer_norm", True)),
            vocab_size=hf_config.vocab_size,
            num_labels=int(getattr(hf_config, "num_labels", 2) or 2),
            classifier_proj_size=getattr(hf_config, "classifier_proj_size", 256),
            use_weighted_layer_sum=bool(getattr(hf_config, "use_weighted_layer_sum", False)),
            **cls.xvector_fields(hf_config),
            head=cls.head_of(hf_config),
        )

    @staticmethod
    def xvector_fields(hf_config: Any) -> dict[str, Any]:
        """The x-vector head's TDNN layers, checked: one kernel and dilation per layer."""
        fields = {
            name: getattr(hf_config, name, default)
            for name, default in (
                ("tdnn_dim", Wav2Vec2Config.tdnn_dim),
                ("tdnn_kernel", Wav2Vec2Config.tdnn_kernel),
                ("tdnn_dilation", Wav2Vec2Config.tdnn_dilation),
            )
        }
        lists = all(isinstance(v, (list, tuple)) and v for v in fields.values())
        values = [x for v in fields.values() for x in v] if lists else []
        output_dim = getattr(hf_config, "xvector_output_dim", Wav2Vec2Config.xvector_output_dim)
        if (
            not lists
            or len({len(v) for v in fields.values()}) != 1
            or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in values)
            or not isinstance(output_dim, int)
            or output_dim < 1
        ):
            raise ConfigError(
                "tdnn_dim, tdnn_kernel, tdnn_dilation must list positive ints, one per layer, "
                f"and xvector_output_dim be one: {fields}, {output_dim!r}"
            )
        return dict({k: tuple(v) for k, v in fields.items()}, xvector_output_dim=output_dim)

    @staticmethod
    def head_of(hf_config: Any) -> str:
        """The head the config's ``architectures`` name (:data:`ALL_HEADS`)."""
        return head_of(getattr(hf_config, "architectures", None))


class Conv1d(nn.Module):
    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        stride: int = 1,
        bias: bool = True,
        pad: int = 0,
        groups: int = 1,
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter([cout, cin // groups, kernel])
        self.bias = nn.Parameter([cout]) if bias else None
        self.kernel, self.stride, self.pad, self.groups = kernel, stride, pad, groups

    def forward(self, op, x):  # [batch, cin, time] -> [batch, cout, time']
        return op.Conv(
            x,
            self.weight,
            self.bias,
            kernel_shape=[self.kernel],
            strides=[self.stride],
            pads=[self.pad, self.pad],
            group=self.groups,
        )


class ChannelNorm(nn.Module):
    """``GroupNorm(channels, channels)``: each channel normalised over time (InstanceNormalization)."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels])
        self.bias = nn.Parameter([channels])
        self.eps = eps

    def forward(self, op, x):
        return op.InstanceNormalization(x, self.weight, self.bias, epsilon=self.eps)


class TimeLayerNorm(LayerNorm):
    """LayerNorm over the channels of a ``[batch, channels, time]`` tensor."""

    def forward(self, op, x):
        x = super().forward(op, op.Transpose(x, perm=[0, 2, 1]))
        return op.Transpose(x, perm=[0, 2, 1])


class Wav2Vec2ConvLayer(nn.Module):
    def __init__(self, config: Wav2Vec2Config, i: int) -> None:
        super().__init__()
        cin = config.conv_dim[i - 1] if i else 1
        cout = config.conv_dim[i]
        self.conv = Conv1d(
            cin, cout, config.conv_kernel[i], config.conv_stride[i], config.conv_bias
        )
        self.layer_norm = None
        if config.feat_extract_norm == "layer":
            self.layer_norm = TimeLayerNorm(cout, 1e-5)
        elif i == 0:
            self.layer_norm = ChannelNorm(cout)
        self.act = get_activation(config.feat_extract_activation)

    def forward(self, op, x):
        x = self.conv(op, x)
        if self.layer_norm is not None:
            x = self.layer_norm(op, x)
        return self.act(op, x)


class Wav2Vec2FeatureEncoder(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        n = len(config.conv_dim)
        self.conv_layers = nn.ModuleList([Wav2Vec2ConvLayer(config, i) for i in range(n)])

    def forward(self, op, input_values):
        x = op.Unsqueeze(input_values, [1])  # [batch, 1, samples]
        for layer in self.conv_layers:
            x = layer(op, x)
        return op.Transpose(x, perm=[0, 2, 1])  # [batch, frames, conv_dim[-1]]


class Wav2Vec2FeatureProjection(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.layer_norm = None
        if config.feat_proj_layer_norm:
            self.layer_norm = LayerNorm(config.conv_dim[-1], config.layer_norm_eps)
        self.projection = Linear(config.conv_dim[-1], config.hidden_size, bias=True)

    def forward(self, op, x):
        if self.layer_norm is not None:
            x = self.layer_norm(op, x)
        return self.projection(op, x)


class WeightNormConv(nn.Module):
    """A Conv1d under ``weight_norm(dim=2)``: ``weight = g * v / ||v||``, the norm per kernel tap."""

    def __init__(self, d: int, kernel: int, groups: int, stride: int = 1) -> None:
        super().__init__()
        self.weight_g = nn.Parameter([1, 1, kernel])
        self.weight_v = nn.Parameter([d, d // groups, kernel])
        self.bias = nn.Parameter([d])
        self.kernel, self.pad, self.groups, self.stride = kernel, kernel // 2, groups, stride

    def forward(self, op, x):
        v = self.weight_v
        weight = op.Mul(self.weight_g, op.Div(v, op.ReduceL2(v, [0, 1], keepdims=1)))
        return op.Conv(
            x,
            weight,
            self.bias,
            kernel_shape=[self.kernel],
            strides=[self.stride],
            pads=[self.pad, self.pad],
            group=self.groups,
        )


class Wav2Vec2PositionalConvEmbedding(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        k = config.num_conv_pos_embeddings
        self.conv = WeightNormConv(config.hidden_size, k, config.num_conv_pos_embedding_groups)
        self.trim = k % 2 == 0  # an even kernel with k // 2 padding gives one frame too many
        self.act = get_activation(config.feat_extract_activation)

    def forward(self, op, x):  # [batch, frames, hidden]
        y = self.conv(op, op.Transpose(x, perm=[0, 2, 1]))
        if self.trim:
            y = op.Slice(y, [0], [-1], [2])
        return op.Transpose(self.act(op, y), perm=[0, 2, 1])


class Wav2Vec2Attention(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        d = config.hidden_size
        self.q_proj, self.k_proj = Linear(d, d, True), Linear(d, d, True)
        self.v_proj, self.out_proj = Linear(d, d, True), Linear(d, d, True)
        self.num_heads = config.num_attention_heads
        self.scale = (d // self.num_heads) ** -0.5

    def forward(self, op, x, bias):
        q, k, v = self.q_proj(op, x), self.k_proj(op, x), self.v_proj(op, x)
        return self.out_proj(
            op, bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)
        )


class Wav2Vec2FeedForward(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.intermediate_dense = Linear(config.hidden_size, config.intermediate_size, True)
        self.output_dense = Linear(config.intermediate_size, config.hidden_size, True)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.output_dense(op, self.act(op, self.intermediate_dense(op, x)))


class Wav2Vec2EncoderLayer(nn.Module):
    """Post-LN (``do_stable_layer_norm=False``) or pre-LN layer."""

    attention_class = Wav2Vec2Attention

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.attention = self.attention_class(config)
        self.layer_norm = LayerNorm(d, eps)
        self.feed_forward = Wav2Vec2FeedForward(config)
        self.final_layer_norm = LayerNorm(d, eps)
        self.pre_norm = config.do_stable_layer_norm

    def forward(self, op, x, bias):
        if self.pre_norm:
            x = op.Add(x, self.attention(op, self.layer_norm(op, x), bias))
            return op.Add(x, self.feed_forward(op, self.final_layer_norm(op, x)))
        x = self.layer_norm(op, op.Add(x, self.attention(op, x, bias)))
        return self.final_layer_norm(op, op.Add(x, self.feed_forward(op, x)))


class Wav2Vec2Encoder(nn.Module):
    layer_class = Wav2Vec2EncoderLayer
    pos_conv_class = Wav2Vec2PositionalConvEmbedding

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.pos_conv_embed = self.pos_conv_class(config)
        self.layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.layers = nn.ModuleList(
            [self.layer_class(config) for _ in range(config.num_hidden_layers)]
        )
        self.pre_norm = config.do_stable_layer_norm

    def attention_bias(self, op, x, frame_mask):
        """What every layer's attention gets as ``bias``: here the padding bias ``[batch, 1, frames, frames]``."""
        return padding_bias(op, frame_mask, x.dtype or ir.DataType.FLOAT)

    def forward(self, op, x, frame_mask):
        """``x`` [batch, frames, hidden], ``frame_mask`` bool [batch, frames]; the output and the layer states."""
        zero = op.Constant(value=ir.tensor(np.array(0, dtype=np.float32)))
        x = op.Where(op.Unsqueeze(frame_mask, [2]), x, op.CastLike(zero, x))  # padded frames 0
        bias = self.attention_bias(op, x, frame_mask)
        x = op.Add(x, self.pos_conv_embed(op, x))
        if not self.pre_norm:
            x = self.layer_norm(op, x)
        states = [x]  # as transformers records them: each layer's output, before a final norm
        for layer in self.layers:
            x = layer(op, x, bias)
            states.append(x)
        if self.pre_norm:
            x = self.layer_norm(op, x)
        return x, states


def frame_mask(op, attention_mask, config, frames):
    """bool [batch, frames]: the frames within each row's real samples, lengths through every conv."""
    lengths = op.ReduceSum(attention_mask, [1], keepdims=1)  # [batch, 1]
    for kernel, stride in zip(config.conv_kernel, config.conv_stride, strict=True):
        lengths = op.Add(op.Div(op.Sub(lengths, kernel), stride), 1)  # floor: lengths >= kernel
    positions = op.Range(
        op.Constant(value_int=0), op.Squeeze(frames, [0]), op.Constant(value_int=1)
    )
    return op.Less(op.Unsqueeze(positions, [0]), lengths)


class Wav2Vec2Model(nn.Module):
    encoder_class = Wav2Vec2Encoder

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.config = config
        self.feature_extractor = Wav2Vec2FeatureEncoder(config)
        self.feature_projection = Wav2Vec2FeatureProjection(config)
        self.encoder = self.encoder_class(config)

    def forward(self, op, input_values, attention_mask):
        features = self.feature_extractor(op, input_values)  # [batch, frames, conv_dim[-1]]
        mask = frame_mask(op, attention_mask, self.config, op.Shape(features, start=1, end=2))
        hidden, states = self.encoder(op, self.feature_projection(op, features), mask)
        return hidden, states, mask


class Wav2Vec2ForCTC(Model):
    """The encoder and the checkpoint's head (:data:`ALL_HEADS`): ``lm_head`` (CTC),
    ``projector``+``classifier`` (utterance), ``classifier`` per frame, or the x-vector's
    ``projector``, ``tdnn``, ``feature_extractor`` (the embedding) and ``classifier``."""

    config_class = Wav2Vec2Config
    task = "audio-feature-extraction"
    base_model_prefix = "wav2vec2"
    model_class = Wav2Vec2Model
    heads = ALL_HEADS  # what transformers has for the type

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        if config.head not in self.heads:
            raise ConfigError(
                f"{config.model_type} has no {config.head} head in transformers; "
                f"built: {', '.join(self.heads)}"
            )
        self.config = config
        setattr(self, self.base_model_prefix, self.model_class(config))
        d, head = config.hidden_size, config.head
        self.lm_head = Linear(d, config.vocab_size, True) if head == "ctc" else None
        self.projector = self.classifier = self.layer_weights = None
        self.tdnn = self.feature_extractor = None
        if head not in ("none", "ctc") and config.use_weighted_layer_sum:
            self.layer_weights = nn.Parameter([config.num_hidden_layers + 1])
        if head == "sequence-classification":
            self.projector = Linear(d, config.classifier_proj_size, True)
            self.classifier = Linear(config.classifier_proj_size, config.num_labels, True)
        elif head == "audio-frame-classification":
            self.classifier = Linear(d, config.num_labels, True)
        elif head == "xvector":
            dims, out = config.tdnn_dim, config.xvector_output_dim
            self.projector = Linear(d, dims[0], True)
            self.tdnn = nn.ModuleList(
                [
                    TDNNLayer(dims[max(i - 1, 0)], dims[i], kernel, dilation)
                    for i, (kernel, dilation) in enumerate(
                        zip(config.tdnn_kernel, config.tdnn_dilation, strict=True)
                    )
                ]
            )
            self.feature_extractor = Linear(2 * dims[-1], out, True)
            self.classifier = Linear(out, out, True)

    @property
    def base_model(self) -> Wav2Vec2Model:
        return getattr(self, self.base_model_prefix)

    def output_shapes(self) -> dict[str, list]:
        config = self.config
        shapes = {"last_hidden_state": ["batch", "frames", config.hidden_size]}
        if config.head == "ctc":
            shapes["logits"] = ["batch", "frames", config.vocab_size]
        elif config.head == "sequence-classification":
            shapes["logits"] = ["batch", config.num_labels]
        elif config.head == "audio-frame-classification":
            shapes["logits"] = ["batch", "frames", config.num_labels]
        elif config.head == "xvector":
            shapes["logits"] = ["batch", config.xvector_output_dim]
            shapes["embeddings"] = ["batch", config.xvector_output_dim]
        return shapes

    def head_input(self, op, hidden, states):
        """The final states, or the softmax-weighted sum of every layer's (``use_weighted_layer_sum``)."""
        if self.layer_weights is None:
            return hidden
        stacked = op.Concat(*[op.Unsqueeze(s, [0]) for s in states], axis=0)  # [L+1, b, f, d]
        weights = op.Reshape(op.Softmax(self.layer_weights, axis=0), [-1, 1, 1, 1])
        return op.ReduceSum(op.Mul(stacked, weights), [0], keepdims=0)

    def classify(self, op, hidden, states, mask):
        """``[batch, num_labels]``: the projected head input averaged over the real frames."""
        x = self.projector(op, self.head_input(op, hidden, states))
        real = op.CastLike(op.Unsqueeze(mask, [2]), x)  # [batch, frames, 1]
        pooled = op.Div(
            op.ReduceSum(op.Mul(x, real), [1], keepdims=0), op.ReduceSum(real, [1], keepdims=0)
        )
        return self.classifier(op, pooled)

    def xvector(self, op, hidden, states, mask) -> dict:
        """``embeddings`` and ``logits`` ``[batch, xvector_output_dim]`` of the x-vector head."""
        x = self.projector(op, self.head_input(op, hidden, states))
        for layer in self.tdnn:
            x = layer(op, x)
        pooled = statistics_pooling(op, x, mask, self.config.tdnn_kernel)
        embeddings = self.feature_extractor(op, pooled)
        return {"logits": self.classifier(op, embeddings), "embeddings": embeddings}

    def forward(self, op, input_values, attention_mask):
        hidden, states, mask = self.base_model(op, input_values, attention_mask)
        outputs = {"last_hidden_state": hidden}
        head = self.config.head
        if head == "ctc":
            outputs["logits"] = self.lm_head(op, hidden)
        elif head == "sequence-classification":
            outputs["logits"] = self.classify(op, hidden, states, mask)
        elif head == "audio-frame-classification":
            outputs["logits"] = self.classifier(op, self.head_input(op, hidden, states))
        elif head == "xvector":
            outputs.update(self.xvector(op, hidden, states, mask))
        return outputs

    @property
    def ignored(self) -> tuple[str, ...]:
        """The training-only mask embedding and AM-softmax weight, and the heads not built."""
        ignored = [f"{self.base_model_prefix}.masked_spec_embed", "objective.*"]
        if self.lm_head is None:
            ignored.append("lm_head.*")
        if self.projector is None:
            ignored.append("projector.*")
        if self.classifier is None:
            ignored.append("classifier.*")
        if self.layer_weights is None:
            ignored.append("layer_weights")
        if self.tdnn is None:
            ignored += ["tdnn.*", *XVECTOR_EMBEDDING]
        return tuple(ignored)

    def sanitize(self, weights: dict) -> dict:
        """The ``wav2vec2.`` prefix on a bare checkpoint; weight-norm tensors under both spellings."""
        prefix = f"{self.base_model_prefix}."
        heads = ("lm_head", "projector", "classifier", "layer_weights", "tdnn.", "objective.")
        out = {}
        for key, value in weights.items():
            # a bare checkpoint's feature_extractor.conv_layers.* is the base model's
            head = key.startswith((prefix, *heads)) or key in XVECTOR_EMBEDDING
            key = key if head else prefix + key
            key = key.replace("parametrizations.weight.original0", "weight_g")
            out[key.replace("parametrizations.weight.original1", "weight_v")] = value
        return out


MODEL_TYPES = {"wav2vec2": Wav2Vec2ForCTC}
