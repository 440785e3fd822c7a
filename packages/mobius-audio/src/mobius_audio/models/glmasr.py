"""GLM-ASR: a rotary Whisper-like encoder per window, states stacked by four, an MLP, Llama.

transformers' ``GlmAsrEncoder`` is Whisper's two convolutions (the second of stride 2)
without a position table: each of its pre-norm layers (``input_layernorm``,
``post_attention_layernorm``, LayerNorm) rotates the first ``partial_rotary_factor`` of
every head's channels by the state's index (rotate-half, ``rope_parameters``), its
attention has biased query, value and output projections and an unbiased key, and it
attends over the whole window (no mask: the padding states take part), ending in
``norm``. The processor cuts audio into ``chunk_length`` windows; each window's states
``[windows, states, hidden]`` are reshaped to rows of ``intermediate_size`` (four states
for the hub's 1280 -> 5120) and go through ``multi_modal_projector`` (``linear_1``, the
``projector_hidden_act``, ``linear_2``, biased). A window of ``frames`` real feature
frames (``input_features_mask``) keeps its first ``((frames - 1) // 2 + 1) // 4``
tokens, window after window. The text decoder is whatever mobius registers for
``text_config.model_type`` (Llama for zai-org/GLM-ASR-Nano-2512).

Checkpoints: transformers' layout (``audio_tower.*``, ``multi_modal_projector.*``,
``language_model.model.*``, ``language_model.lm_head.*``) and transformers 5's saved
one (``model.audio_tower.*``, ``model.language_model.*``, ``lm_head.*``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    ACTIVATIONS,
    Attention,
    LayerNorm,
    Linear,
    RotaryEmbedding,
    default_inv_freq,
    get_activation,
    merge_heads,
    rotary_dim,
)
from mobius.config import RopeConfig
from mobius.errors import ConfigError
from mobius_audio.models._audio_lm import AudioLanguageConfig, AudioLanguageModel, positive_int
from mobius_audio.models.qwen2_audio import first_of_each_row
from mobius_audio.models.whisper import Conv1d

INT64 = ir.DataType.INT64

#: Consecutive encoder states stacked into one audio token (``intermediate_size / hidden``).
MERGE = 4


@dataclass
class GlmAsrEncoderConfig:
    """The ``audio_config`` of GLM-ASR (``glmasr_encoder``)."""

    num_mel_bins: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    hidden_act: str
    rope: RopeConfig

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf(cls, hf: Any) -> GlmAsrEncoderConfig:
        where = "audio_config"
        fields = {
            name: positive_int(hf, name, where)
            for name in (
                "num_mel_bins", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads",
            )
        }  # fmt: skip
        heads = fields["num_attention_heads"]
        kv_heads = getattr(hf, "num_key_value_heads", None) or heads
        if fields["hidden_size"] % heads or heads % kv_heads:
            raise ConfigError(
                f"audio_config.hidden_size {fields['hidden_size']} / num_attention_heads "
                f"{heads} / num_key_value_heads {kv_heads} do not split into whole heads"
            )
        if fields["intermediate_size"] != MERGE * fields["hidden_size"]:
            raise ConfigError(
                f"audio_config.intermediate_size {fields['intermediate_size']} is not "
                f"{MERGE} x hidden_size {fields['hidden_size']} (transformers merges 4 states)"
            )
        act = getattr(hf, "hidden_act", "gelu")
        if act not in ACTIVATIONS:
            raise ConfigError(f"audio_config.hidden_act {act!r} is not one mobius knows")
        rope = RopeConfig.from_hf(hf)
        if rope.rope_type != "default":
            raise ConfigError(f"audio_config rope_type {rope.rope_type!r}: only default is built")
        return cls(**fields, num_key_value_heads=kv_heads, hidden_act=act, rope=rope)


class GlmAsrAttention(Attention):
    """Bidirectional attention over the window; the key projection has no bias."""

    def __init__(self, config: GlmAsrEncoderConfig) -> None:
        d, heads, kv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        super().__init__(
            d, heads, kv, config.head_dim, bias=True, out_bias=True,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )  # fmt: skip
        self.k_proj = Linear(d, kv * config.head_dim, bias=False)

    def forward(self, op, x, position_embeddings):
        q, k, v = self.project_qkv(op, x)  # [windows, heads, states, head_dim]
        q, k = self.rotate(op, q, k, position_embeddings)
        y = op.Attention(q, k, v, scale=self.scale)  # no mask: the whole window
        return self.o_proj(op, merge_heads(op, y))


class GlmAsrMLP(nn.Module):
    def __init__(self, config: GlmAsrEncoderConfig) -> None:
        super().__init__()
        self.fc1 = Linear(config.hidden_size, config.intermediate_size, bias=True)
        self.act = get_activation(config.hidden_act)
        self.fc2 = Linear(config.intermediate_size, config.hidden_size, bias=True)

    def forward(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, x)))


class GlmAsrEncoderLayer(nn.Module):
    def __init__(self, config: GlmAsrEncoderConfig) -> None:
        super().__init__()
        self.self_attn = GlmAsrAttention(config)
        self.mlp = GlmAsrMLP(config)
        self.input_layernorm = LayerNorm(config.hidden_size, 1e-5)
        self.post_attention_layernorm = LayerNorm(config.hidden_size, 1e-5)

    def forward(self, op, x, position_embeddings):
        x = op.Add(x, self.self_attn(op, self.input_layernorm(op, x), position_embeddings))
        return op.Add(x, self.mlp(op, self.post_attention_layernorm(op, x)))


class GlmAsrEncoder(nn.Module):
    """``conv1``, ``conv2``, ``layers``, ``norm``: ``[windows, states, hidden]``."""

    def __init__(self, config: GlmAsrEncoderConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.conv1 = Conv1d(config.num_mel_bins, d, 3)
        self.conv2 = Conv1d(d, d, 3, stride=2)
        self.layers = nn.ModuleList(
            [GlmAsrEncoderLayer(config) for _ in range(config.num_hidden_layers)]
        )
        self.norm = LayerNorm(d, 1e-5)
        dim = rotary_dim(config.rope, config.head_dim)
        self.rotary_emb = RotaryEmbedding(default_inv_freq(config.rope.theta, dim))

    def forward(self, op, input_features):
        x = op.Gelu(self.conv1(op, input_features))
        x = op.Gelu(self.conv2(op, x))  # [windows, d, states]
        x = op.Transpose(x, perm=[0, 2, 1])
        states = op.Squeeze(op.Shape(x, start=1, end=2), [0])
        index = op.Range(op.Constant(value_int=0), states, op.Constant(value_int=1))
        positions = op.Expand(op.Unsqueeze(index, [0]), op.Shape(x, start=0, end=2))
        position_embeddings = self.rotary_emb(op, positions)  # [windows, states, rotary / 2]
        for layer in self.layers:
            x = layer(op, x, position_embeddings)
        return self.norm(op, x)


class GlmAsrMultiModalProjector(nn.Module):
    def __init__(self, stacked: int, hidden: int, act: str) -> None:
        super().__init__()
        self.linear_1 = Linear(stacked, 2 * hidden, bias=True)
        self.act = get_activation(act)
        self.linear_2 = Linear(2 * hidden, hidden, bias=True)

    def forward(self, op, x):
        return self.linear_2(op, self.act(op, self.linear_1(op, x)))


@dataclass
class GlmAsrConfig(AudioLanguageConfig):
    projector_hidden_act: str = "gelu"

    audio_config_class = GlmAsrEncoderConfig

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        act = getattr(hf_config, "projector_hidden_act", "gelu")
        if act not in ACTIVATIONS:
            raise ConfigError(f"projector_hidden_act {act!r} is not one mobius knows")
        return dict(fields, projector_hidden_act=act)


class GlmAsrForConditionalGeneration(AudioLanguageModel):
    config_class = GlmAsrConfig

    def make_audio_tower(self, config: GlmAsrConfig) -> nn.Module:
        return GlmAsrEncoder(config.audio)

    def make_projector(self, config: GlmAsrConfig) -> nn.Module:
        return GlmAsrMultiModalProjector(
            config.audio.intermediate_size, config.text.hidden_size, config.projector_hidden_act
        )

    def audio_inputs(self, dtype) -> list[tuple]:
        mels = self.config.audio.num_mel_bins
        return [
            ("input_features", dtype, ["num_audios", mels, "audio_frames"]),
            ("input_features_mask", INT64, ["num_audios", "audio_frames"]),
        ]

    def audio_features(self, op, input_features, input_features_mask):
        states = self.audio_tower(op, input_features)  # [windows, states, d]
        stacked = op.Reshape(
            states, op.Constant(value_ints=[0, -1, self.config.audio.intermediate_size])
        )  # [windows, states / 4, 4 d]
        x = self.multi_modal_projector(op, stacked)  # [windows, tokens, text hidden]
        frames = op.ReduceSum(op.Cast(input_features_mask, to=INT64), [1], keepdims=0)
        one, two = op.Constant(value_int=1), op.Constant(value_int=2)
        real = op.Add(op.Div(op.Sub(frames, one), two), one)  # conv2's real states
        tokens = op.Div(real, op.Constant(value_int=MERGE))
        keep = first_of_each_row(op, tokens, op.Shape(x, start=1, end=2))
        return op.GatherND(x, op.Transpose(op.NonZero(keep), perm=[1, 0]))


MODEL_TYPES = {"glmasr": GlmAsrForConditionalGeneration}
