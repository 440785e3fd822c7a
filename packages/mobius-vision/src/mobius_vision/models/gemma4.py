"""Gemma 4 (multimodal wrapper): Gemma 4's vision tower, ``embed_vision``, and mobius-text's
``gemma4_text`` decoder.

- The vision graph takes the processor's patches and patch positions
  (:mod:`~mobius_vision.models.gemma4_vision`) and returns the soft tokens projected by
  ``embed_vision`` (a scale-free RMSNorm, then a bias-free Linear) to the decoder's width.
- Placeholders (image, video and audio ids) embed as the pad token before the image
  features replace the image ones, as transformers does; the per-layer input table of
  the smaller models (``hidden_size_per_layer_input``) reads those same ids. The
  embedding graph therefore returns ``per_layer_inputs`` [batch, sequence, layers,
  per_layer] beside ``inputs_embeds``, and the decoder graph takes it in place of its
  own table lookup (its projection of the merged embeddings stays in the decoder).
- Audio (the :mod:`~mobius_vision.tasks.audio_vision_language` contract): the audio graph
  takes the feature extractor's log-mel frames ``input_features [num_audios, frames,
  mel_bins]`` and ``input_features_mask [num_audios, frames]`` (1 on real frames), runs
  the conformer ``audio_tower`` (:mod:`._gemma4_audio`, 4x fewer frames) and
  ``embed_audio`` (the same embedder as images), and keeps the rows the tower's own mask
  marks real, clip by clip: the audio tokens, which replace the audio placeholders in
  order, as transformers' ``Gemma4Model`` does. A checkpoint without ``audio_config``
  (the larger Gemma 4 models) builds no audio graph, and its single form takes no audio.

- With ``use_bidirectional_attention="vision"`` (the larger checkpoints) each run of image
  tokens attends both ways on the sliding layers (within their window); full layers stay
  causal. The embedding graph then also writes ``image_tokens`` [batch, sequence] (1.0 on
  image and video tokens), from which the decoder numbers the runs; on decode steps it
  marks nothing, as transformers' ``generate`` passes no token types then.

Not built: the MoE decoder (``enable_moe_block``), which mobius-text's ``gemma4_text``
refuses too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, attention_bias, bidirectional_blocks, module_scope
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_text.models.gemma3n_text import rms_normalize
from mobius_vision.config import VisionLanguageConfig, composed_config
from mobius_vision.models._compose import merge_image_features
from mobius_vision.models._gemma4_audio import Gemma4AudioConfig, Gemma4AudioEncoder
from mobius_vision.models._vl import VisionLanguageModel, text_decoder
from mobius_vision.models.gemma3 import image_blocks
from mobius_vision.models.gemma4_vision import Gemma4VisionConfig, Gemma4VisionTower


@dataclass
class Gemma4Config(VisionLanguageConfig):
    #: The id placeholders embed as (image, video and audio ones).
    pad_token_id: int = 0
    placeholder_ids: tuple[int, ...] = ()
    #: The ids of image and video tokens, whose runs attend both ways on sliding layers
    #: (``use_bidirectional_attention="vision"``); empty where they do not.
    block_token_ids: tuple[int, ...] = ()
    #: The audio tower's sizes; None for a checkpoint without one (no audio graph).
    audio: Gemma4AudioConfig | None = None
    audio_token_id: int = 0
    text_head_applied = ("final_logit_softcapping",)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if hf_config.vision_config is None:
            raise ConfigError(f"{hf_config.model_type}: no vision_config; build --part text")
        text = cls.text_hf_config(hf_config)
        blocks = ()
        if getattr(text, "use_bidirectional_attention", None) == "all":
            raise ConfigError(
                f"{hf_config.model_type}: use_bidirectional_attention='all' makes an encoder "
                "(every token sees every other), not a generative model"
            )
        if getattr(text, "use_bidirectional_attention", None) == "vision":
            # the wrapper's masks, not the decoder's: the causal LM is built as it is
            text.use_bidirectional_attention = None
            blocks = _ids(hf_config.image_token_id, hf_config.video_token_id)
        ids = _ids(hf_config.image_token_id, hf_config.video_token_id, hf_config.audio_token_id)
        audio = hf_config.audio_config
        return dict(
            model_type=hf_config.model_type,
            vision=Gemma4VisionConfig.from_hf(hf_config.vision_config),
            audio=None if audio is None else Gemma4AudioConfig.from_hf(audio),
            text=composed_config(text),
            image_token_id=int(hf_config.image_token_id),
            audio_token_id=_token_id(hf_config, "audio_token_id"),
            pad_token_id=int(text.pad_token_id or 0),
            placeholder_ids=ids,
            block_token_ids=blocks,
        )


def _ids(*ids) -> tuple[int, ...]:
    return tuple(int(i) for i in ids if i is not None)


def _token_id(hf_config: Any, name: str) -> int:
    value = getattr(hf_config, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{hf_config.model_type}: {name} {value!r} is not a token id")
    return value


def real_rows(op, features, real):
    """The rows of ``features [n, length, hidden]`` where ``real [n, length]`` holds, in order."""
    return op.GatherND(features, op.Transpose(op.NonZero(real), perm=[1, 0]))


def any_of(op, input_ids, ids: tuple[int, ...]):
    """``[batch, sequence]`` bool: the token is one of ``ids``."""
    hits = op.Equal(op.Unsqueeze(input_ids, [2]), op.Constant(value_ints=list(ids)))
    hits = op.ReduceMax(op.Cast(hits, to=ir.DataType.INT64), [2], keepdims=0)
    return op.Cast(hits, to=ir.DataType.BOOL)


class Gemma4MultimodalEmbedder(nn.Module):
    """``embedding_projection(rms_normalize(x))``: soft tokens into the decoder's width."""

    def __init__(self, in_features: int, out_features: int, eps: float) -> None:
        super().__init__()
        self.embedding_projection = Linear(in_features, out_features)
        self.eps = eps

    def forward(self, op, x):
        x = op.CastLike(x, self.embedding_projection.weight)
        return self.embedding_projection(op, rms_normalize(op, x, self.eps))


@contextlib.contextmanager
def per_layer_inputs_given(table: nn.Module, per_layer_inputs) -> Iterator:
    """Within the block, the decoder's per-layer table returns ``per_layer_inputs``."""
    object.__setattr__(table, "forward", lambda op, ids: per_layer_inputs)
    try:
        yield
    finally:
        object.__delattr__(table, "forward")


@contextlib.contextmanager
def attention_bias_given(layers: list[nn.Module], bias) -> Iterator:
    """Within the block, each of ``layers`` (Gemma 4 decoder layers) attends with ``bias``."""
    for layer in layers:

        def forward(op, x, rope, _bias, *rest, _forward=layer.forward):
            return _forward(op, x, rope, bias, *rest)

        object.__setattr__(layer, "forward", forward)
    try:
        yield
    finally:
        for layer in layers:
            object.__delattr__(layer, "forward")


class Gemma4ForConditionalGeneration(VisionLanguageModel):
    """The vision tower, the audio tower where the checkpoint has one, their embedders and
    the ``gemma4_text`` decoder (module docstring)."""

    task = "audio-vision-language"
    config_class = Gemma4Config
    renames = {
        "model.vision_tower.": "vision_tower.",
        "model.embed_vision.": "embed_vision.",
        "model.audio_tower.": "audio_tower.",
        "model.embed_audio.": "embed_audio.",
        "model.language_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def __init__(self, config: Gemma4Config) -> None:  # the tower is the family's own
        Model.__init__(self)
        self.config = config
        vision = config.vision
        self.vision_tower = Gemma4VisionTower(vision)
        self.embed_vision = Gemma4MultimodalEmbedder(
            vision.hidden_size, config.text.hidden_size, vision.rms_norm_eps
        )
        audio = config.audio
        if audio is not None:
            self.audio_tower = Gemma4AudioEncoder(audio)
            self.embed_audio = Gemma4MultimodalEmbedder(
                audio.output_proj_dims, config.text.hidden_size, audio.rms_norm_eps
            )
        self.language_model = text_decoder(config.text)

    @property
    def per_layer(self) -> int:
        return self.config.text.hidden_size_per_layer_input

    def vision_inputs(self, dtype) -> list[tuple]:
        shape = ["num_images", "num_patches"]
        return [
            ("pixel_values", dtype, [*shape, self.config.vision.patch_pixels]),
            ("image_position_ids", ir.DataType.INT64, [*shape, 2]),
        ]

    def vision_modules(self) -> list[nn.Module]:
        return [self.vision_tower, self.embed_vision]

    def image_features(self, op, pixel_values, image_position_ids):
        with module_scope(op, self.vision_tower):
            tokens = self.vision_tower.soft_tokens(op, pixel_values, image_position_ids)
        return self.embed_vision(op, tokens)

    def audio_modules(self) -> list[nn.Module]:
        """The audio tower and its embedder; none without ``audio_config`` (no audio graph)."""
        return [] if self.config.audio is None else [self.audio_tower, self.embed_audio]

    def audio_inputs(self, dtype) -> list[tuple]:
        frames = ["num_audios", "audio_frames"]
        # the tower's projection is sized for as many mel bins as its first conv's channels
        mel_bins = self.config.audio.subsampling_conv_channels[0]
        return [
            ("input_features", dtype, [*frames, mel_bins]),
            ("input_features_mask", ir.DataType.INT64, frames),
        ]

    def audio_outputs(self) -> list[tuple]:
        return [("audio_features", ["num_audio_tokens", self.config.text.hidden_size])]

    def audio_features(self, op, input_features, input_features_mask):
        """The real audio tokens' embeddings ``[audio_tokens, hidden]``, clip by clip."""
        valid = op.Cast(input_features_mask, to=ir.DataType.BOOL)
        states, valid = self.audio_tower(op, input_features, valid)
        return real_rows(op, self.embed_audio(op, states), valid)

    def embedding_outputs(self) -> list[tuple]:
        outputs = []
        if self.per_layer:
            layers = self.config.text.num_hidden_layers
            outputs.append(("per_layer_inputs", ["batch", "sequence", layers, self.per_layer]))
        if self.config.block_token_ids:
            outputs.append(("image_tokens", ["batch", "sequence"]))
        return outputs

    def embed(self, op, input_ids, image_features, audio_features=None):
        """The ids' embeddings, placeholders as the pad token, then the image and audio
        placeholders replaced in order (``audio_features`` None: the model has no audio)."""
        is_placeholder = any_of(op, input_ids, self.config.placeholder_ids)
        text_ids = op.Where(
            is_placeholder, op.Constant(value_int=self.config.pad_token_id), input_ids
        )
        decoder = self.language_model
        with module_scope(op, decoder, decoder.model):
            embeds = decoder.model.embed_tokens(op, text_ids)
            per_layer = (
                decoder.model.embed_tokens_per_layer(op, text_ids) if self.per_layer else None
            )
        embeds = merge_image_features(
            op, embeds, input_ids, image_features, self.config.image_token_id
        )
        if audio_features is not None:
            embeds = merge_image_features(
                op, embeds, input_ids, audio_features, self.config.audio_token_id
            )
        extras = [] if per_layer is None else [per_layer]
        if self.config.block_token_ids:
            image_tokens = any_of(op, input_ids, self.config.block_token_ids)
            extras.append(op.CastLike(image_tokens, embeds))
        return (embeds, *extras) if extras else embeds

    def decode(self, op, inputs_embeds, attention_mask, position_ids, past, *extras):
        with contextlib.ExitStack() as stack:
            extras = list(extras)
            if self.per_layer:
                table = self.language_model.model.embed_tokens_per_layer
                stack.enter_context(per_layer_inputs_given(table, extras.pop(0)))
            if self.config.block_token_ids:
                bias = self.sliding_bias(op, inputs_embeds, attention_mask, extras.pop(0))
                layers = zip(
                    self.language_model.model.layers, self.config.text.layer_types, strict=True
                )
                sliding = [layer for layer, kind in layers if kind == "sliding_attention"]
                stack.enter_context(attention_bias_given(sliding, bias))
            return super().decode(op, inputs_embeds, attention_mask, position_ids, past)

    def sliding_bias(self, op, inputs_embeds, attention_mask, image_tokens):
        """The sliding layers' bias: causal or in the query's run of image tokens, then the window."""
        types = op.Cast(op.Cast(image_tokens, to=ir.DataType.BOOL), to=ir.DataType.INT64)
        seq_len = op.Squeeze(op.Shape(inputs_embeds, start=1, end=2), [0])
        with bidirectional_blocks(image_blocks(op, types)):
            window = self.config.text.sliding_window
            return attention_bias(op, attention_mask, seq_len, inputs_embeds.dtype, window)


MODEL_TYPES = {"gemma4": Gemma4ForConditionalGeneration}
