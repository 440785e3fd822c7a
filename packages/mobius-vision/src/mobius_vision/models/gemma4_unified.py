"""Gemma 4 unified: no vision or audio tower; raw patches and raw waveform frames are
projected straight into the Gemma 4 decoder (``gemma4_unified_text``, mobius-text's).

- Images: each merged patch (``patch_size * pooling_kernel_size`` pixels a side, as the
  processor cuts it) goes through ``vision_embedder`` (LayerNorm, a Linear to
  ``mm_embed_dim``, LayerNorm, a column and a row embedding (none on padding patches),
  LayerNorm), then ``embed_vision``, Gemma 4's multimodal embedder (a scale-free
  RMSNorm and a projection). The modules are named as the hub's checkpoints name them
  (transformers nests the first in the second, and ``renames`` reads that layout too). The real patches (positions not ``-1``) are the image tokens.
- Audio (``embed_audio``): each frame of ``audio_samples_per_token`` raw samples goes
  through the same scale-free RMSNorm and projection; the frames the processor's
  ``input_features_mask`` marks real are the audio tokens. The contract is
  :mod:`mobius_vision.tasks.audio_vision_language`, its audio graph taking
  ``input_features [num_audios, frames, samples_per_frame]`` and ``input_features_mask``.
- Placeholders embed as the pad token before the features replace them, as in Gemma 4.
- With ``use_bidirectional_attention="vision"`` (the config's default) each run of image
  (or video) tokens attends both ways on every layer, full and sliding, beyond the window
  too (transformers adds the blocks after the window); the embedding graph writes
  ``image_tokens`` for the decoder to number the runs, as Gemma 4's does.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, ClassVar

import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_blocks
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.config import composed_config
from mobius_vision.models._vl import VisionLanguageModel, text_decoder
from mobius_vision.models.gemma3 import image_blocks
from mobius_vision.models.gemma4 import (
    Gemma4Config,
    Gemma4ForConditionalGeneration,
    Gemma4MultimodalEmbedder,
    _ids,
    real_rows,
)


def _count(sub_config: Any, name: str) -> int:
    value = getattr(sub_config, name)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"gemma4_unified: {sub_config.model_type}.{name} {value!r} is not a size")
    return value


@dataclass
class Gemma4UnifiedVisionConfig:
    """``embed_vision``'s sizes: merged patches of ``patch_pixels``, a table of positions."""

    patch_pixels: int
    mm_embed_dim: int
    mm_posemb_size: int
    rms_norm_eps: float

    @classmethod
    def from_hf(cls, hf_config: Any) -> Gemma4UnifiedVisionConfig:
        side = _count(hf_config, "patch_size") * _count(hf_config, "pooling_kernel_size")
        width = _count(hf_config, "mm_embed_dim")
        if _count(hf_config, "output_proj_dims") != width:
            raise ConfigError(
                f"gemma4_unified: vision output_proj_dims {hf_config.output_proj_dims} is not "
                f"mm_embed_dim {width}"
            )
        return cls(
            patch_pixels=3 * side * side,
            mm_embed_dim=width,
            mm_posemb_size=_count(hf_config, "mm_posemb_size"),
            rms_norm_eps=float(hf_config.rms_norm_eps),
        )


@dataclass
class Gemma4UnifiedAudioConfig:
    """``embed_audio``'s input: frames of ``samples_per_frame`` raw samples."""

    samples_per_frame: int
    rms_norm_eps: float

    @classmethod
    def from_hf(cls, hf_config: Any) -> Gemma4UnifiedAudioConfig:
        samples = _count(hf_config, "audio_embed_dim")
        return cls(samples_per_frame=samples, rms_norm_eps=float(hf_config.rms_norm_eps))


@dataclass
class Gemma4UnifiedConfig(Gemma4Config):
    audio: Gemma4UnifiedAudioConfig | None = None

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if hf_config.vision_config is None or hf_config.audio_config is None:
            raise ConfigError(
                f"{hf_config.model_type}: the build takes images and audio, and the config "
                "lacks vision_config or audio_config; build --part text for the decoder alone"
            )
        text = cls.text_hf_config(hf_config)
        mode = getattr(text, "use_bidirectional_attention", None)
        if mode == "all":
            raise ConfigError(
                f"{hf_config.model_type}: use_bidirectional_attention='all' makes an encoder "
                "(every token sees every other), not a generative model"
            )
        image_ids = _ids(hf_config.image_token_id, hf_config.video_token_id)
        return dict(
            model_type=hf_config.model_type,
            vision=Gemma4UnifiedVisionConfig.from_hf(hf_config.vision_config),
            audio=Gemma4UnifiedAudioConfig.from_hf(hf_config.audio_config),
            text=composed_config(text),
            image_token_id=int(hf_config.image_token_id),
            audio_token_id=int(hf_config.audio_token_id),
            pad_token_id=int(text.pad_token_id or 0),
            placeholder_ids=_ids(*image_ids, hf_config.audio_token_id),
            block_token_ids=image_ids if mode == "vision" else (),
        )


class Gemma4UnifiedPatchEmbedder(nn.Module):
    """Raw merged patches to ``mm_embed_dim``, with their positions (module docstring)."""

    def __init__(self, config: Gemma4UnifiedVisionConfig) -> None:
        super().__init__()
        width = config.mm_embed_dim
        self.patch_ln1 = LayerNorm(config.patch_pixels)
        self.patch_dense = Linear(config.patch_pixels, width, bias=True)
        self.patch_ln2 = LayerNorm(width)
        self.pos_embedding = nn.Parameter([config.mm_posemb_size, 2, width])
        self.pos_norm = LayerNorm(width)

    def forward(self, op, pixel_values, image_position_ids):
        x = op.CastLike(pixel_values, self.patch_dense.weight)
        x = self.patch_ln2(op, self.patch_dense(op, self.patch_ln1(op, x)))
        padding = op.Equal(image_position_ids, op.Constant(value_int=-1))  # [images, patches, 2]
        clamped = op.Max(image_position_ids, op.Constant(value_int=0))
        tables = op.Split(self.pos_embedding, num_outputs=2, axis=1, _outputs=2)
        axes = op.Split(clamped, num_outputs=2, axis=2, _outputs=2)
        zero = op.CastLike(op.Constant(value_float=0.0), x)
        absent = op.Split(padding, num_outputs=2, axis=2, _outputs=2)
        for table, axis, missing in zip(tables, axes, absent, strict=True):  # columns, rows
            rows = op.Gather(
                op.Squeeze(table, [1]), op.Squeeze(axis, [2])
            )  # [images, patches, width]
            x = op.Add(x, op.Where(missing, zero, rows))
        return self.pos_norm(op, x)


class Gemma4UnifiedForConditionalGeneration(Gemma4ForConditionalGeneration):
    """``vision_embedder``, ``embed_vision``, ``embed_audio`` and the ``gemma4_unified_text``
    decoder (module docstring)."""

    task = "audio-vision-language"
    config_class = Gemma4UnifiedConfig
    renames: ClassVar[dict[str, str]] = {
        # transformers' module layout (the hub's is the next two)
        "model.embed_vision.multimodal_embedder.": "embed_vision.",
        "model.embed_vision.patch_": "vision_embedder.patch_",
        "model.embed_vision.pos_": "vision_embedder.pos_",
        "model.vision_embedder.": "vision_embedder.",
        "model.embed_vision.": "embed_vision.",
        "model.embed_audio.": "embed_audio.",
        "model.language_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def __init__(self, config: Gemma4UnifiedConfig) -> None:  # no towers: embedders alone
        Model.__init__(self)
        self.config = config
        text_hidden = config.text.hidden_size
        vision = config.vision
        self.vision_embedder = Gemma4UnifiedPatchEmbedder(vision)
        self.embed_vision = Gemma4MultimodalEmbedder(
            vision.mm_embed_dim, text_hidden, vision.rms_norm_eps
        )
        audio = config.audio
        self.embed_audio = Gemma4MultimodalEmbedder(
            audio.samples_per_frame, text_hidden, audio.rms_norm_eps
        )
        self.language_model = text_decoder(config.text)

    def vision_modules(self) -> list[nn.Module]:
        return [self.vision_embedder, self.embed_vision]

    def image_features(self, op, pixel_values, image_position_ids):
        """The real patches' embeddings ``[image_tokens, hidden]``, image by image."""
        real = op.Not(op.Equal(image_position_ids, op.Constant(value_int=-1)))
        real = op.Cast(
            op.ReduceMin(op.Cast(real, to=ir.DataType.INT64), [2], keepdims=0), to=ir.DataType.BOOL
        )
        patches = self.vision_embedder(op, pixel_values, image_position_ids)
        return real_rows(op, self.embed_vision(op, patches), real)

    def audio_inputs(self, dtype) -> list[tuple]:
        frames = ["num_audios", "audio_frames"]
        return [
            ("input_features", dtype, [*frames, self.config.audio.samples_per_frame]),
            ("input_features_mask", ir.DataType.INT64, frames),
        ]

    def audio_outputs(self) -> list[tuple]:
        return [("audio_features", ["num_audio_tokens", self.config.text.hidden_size])]

    def audio_modules(self) -> list[nn.Module]:
        return [self.embed_audio]

    def audio_features(self, op, input_features, input_features_mask):
        """The real frames' embeddings ``[audio_tokens, hidden]``, clip by clip."""
        real = op.Cast(input_features_mask, to=ir.DataType.BOOL)
        return real_rows(op, self.embed_audio(op, input_features), real)

    def decode(self, op, inputs_embeds, attention_mask, position_ids, past, *extras):
        """The decoder, image runs attending both ways on every layer where the config says so."""
        with contextlib.ExitStack() as stack:
            if self.config.block_token_ids:
                (image_tokens,) = extras
                types = op.Cast(op.Cast(image_tokens, to=ir.DataType.BOOL), to=ir.DataType.INT64)
                stack.enter_context(bidirectional_blocks(image_blocks(op, types), windowed=False))
            return VisionLanguageModel.decode(
                self, op, inputs_embeds, attention_mask, position_ids, past
            )

    @property
    def ignored(self) -> tuple[str, ...]:
        # every tensor is read: none of Gemma 4's towers to leave out
        return VisionLanguageModel.ignored.fget(self)


MODEL_TYPES = {"gemma4_unified": Gemma4UnifiedForConditionalGeneration}
