"""Gemma 3n (multimodal): a MobileNet-V5 tower and multimodal embedders into the Gemma 3n
text decoder (AltUp, per-layer inputs).

- Images: the tower's ``[images, 2048, r, r]`` output laid out as ``r * r`` tokens,
  multiplied by ``sqrt(2048)`` and put through ``embed_vision``'s soft path (RMS norm,
  projection to the text width, scale-free RMS norm). They replace the image
  placeholders in order.
- Token ids in a modality's range ``[vocab_offset, vocab_offset + vocab_size)`` embed
  through that modality's hard path (its own table, RMS norm, the same projection)
  instead of the text table: the end-of-image token is one of them.
- The decoder's per-layer inputs read their table with the token ids, which the split
  decoder does not take: the embedding graph also returns ``per_layer_inputs``
  ``[batch, sequence, layers, per_layer_dim]`` (the table rows; ids past it read row 0),
  and the decoder graph takes them beside ``inputs_embeds``.
- Audio (the :mod:`~mobius_vision.tasks.audio_vision_language` contract): the audio graph
  takes the feature extractor's log-mel frames ``input_features [num_audios, frames,
  mel_bins]`` and ``input_features_mask [num_audios, frames]`` (1 on real frames), runs
  the conformer ``audio_tower`` (:mod:`._gemma3n_audio`) and ``embed_audio``'s soft path.
  As transformers' ``Gemma3nModel``, every clip gives exactly ``audio_soft_tokens_per_image``
  tokens (the processor's fixed audio block): the encoder's padded rows, and the rows
  past its output, are the embedding of the padding token (the text vocabulary's last id,
  through ``embed_audio``'s hard path). They replace the audio placeholders in order. A
  config whose last id is outside ``embed_audio``'s table (transformers cannot take its
  audio) builds no audio graph, its ``audio_tower`` weights ignored, and says so.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, Linear, RMSNorm, module_scope
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_text.models.gemma3n_text import rms_normalize
from mobius_vision.config import VisionLanguageConfig, composed_config
from mobius_vision.models._compose import embeddings_given, merge_image_features
from mobius_vision.models._gemma3n_audio import Gemma3nAudioConfig, Gemma3nAudioEncoder
from mobius_vision.models._mobilenetv5 import MobileNetV5Config, TimmWrapper, _tokens
from mobius_vision.models._vl import VisionLanguageModel, flatten_images, text_decoder

logger = logging.getLogger("mobius")


@dataclass
class EmbedderConfig:
    """One modality's embedder: its token range in the shared vocabulary and its width."""

    hidden_size: int
    vocab_offset: int
    vocab_size: int
    eps: float

    @classmethod
    def from_hf(cls, sub_config: Any, name: str) -> EmbedderConfig:
        fields = {
            "hidden_size": sub_config.hidden_size,
            "vocab_offset": sub_config.vocab_offset,
            "vocab_size": sub_config.vocab_size,
        }
        for field, value in fields.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"gemma3n: {name}_config.{field} {value!r} is not a count")
        return cls(**fields, eps=float(sub_config.rms_norm_eps))

    def holds(self, token_id: int) -> bool:
        """Whether ``token_id`` is in the modality's range (its table has a row for it)."""
        return self.vocab_offset <= token_id < self.vocab_offset + self.vocab_size


@dataclass
class Gemma3nConfig(VisionLanguageConfig):
    vision_embedder: EmbedderConfig | None = None
    audio_embedder: EmbedderConfig | None = None
    vision_soft_tokens_per_image: int = 256
    audio: Gemma3nAudioConfig | None = None
    audio_token_id: int = 0
    #: The tokens every clip gives (the processor's ``audio_seq_length``).
    audio_soft_tokens_per_image: int = 188
    #: The id whose ``embed_audio`` hard embedding pads each clip's tokens (the text
    #: vocabulary's last, as transformers; outside that table: no audio graph).
    audio_padding_id: int = 0
    text_head_applied: ClassVar[tuple[str, ...]] = ("final_logit_softcapping",)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        """The tower config is read here (no registered family owns ``gemma3n_vision``)."""
        vision = MobileNetV5Config.from_hf(hf_config.vision_config)
        tokens = hf_config.vision_soft_tokens_per_image
        if tokens != vision.msfa_output_resolution**2:
            raise ConfigError(
                f"gemma3n: vision_soft_tokens_per_image {tokens} is not the tower's "
                f"{vision.msfa_output_resolution}x{vision.msfa_output_resolution} output"
            )
        return dict(
            model_type=hf_config.model_type,
            vision=vision,
            text=composed_config(cls.text_hf_config(hf_config)),
            image_token_id=int(hf_config.image_token_id),
            vision_embedder=EmbedderConfig.from_hf(hf_config.vision_config, "vision"),
            audio_embedder=EmbedderConfig.from_hf(hf_config.audio_config, "audio"),
            vision_soft_tokens_per_image=tokens,
            audio=Gemma3nAudioConfig.from_hf(hf_config.audio_config),
            audio_token_id=_count(hf_config, "audio_token_id"),
            audio_soft_tokens_per_image=_count(hf_config, "audio_soft_tokens_per_image"),
            audio_padding_id=_audio_padding_id(hf_config),
        )


def _count(hf_config: Any, name: str) -> int:
    value = getattr(hf_config, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"gemma3n: {name} {value!r} is not a count")
    return value


def _audio_padding_id(hf_config: Any) -> int:
    """The text vocabulary's last id, which transformers embeds with ``embed_audio``'s table
    to pad each clip's tokens; where it is outside that table, transformers cannot take
    audio and the build holds no audio graph (said here, once)."""
    padding = _count(hf_config.text_config, "vocab_size") - 1
    if not EmbedderConfig.from_hf(hf_config.audio_config, "audio").holds(padding):
        logger.warning(
            "gemma3n: the text vocabulary's last id %d (which pads each clip's audio tokens) "
            "is outside embed_audio's table: no audio graph, audio_tower weights ignored",
            padding,
        )
    return padding


class Gemma3nMultimodalEmbedder(nn.Module):
    """A modality's tokens into the text width: ``"soft"`` (encoder states) or ``"hard"`` (ids).

    Called as ``embedder(op, "soft", states)`` or ``embedder(op, "hard", input_ids,
    inputs_embeds)`` (the rows whose ids are in the modality's range replaced), so its
    parameters keep their names.
    """

    def __init__(self, config: EmbedderConfig, text_hidden: int) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.embedding = Embedding(config.vocab_size, hidden)
        self.hard_embedding_norm = RMSNorm(hidden, config.eps)
        self.soft_embedding_norm = RMSNorm(hidden, config.eps)
        self.embedding_projection = Linear(hidden, text_hidden, bias=False)
        self.config = config

    def forward(self, op, kind: str, *args):
        return {"soft": self.soft, "hard": self.hard}[kind](op, *args)

    def project(self, op, normed):
        return rms_normalize(op, self.embedding_projection(op, normed), self.config.eps)

    def soft(self, op, states):
        return self.project(op, self.soft_embedding_norm(op, states))

    def hard(self, op, input_ids, inputs_embeds):
        c = self.config
        first, last = c.vocab_offset, c.vocab_offset + c.vocab_size
        mine = op.And(op.GreaterOrEqual(input_ids, first), op.Less(input_ids, last))
        # other ids read the table's last row, as transformers' dummy token does; unused
        embedded = self.by_id(op, op.Where(mine, input_ids, op.Constant(value_int=last - 1)))
        return op.Where(op.Unsqueeze(mine, [-1]), embedded, inputs_embeds)

    def by_id(self, op, ids):
        """The embeddings of ``ids``, all in the modality's range."""
        rows = op.Sub(ids, op.Constant(value_int=self.config.vocab_offset))
        return self.project(op, self.hard_embedding_norm(op, self.embedding(op, rows)))


@contextlib.contextmanager
def per_layer_rows_given(decoder: nn.Module, rows) -> Iterator:
    """Within the block, the decoder's per-layer table returns ``rows`` (looked up by the
    embedding graph, which has the ids) instead of reading its input."""
    table = decoder.model.embed_tokens_per_layer
    object.__setattr__(table, "forward", lambda op, ids: rows)
    try:
        yield
    finally:
        object.__delattr__(table, "forward")


class Gemma3nForConditionalGeneration(VisionLanguageModel):
    """``vision_tower`` (timm MobileNet-V5), ``audio_tower``, ``embed_vision``, ``embed_audio``,
    ``language_model`` (module docstring)."""

    task = "audio-vision-language"
    config_class = Gemma3nConfig
    renames: ClassVar[dict[str, str]] = {
        "model.vision_tower.": "vision_tower.",
        "model.audio_tower.": "audio_tower.",
        "model.embed_vision.": "embed_vision.",
        "model.embed_audio.": "embed_audio.",
        "model.language_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def __init__(self, config: Gemma3nConfig) -> None:
        Model.__init__(self)
        self.config = config
        self.vision_tower = TimmWrapper(config.vision)
        text_hidden = config.text.hidden_size
        self.embed_vision = Gemma3nMultimodalEmbedder(config.vision_embedder, text_hidden)
        self.embed_audio = Gemma3nMultimodalEmbedder(config.audio_embedder, text_hidden)
        self.audio_tower = Gemma3nAudioEncoder(config.audio)
        self.language_model = text_decoder(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        channels = self.config.vision.num_channels
        return [("pixel_values", dtype, ["num_images", channels, "height", "width"])]

    def vision_modules(self) -> list[nn.Module]:
        return [self.vision_tower, self.embed_vision]

    def image_features(self, op, pixel_values):
        hidden = self.config.vision.hidden_size
        tokens = _tokens(op, self.vision_tower(op, pixel_values))  # [images, r * r, hidden]
        # float32 as transformers rounds it, in the build's dtype
        scale = op.CastLike(op.Constant(value=ir.tensor(np.float32(hidden**0.5))), tokens)
        return flatten_images(op, self.embed_vision(op, "soft", op.Mul(tokens, scale)))

    @property
    def hears(self) -> bool:
        """Whether the audio padding id is in ``embed_audio``'s range (the hub's layout);
        transformers cannot take audio otherwise, and the build holds no audio graph."""
        return self.config.audio_embedder.holds(self.config.audio_padding_id)

    def audio_modules(self) -> list[nn.Module]:
        """The audio tower and its embedder; none where the audio cannot be padded."""
        return [self.audio_tower, self.embed_audio] if self.hears else []

    def audio_inputs(self, dtype) -> list[tuple]:
        frames = ["num_audios", "audio_frames"]
        return [
            ("input_features", dtype, [*frames, self.config.audio.input_feat_size]),
            ("input_features_mask", ir.DataType.INT64, frames),
        ]

    def audio_outputs(self) -> list[tuple]:
        return [("audio_features", ["num_audio_tokens", self.config.text.hidden_size])]

    def audio_features(self, op, input_features, input_features_mask):
        """``audio_soft_tokens_per_image`` tokens per clip ``[clips * tokens, hidden]``: the
        encoder's real rows embedded, the rest the padding token's embedding."""
        c = self.config
        states, valid = self.audio_tower(
            op, input_features, op.Cast(input_features_mask, to=ir.DataType.BOOL)
        )
        embedded = self.embed_audio(op, "soft", states)  # [clips, length, hidden]
        with module_scope(op, self.embed_audio):
            padding = self.embed_audio.by_id(op, op.Constant(value_ints=[c.audio_padding_id]))
        embedded = op.Where(op.Unsqueeze(valid, [-1]), embedded, padding)
        # then as many padding rows as there are tokens (a longer clip would be refused by
        # transformers; the graph keeps its first tokens)
        tokens = c.audio_soft_tokens_per_image
        clips = op.Shape(embedded, start=0, end=1)
        shape = op.Concat(clips, op.Constant(value_ints=[tokens, c.text.hidden_size]), axis=0)
        embedded = op.Concat(embedded, op.Expand(padding, shape), axis=1)
        embedded = op.Slice(
            embedded, op.Constant(value_ints=[0]), op.Constant(value_ints=[tokens]), [1]
        )
        return op.Reshape(embedded, op.Constant(value_ints=[-1, c.text.hidden_size]))

    def embedding_outputs(self) -> list[tuple]:
        text = self.config.text
        shape = ["batch", "sequence", text.num_hidden_layers, text.hidden_size_per_layer_input]
        return [("per_layer_inputs", shape)]

    def embed(self, op, input_ids, image_features, audio_features=None):
        """Text, vision-range and audio-range embeddings, the images and audio merged; the
        per-layer rows."""
        model = self.language_model.model
        with module_scope(op, self.language_model, model):
            embeds = model.embed_tokens(op, input_ids)  # [batch, sequence, hidden]
            rows = model.embed_tokens_per_layer(op, input_ids)
        embeds = self.embed_vision(op, "hard", input_ids, embeds)
        embeds = self.embed_audio(op, "hard", input_ids, embeds)
        embeds = merge_image_features(
            op, embeds, input_ids, image_features, self.config.image_token_id
        )
        if audio_features is not None:
            embeds = merge_image_features(
                op, embeds, input_ids, audio_features, self.config.audio_token_id
            )
        return embeds, rows

    @property
    def ignored(self) -> tuple[str, ...]:
        if self.hears:
            return super().ignored
        return (*super().ignored, "audio_tower.*", "embed_audio.soft_embedding_norm.*")

    def decode(self, op, inputs_embeds, attention_mask, position_ids, past, per_layer_inputs):
        decoder = self.language_model
        with embeddings_given(op, decoder), per_layer_rows_given(decoder, per_layer_inputs):
            return decoder(op, inputs_embeds, attention_mask, position_ids, past)


MODEL_TYPES = {"gemma3n": Gemma3nForConditionalGeneration}
