"""Granite Speech: a CTC conformer, a windowed Q-Former projector, then Granite's causal LM.

transformers' ``GraniteSpeechForConditionalGeneration``: the conformer
(:mod:`._granite_speech_encoder`) reads the extractor's stacked log-mel frames
``[clips, frames, input_dim]`` (a batch zero-padded to its longest clip, as transformers
runs it); the projector cuts its states into windows of ``window_size`` frames (the last
one zero-padded), lets ``window_size // downsample_rate`` learned ``query`` embeddings read
each window through BLIP-2's Q-Former (:class:`mobius.components.Blip2QFormerModel`, no
mask), and maps the queries' states to the text width with ``linear``. The extractor's
``input_features_mask`` [clips, tokens] then keeps each clip's own tokens (all of them for
one clip). The text decoder is what mobius registers for ``text_config.model_type``
(``granite``), and, as transformers does, its ``embedding_multiplier`` scales the audio
features merged into the embeddings too, while its ``logits_scaling`` is not applied
(transformers' head here is the wrapper's own ``lm_head``).

The audio graph of :mod:`mobius_audio.tasks_audio_language` takes ``input_features``
float [num_audios, frames, input_dim] and ``input_features_mask`` int64 [num_audios,
tokens] (transformers' names; its bool mask as 0/1).

Checkpoints: the hub's layout (``encoder.*``, ``projector.*``, ``language_model.model.*``,
``language_model.lm_head.*``: ibm-granite/granite-speech-3.3-2b, -8b) and the one
transformers 5 saves (``model.encoder.*``, ``model.projector.*``,
``model.language_model.*``, ``lm_head.*``). With ``has_lora_adapter`` (the hub's models
ship a LoRA adapter for the LLM that transformers turns on only when audio is given),
the build merges the adapter into the decoder's weights
(:mod:`mobius_audio.granite_speech_source`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Blip2QFormerModel, Linear, QFormerConfig
from mobius.errors import ConfigError
from mobius_audio.models._audio_lm import (
    AudioLanguageConfig,
    AudioLanguageModel,
    positive_int,
    text_decoder_config,
)
from mobius_audio.models._granite_speech_encoder import (
    GraniteSpeechCTCEncoder,
    GraniteSpeechEncoderConfig,
)

INT64 = ir.DataType.INT64


@dataclass
class GraniteSpeechConfig(AudioLanguageConfig):
    projector: QFormerConfig | None = None
    window_size: int = 15
    downsample_rate: int = 5

    audio_config_class = GraniteSpeechEncoderConfig

    @property
    def num_queries(self) -> int:
        return self.window_size // self.downsample_rate

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        where = hf_config.model_type
        if not isinstance(getattr(hf_config, "has_lora_adapter", False), bool):
            # the adapter itself is merged by the source (mobius_audio.granite_speech_source)
            raise ConfigError(f"{where}: has_lora_adapter is {hf_config.has_lora_adapter!r}")
        token = getattr(hf_config, "audio_token_id", None)
        if not isinstance(token, int) or isinstance(token, bool) or token < 0:
            raise ConfigError(f"{where}: audio_token_id is {token!r}")
        for name in ("encoder_config", "projector_config", "text_config"):
            if getattr(hf_config, name, None) is None:
                raise ConfigError(f"{where}: config.json has no {name}")
        projector_hf = hf_config.projector_config
        if getattr(projector_hf, "model_type", None) != "blip_2_qformer":
            raise ConfigError(
                f"{where}: projector_config.model_type is {projector_hf.model_type!r}, "
                "not blip_2_qformer"
            )
        if getattr(projector_hf, "use_qformer_text_input", False):
            raise ConfigError(f"{where}: a projector Q-Former with text input is not built")
        encoder = cls.audio_config_class.from_hf(hf_config.encoder_config)
        projector = QFormerConfig.from_hf(projector_hf, text_input=False)
        if projector.encoder_hidden_size != encoder.output_width:
            raise ConfigError(
                f"{where}: projector_config.encoder_hidden_size {projector.encoder_hidden_size} "
                f"is not the encoder's output width {encoder.output_width}"
            )
        window = positive_int(hf_config, "window_size", where)
        rate = positive_int(hf_config, "downsample_rate", where)
        if window % rate:
            raise ConfigError(f"{where}: window_size {window} is not a multiple of {rate}")
        text = copy.deepcopy(hf_config.text_config)
        text.tie_word_embeddings = bool(getattr(hf_config, "tie_word_embeddings", False))
        if hasattr(text, "logits_scaling"):
            # transformers' GraniteSpeech runs the bare Granite model and its own lm_head:
            # the text config's logits_scaling is never applied
            text.logits_scaling = 1.0
        return dict(
            model_type=hf_config.model_type,
            audio=encoder,
            text=text_decoder_config(text),
            audio_token_id=token,
            projector=projector,
            window_size=window,
            downsample_rate=rate,
        )


class GraniteSpeechEncoderProjector(nn.Module):
    """``query``, ``qformer`` and ``linear`` (module docstring)."""

    def __init__(self, config: GraniteSpeechConfig) -> None:
        super().__init__()
        width = config.projector.hidden_size
        self.query = nn.Parameter([1, config.num_queries, width])
        self.qformer = Blip2QFormerModel(config.projector)
        self.linear = Linear(width, config.text.hidden_size, bias=True)
        self.window, self.queries = config.window_size, config.num_queries

    def forward(self, op, states):
        """``[clips, frames, hidden_dim]`` -> ``[clips, windows * queries, text hidden]``."""
        window = op.Constant(value_ints=[self.window])
        frames = op.Shape(states, start=1, end=2)
        pad = op.Mod(op.Sub(window, op.Mod(frames, window)), window)  # the last window's zeros
        zeros = op.Constant(value_ints=[0, 0, 0, 0])
        states = op.Pad(states, op.Concat(zeros, pad, op.Constant(value_ints=[0]), axis=0))
        width = op.Shape(states, start=2, end=3)
        windows = op.Reshape(states, op.Concat(op.Constant(value_ints=[-1]), window, width, axis=0))
        count = op.Shape(windows, start=0, end=1)
        query = op.Expand(self.query, op.Concat(count, op.Constant(value_ints=[1, 1]), axis=0))
        out = self.qformer(op, query, windows, self.queries)  # [clips * windows, queries, w]
        clips = op.Shape(states, start=0, end=1)
        width = op.Shape(out, start=2, end=3)
        out = op.Reshape(out, op.Concat(clips, op.Constant(value_ints=[-1]), width, axis=0))
        return self.linear(op, out)


class GraniteSpeechForConditionalGeneration(AudioLanguageModel):
    config_class = GraniteSpeechConfig
    renames: ClassVar[dict[str, str]] = {
        "model.encoder.": "audio_tower.",
        "encoder.": "audio_tower.",
        "model.projector.": "multi_modal_projector.",
        "projector.": "multi_modal_projector.",
        "model.language_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    @property
    def ignored(self) -> tuple[str, ...]:
        return (*super().ignored, "audio_tower.layers.*.conv.batch_norm.num_batches_tracked")

    def make_audio_tower(self, config: GraniteSpeechConfig) -> nn.Module:
        return GraniteSpeechCTCEncoder(config.audio)

    def make_projector(self, config: GraniteSpeechConfig) -> nn.Module:
        return GraniteSpeechEncoderProjector(config)

    def audio_inputs(self, dtype) -> list[tuple]:
        return [
            ("input_features", dtype, ["num_audios", "audio_frames", self.config.audio.input_dim]),
            ("input_features_mask", INT64, ["num_audios", "audio_tokens"]),
        ]

    def audio_features(self, op, input_features, input_features_mask):
        """Every clip's real tokens, clip after clip: ``[audio tokens, text hidden]``."""
        tokens = self.multi_modal_projector(op, self.audio_tower(op, input_features))
        keep = op.Cast(input_features_mask, to=ir.DataType.BOOL)
        return op.GatherND(tokens, op.Transpose(op.NonZero(keep), perm=[1, 0]))

    def embed(self, op, input_ids, audio_features):
        """transformers scales the merged embeddings, audio rows included, by Granite's
        ``embedding_multiplier``; the token lookup already carries it, so the features get it
        before they are merged."""
        multiplier = getattr(self.config.text, "embedding_multiplier", 1.0)
        multiplier = op.CastLike(op.Constant(value_float=multiplier), audio_features)
        scaled = op.Mul(audio_features, multiplier)
        return super().embed(op, input_ids, scaled)


MODEL_TYPES = {"granite_speech": GraniteSpeechForConditionalGeneration}
