"""AST (Audio Spectrogram Transformer): a ViT over patches of the fbank spectrogram.

The input is ``ASTFeatureExtractor``'s ``input_values [batch, max_length, num_mel_bins]``
(Kaldi fbank frames, padded or cut to ``max_length``; :mod:`mobius_audio.ast_features`).
The spectrogram is read frequency-major, cut into ``patch_size`` squares by a conv with
``frequency_stride`` / ``time_stride``, and a CLS and a distillation token go before the
patches; the pre-LN layers are ViT's, and the pooled output is the mean of the two
tokens' final states, which ``classifier`` (LayerNorm + Linear) scores. There is no
padding mask: the window has a fixed length, as the extractor makes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention, get_activation
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.heads import head_of

HEADS = ("none", "sequence-classification")


@dataclass
class ASTConfig:
    model_type: str
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    patch_size: int = 16
    qkv_bias: bool = True
    frequency_stride: int = 10
    time_stride: int = 10
    max_length: int = 1024
    num_mel_bins: int = 128
    num_labels: int = 2
    head: str = "none"

    @property
    def num_patches(self) -> tuple[int, int]:
        """(frequency, time) patch counts, as transformers' ``get_shape``."""
        frequency = (self.num_mel_bins - self.patch_size) // self.frequency_stride + 1
        time = (self.max_length - self.patch_size) // self.time_stride + 1
        return frequency, time

    @classmethod
    def from_hf(cls, hf_config: Any) -> ASTConfig:
        patch = hf_config.patch_size
        if not isinstance(patch, int):  # transformers' Conv2d takes it as one square side
            raise ConfigError(f"audio-spectrogram-transformer patch_size {patch!r} must be an int")
        head = head_of(getattr(hf_config, "architectures", None))
        if head not in HEADS:
            raise ConfigError(f"audio-spectrogram-transformer has no {head} head in transformers")
        hidden, heads = hf_config.hidden_size, hf_config.num_attention_heads
        if hidden % heads or getattr(hf_config, "head_dim", hidden // heads) != hidden // heads:
            raise ConfigError(f"hidden_size {hidden} must split into {heads} heads evenly")
        config = cls(
            model_type=hf_config.model_type,
            hidden_size=hidden,
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=heads,
            intermediate_size=hf_config.intermediate_size,
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
            patch_size=patch,
            qkv_bias=bool(hf_config.qkv_bias),
            frequency_stride=hf_config.frequency_stride,
            time_stride=hf_config.time_stride,
            max_length=hf_config.max_length,
            num_mel_bins=hf_config.num_mel_bins,
            num_labels=int(getattr(hf_config, "num_labels", 2) or 2),
            head=head,
        )
        if min(config.num_patches) < 1:
            raise ConfigError(
                f"a {config.max_length} x {config.num_mel_bins} spectrogram has no "
                f"{patch} x {patch} patch"
            )
        return config


class ASTPatchEmbeddings(nn.Module):
    def __init__(self, config: ASTConfig) -> None:
        super().__init__()
        self.projection = _Conv2d(config)

    def forward(self, op, x):  # [batch, time, mels] -> [batch, patches, hidden]
        x = op.Transpose(op.Unsqueeze(x, [1]), perm=[0, 1, 3, 2])  # [batch, 1, mels, time]
        x = self.projection(op, x)  # [batch, hidden, frequency patches, time patches]
        return op.Transpose(op.Reshape(x, [0, 0, -1]), perm=[0, 2, 1])  # frequency-major


class _Conv2d(nn.Module):
    def __init__(self, config: ASTConfig) -> None:
        super().__init__()
        p = config.patch_size
        self.weight = nn.Parameter([config.hidden_size, 1, p, p])
        self.bias = nn.Parameter([config.hidden_size])
        self.kernel = [p, p]
        self.strides = [config.frequency_stride, config.time_stride]

    def forward(self, op, x):
        return op.Conv(x, self.weight, self.bias, kernel_shape=self.kernel, strides=self.strides)


class ASTEmbeddings(nn.Module):
    def __init__(self, config: ASTConfig) -> None:
        super().__init__()
        d = config.hidden_size
        frequency, time = config.num_patches
        self.cls_token = nn.Parameter([1, 1, d])
        self.distillation_token = nn.Parameter([1, 1, d])
        self.patch_embeddings = ASTPatchEmbeddings(config)
        self.position_embeddings = nn.Parameter([1, frequency * time + 2, d])
        self.hidden_size = d

    def forward(self, op, input_values):
        patches = self.patch_embeddings(op, input_values)
        batch = op.Shape(input_values, start=0, end=1)
        one_token = op.Concat(batch, op.Constant(value_ints=[1, self.hidden_size]), axis=0)
        tokens = [op.Expand(t, one_token) for t in (self.cls_token, self.distillation_token)]
        return op.Add(op.Concat(*tokens, patches, axis=1), self.position_embeddings)


class ASTSelfAttention(nn.Module):
    def __init__(self, config: ASTConfig) -> None:
        super().__init__()
        d, bias = config.hidden_size, config.qkv_bias
        self.query, self.key, self.value = (
            Linear(d, d, bias),
            Linear(d, d, bias),
            Linear(d, d, bias),
        )
        self.num_heads = config.num_attention_heads
        self.scale = (d // self.num_heads) ** -0.5

    def forward(self, op, x):
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        return bidirectional_attention(op, q, k, v, None, self.num_heads, self.scale)


class ASTAttention(nn.Module):
    def __init__(self, config: ASTConfig) -> None:
        super().__init__()
        self.attention = ASTSelfAttention(config)
        self.output = _Dense(config.hidden_size, config.hidden_size)

    def forward(self, op, x):
        return self.output(op, self.attention(op, x))


class _Dense(nn.Module):
    """``dense``, optionally followed by an activation (``intermediate``)."""

    def __init__(self, cin: int, cout: int, act: str | None = None) -> None:
        super().__init__()
        self.dense = Linear(cin, cout, True)
        self.act = get_activation(act) if act else None

    def forward(self, op, x):
        x = self.dense(op, x)
        return self.act(op, x) if self.act is not None else x


class ASTLayer(nn.Module):
    """Pre-LN: ``x + attention(norm(x))``, then ``x + output(intermediate(norm(x)))``."""

    def __init__(self, config: ASTConfig) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.attention = ASTAttention(config)
        self.layernorm_before = LayerNorm(d, eps)
        self.layernorm_after = LayerNorm(d, eps)
        self.intermediate = _Dense(d, config.intermediate_size, config.hidden_act)
        self.output = _Dense(config.intermediate_size, d)

    def forward(self, op, x):
        x = op.Add(x, self.attention(op, self.layernorm_before(op, x)))
        return op.Add(x, self.output(op, self.intermediate(op, self.layernorm_after(op, x))))


class ASTEncoder(nn.Module):
    def __init__(self, config: ASTConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList([ASTLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, op, x):
        for layer in self.layer:
            x = layer(op, x)
        return x


class ASTModel(nn.Module):
    """Named as checkpoints store it (``encoder.layer.{i}.attention.attention.query``...)."""

    def __init__(self, config: ASTConfig) -> None:
        super().__init__()
        self.embeddings = ASTEmbeddings(config)
        self.encoder = ASTEncoder(config)
        self.layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, input_values):
        return self.layernorm(op, self.encoder(op, self.embeddings(op, input_values)))


class ASTMLPHead(nn.Module):
    def __init__(self, config: ASTConfig) -> None:
        super().__init__()
        self.layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.dense = Linear(config.hidden_size, config.num_labels, True)

    def forward(self, op, pooled):
        return self.dense(op, self.layernorm(op, pooled))


class ASTForAudioClassification(Model):
    """``input_values`` -> ``last_hidden_state`` and, with the classifier, ``logits``."""

    config_class = ASTConfig
    task = "audio-feature-extraction"
    base_model_prefix = "audio_spectrogram_transformer"

    def __init__(self, config: ASTConfig) -> None:
        super().__init__()
        self.config = config
        self.audio_spectrogram_transformer = ASTModel(config)
        self.classifier = None
        if config.head == "sequence-classification":
            self.classifier = ASTMLPHead(config)

    @property
    def ignored(self) -> tuple[str, ...]:
        return () if self.classifier is not None else ("classifier.*",)

    def input_shapes(self) -> dict[str, list]:
        """One input, no mask: the extractor's fixed window of fbank frames."""
        c = self.config
        return {"input_values": ["batch", c.max_length, c.num_mel_bins]}

    def output_shapes(self) -> dict[str, list]:
        frequency, time = self.config.num_patches
        shapes = {"last_hidden_state": ["batch", frequency * time + 2, self.config.hidden_size]}
        if self.classifier is not None:
            shapes["logits"] = ["batch", self.config.num_labels]
        return shapes

    def forward(self, op, input_values):
        hidden = self.audio_spectrogram_transformer(op, input_values)
        outputs = {"last_hidden_state": hidden}
        if self.classifier is not None:
            two = op.Slice(hidden, [0], [2], [1])  # the CLS and distillation tokens
            pooled = op.ReduceMean(two, [1], keepdims=0)
            outputs["logits"] = self.classifier(op, pooled)
        return outputs

    def sanitize(self, weights: dict) -> dict:
        """A bare ``ASTModel`` checkpoint's keys get the ``audio_spectrogram_transformer.`` prefix."""
        prefix = f"{self.base_model_prefix}."
        return {
            k if k.startswith((prefix, "classifier.")) else prefix + k: v
            for k, v in weights.items()
        }


MODEL_TYPES = {"audio-spectrogram-transformer": ASTForAudioClassification}
