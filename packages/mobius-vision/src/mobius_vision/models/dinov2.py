"""DINOv2: a ViT with layer scale, an MLP sized by ``mlp_ratio`` (or SwiGLU), and CLS pooling.

Checkpoint keys as transformers saves them (``dinov2.encoder.layer.0.norm1``,
``attention.attention.query``, ``layer_scale1.lambda1``, ``mlp.fc1`` or SwiGLU's
``mlp.weights_in``/``weights_out``). The position table is built for the config's
image size, so no interpolation happens; transformers interpolates whenever the
image is not square, so non-square sizes are refused. ``pooler_output`` is the
final class token; the classifier reads ``[cls, mean(patches)]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models.vit import (
    ViTAttention,
    ViTConfig,
    ViTForImageClassification,
    ViTModel,
)


@dataclass
class Dinov2Config(ViTConfig):
    layer_norm_eps: float = 1e-6
    use_swiglu_ffn: bool = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = VisionConfig.hf_fields.__func__(cls, hf_config)
        height, width = fields["image_size"]
        if height != width:
            raise ConfigError(
                f"{hf_config.model_type}: image_size {height}x{width} is not square; "
                "transformers interpolates its positions there, which mobius does not build"
            )
        return dict(
            fields,
            hidden_size=hf_config.hidden_size,
            intermediate_size=int(hf_config.hidden_size * hf_config.mlp_ratio),
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=hf_config.num_attention_heads,
            patch_size=hf_config.patch_size,
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
            qkv_bias=bool(hf_config.qkv_bias),
            pooler=False,
            use_swiglu_ffn=bool(hf_config.use_swiglu_ffn),
        )


class Dinov2LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lambda1 = nn.Parameter([dim])

    def forward(self, op, x):
        return op.Mul(x, self.lambda1)


class Dinov2MLP(nn.Module):
    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        self.fc1 = Linear(config.hidden_size, config.intermediate_size, bias=True)
        self.fc2 = Linear(config.intermediate_size, config.hidden_size, bias=True)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, x)))


class Dinov2SwiGLUFFN(nn.Module):
    """``weights_out(silu(gate) * up)`` with ``[gate; up] = weights_in(x)``."""

    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        hidden = (int(config.intermediate_size * 2 / 3) + 7) // 8 * 8
        self.weights_in = Linear(config.hidden_size, 2 * hidden, bias=True)
        self.weights_out = Linear(hidden, config.hidden_size, bias=True)

    def forward(self, op, x):
        gate, up = op.Split(self.weights_in(op, x), axis=-1, num_outputs=2, _outputs=2)
        return self.weights_out(op, op.Mul(op.Mul(gate, op.Sigmoid(gate)), up))


class Dinov2Layer(nn.Module):
    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.norm1 = LayerNorm(d, eps)
        self.attention = ViTAttention(config)
        self.layer_scale1 = Dinov2LayerScale(d)
        self.norm2 = LayerNorm(d, eps)
        self.mlp = Dinov2SwiGLUFFN(config) if config.use_swiglu_ffn else Dinov2MLP(config)
        self.layer_scale2 = Dinov2LayerScale(d)

    def forward(self, op, x):
        x = op.Add(x, self.layer_scale1(op, self.attention(op, self.norm1(op, x))))
        return op.Add(x, self.layer_scale2(op, self.mlp(op, self.norm2(op, x))))


class Dinov2Encoder(nn.Module):
    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        self.layer = nn.ModuleList([Dinov2Layer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, op, x):
        for layer in self.layer:
            x = layer(op, x)
        return x


class Dinov2Model(ViTModel):
    def __init__(self, config: Dinov2Config) -> None:
        super().__init__(config)
        self.encoder = Dinov2Encoder(config)
        self.pools = config.head == "none"  # the bare model's pooler_output: the class token

    def forward(self, op, pixel_values):
        x = self.layernorm(op, self.encoder(op, self.embeddings(op, pixel_values)))
        return x, op.Gather(x, op.Constant(value_int=0), axis=1) if self.pools else None


class Dinov2ForImageClassification(ViTForImageClassification):
    """The classifier on ``[cls, mean of the patch tokens]`` (``2 * hidden`` features)."""

    config_class = Dinov2Config
    base_model_prefix = "dinov2"
    model_class = Dinov2Model

    def __init__(self, config: Dinov2Config) -> None:
        super().__init__(config)
        if self.classifier is not None:
            self.classifier = Linear(2 * config.hidden_size, config.num_labels, True)

    def classify(self, op, hidden):
        first = self.base_model.embeddings.extra_tokens  # patches follow the prefix tokens
        patches = op.Slice(hidden, [first], [2**62], [1])
        mean = op.ReduceMean(patches, op.Constant(value_ints=[1]), keepdims=0)
        cls = op.Gather(hidden, op.Constant(value_int=0), axis=1)
        return self.classifier(op, op.Concat(cls, mean, axis=-1))


MODEL_TYPES = {"dinov2": Dinov2ForImageClassification}
