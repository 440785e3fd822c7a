"""Gemma 4's images: an aspect-ratio-preserving resize within a patch budget, cut into patches.

Each image is resized (bicubic) to the largest size whose sides are multiples of
``pooling_kernel_size * patch_size`` and whose patches number at most
``max_soft_tokens * pooling_kernel_size^2``, rescaled to [0, 1] (no normalisation), cut
into ``patch_size`` patches row-major (each ``[row, column, channel]`` flattened), and
padded with zero patches to the budget. ``image_position_ids`` hold each patch's
``(column, row)``, ``(-1, -1)`` on padding. In the prompt each image placeholder becomes
``<boi>`` + one image token per pooled patch block + ``<eoi>``; ``mm_token_type_ids``
mark image tokens 1 (video 2, audio 3), as Gemma4Processor returns them.

Audio clips (float32 mono at the feature extractor's ``sampling_rate``) go through
transformers' ``Gemma4AudioFeatureExtractor`` (numpy only), made from the package's
checked settings: log-mel frames ``input_features [clips, frames, mel_bins]``, padded
to the longest clip, and ``input_features_mask [clips, frames]`` (bool, True on real
frames). A clip's audio placeholder becomes ``<boa>`` + one audio token per real frame
the encoder keeps (every second frame, twice) + ``<eoa>``.
"""

from __future__ import annotations

import importlib
import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import (
    BICUBIC,
    flag,
    image_size,
    integer,
    number,
    rescale,
    resize,
)

#: The soft-token budgets transformers' Gemma 4 image processor accepts.
SOFT_TOKEN_BUDGETS = (70, 140, 280, 560, 1120)
#: The audio feature extractor's number settings the processor passes on, checked.
FEATURE_NUMBERS = (
    "padding_value", "frame_length_ms", "hop_length_ms", "min_frequency", "max_frequency",
    "preemphasis", "dither", "input_scale_factor", "mel_floor",
)  # fmt: skip


def budget_size(height: int, width: int, patch: int, max_patches: int, kernel: int):
    """``(height, width)`` Gemma 4 resizes an image to: the ratio kept, sides multiples of
    ``kernel * patch``, at most ``max_patches`` patches."""
    factor = math.sqrt(max_patches * patch**2 / (height * width))
    side = kernel * patch
    target_h = int(math.floor(factor * height / side)) * side
    target_w = int(math.floor(factor * width / side)) * side
    if target_h == 0 and target_w == 0:
        raise MobiusError(f"a {height}x{width} image is too small for Gemma 4's patch grid")
    longest = (max_patches // kernel**2) * side
    if target_h == 0:  # a very wide image: one block high
        target_h, target_w = side, min(int(math.floor(width / height)) * side, longest)
    elif target_w == 0:
        target_w, target_h = side, min(int(math.floor(height / width)) * side, longest)
    if target_h * target_w > max_patches * patch**2:
        raise MobiusError(f"a {height}x{width} image does not fit Gemma 4's {max_patches} patches")
    return target_h, target_w


def patches_of(image: np.ndarray, patch: int) -> np.ndarray:
    """``[c, h, w]`` to ``[patches, patch * patch * c]``, row-major, each patch HWC-flattened."""
    channels, height, width = image.shape
    rows, cols = height // patch, width // patch
    grid = image.reshape(channels, rows, patch, cols, patch).transpose(1, 3, 2, 4, 0)
    return grid.reshape(rows * cols, -1)


class GemmaAudioClips:
    """The audio half of the Gemma processors: clips through transformers' numpy feature
    extractor (``feature_extractor_class``, made from the package's checked settings) into
    ``input_features`` and ``input_features_mask``. The class also says ``audio_token``."""

    feature_extractor_class = (
        "transformers.models.gemma4.feature_extraction_gemma4.Gemma4AudioFeatureExtractor"
    )
    _feature_extractor = None

    @property
    def feature_settings(self) -> dict:
        """The audio feature extractor's settings, nested in the HF processor's."""
        nested = self.settings.processor.get("feature_extractor")
        return nested if isinstance(nested, dict) else {}

    @property
    def sampling_rate(self) -> int:
        """The rate the clips are read at, in Hz."""
        return integer(self.feature_settings, "sampling_rate", 16000, 1000, 192000)

    def with_audio_placeholders(self, prompt: str, count: int) -> str:
        """``prompt`` after one audio placeholder per clip, when it holds none."""
        if count == 0 or self.audio_token in prompt:
            return prompt
        return self.audio_token * count + prompt

    @property
    def feature_extractor(self):
        """transformers' numpy feature extractor (:attr:`feature_extractor_class`) with the
        package's checked settings."""
        if self._feature_extractor is None:
            module, _, name = self.feature_extractor_class.rpartition(".")
            extractor_class = getattr(importlib.import_module(module), name)
            settings = self.feature_settings
            mel_bins = integer(settings, "feature_size", 128, 1, 1024)
            kwargs = {name: number(settings, name, None) for name in FEATURE_NUMBERS}
            kwargs = {name: value for name, value in kwargs.items() if value is not None}
            for name in ("frame_length_ms", "hop_length_ms"):
                if kwargs.get(name, 1.0) <= 0:
                    raise MobiusError(f"setting {name} must be positive, got {kwargs[name]}")
            for name in ("preemphasis_htk_flavor", "fft_overdrive"):
                if name in settings:  # else the extractor's own default
                    kwargs[name] = flag(settings, name, False)
            for name in ("per_bin_mean", "per_bin_stddev"):
                kwargs[name] = _per_bin(settings.get(name), name, mel_bins)
            self._feature_extractor = extractor_class(
                feature_size=mel_bins, sampling_rate=self.sampling_rate, **kwargs
            )
        return self._feature_extractor

    def audio_features(self, clips: list) -> dict[str, np.ndarray]:
        """``input_features`` and ``input_features_mask`` of float32 mono ``clips``."""
        clips = [np.asarray(clip, np.float32).reshape(-1) for clip in clips]
        if any(clip.size == 0 for clip in clips):
            raise MobiusError("an audio clip holds no samples")
        out = self.feature_extractor(clips, return_tensors="np")
        return {
            "input_features": np.asarray(out["input_features"], np.float32),
            "input_features_mask": np.asarray(out["input_features_mask"], bool),
        }


class Gemma4Processor(GemmaAudioClips, ImageTextProcessor):
    """Gemma4Processor over images and audio clips: patches and their positions, log-mel
    frames and their mask, the image and audio blocks in the prompt (module docstring)."""

    image_defaults = dict(resample=BICUBIC)

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<|image|>")

    def _image_setting(self, name: str, default: int, low: int, high: int) -> int:
        return integer(self.image.raw, name, default, low, high)

    def patch_settings(self) -> tuple[int, int, int]:
        """The image processor's ``patch_size``, ``pooling_kernel_size`` and ``max_soft_tokens``, checked."""
        patch = self._image_setting("patch_size", 16, 1, 1024)
        kernel = self._image_setting("pooling_kernel_size", 3, 1, 64)
        budget = self._image_setting("max_soft_tokens", 280, 1, 1 << 16)
        if budget not in SOFT_TOKEN_BUDGETS:
            raise MobiusError(f"max_soft_tokens must be one of {SOFT_TOKEN_BUDGETS}, got {budget}")
        return patch, kernel, budget

    def pixels(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """One image's padded patches, their positions, and its number of soft tokens."""
        return self.cut(image, *self.patch_settings())

    def cut(self, image: np.ndarray, patch: int, kernel: int, budget: int):
        """:meth:`pixels` of ``image``: ``patch`` pixels a side, ``budget`` soft tokens of
        ``kernel x kernel`` patches."""
        max_patches = budget * kernel**2
        size = budget_size(*image_size(image), patch, max_patches, kernel)
        if self.image.do_resize and size != image_size(image):
            image = resize(image, size, self.image.resample)
        if self.image.do_rescale:
            image = rescale(image, self.image.rescale_factor)
        patches = patches_of(image.astype(np.float32), patch)
        rows, cols = image.shape[1] // patch, image.shape[2] // patch
        columns, rows_ = np.meshgrid(np.arange(cols), np.arange(rows), indexing="xy")
        positions = np.stack([columns, rows_], axis=-1).reshape(-1, 2).astype(np.int64)
        pad = max_patches - len(patches)
        patches = np.pad(patches, [(0, pad), (0, 0)])
        positions = np.pad(positions, [(0, pad), (0, 0)], constant_values=-1)
        return patches, positions, (rows * cols) // kernel**2

    # -- audio (GemmaAudioClips) ---------------------------------------------------------

    @property
    def audio_token(self) -> str:
        return self.token_text("audio_token", "<|audio|>")

    def audio_tokens(self, mask: np.ndarray) -> int:
        """The audio tokens of a clip whose frames ``mask`` marks real: the encoder's two
        stride-2 convolutions keep every second frame, twice."""
        return int(mask[::2][::2].sum())

    def with_audio_blocks(self, text: str, audio: dict[str, np.ndarray]) -> str:
        """``text`` with each audio placeholder replaced by its clip's block, in order."""
        begin = self.token_text("boa_token", "<|audio>")
        end = self.token_text("eoa_token", "<audio|>")
        counts = [self.audio_tokens(mask) for mask in audio["input_features_mask"]]
        pieces = text.split(self.audio_token)
        return pieces[0] + "".join(
            f"{begin}{self.audio_token * n}{end}{piece}"
            for n, piece in zip(counts, pieces[1:], strict=True)
        )

    # -- the prompt -----------------------------------------------------------------------

    def __call__(self, text: str, images: list, audios: list = ()) -> dict[str, np.ndarray]:
        """The inputs of ``text``, ``images`` and ``audios`` (float32 mono clips), ``text``
        holding :attr:`image_token` once per image and :attr:`audio_token` once per clip."""
        count = text.count(self.audio_token)
        if count != len(audios):
            raise MobiusError(
                f"the prompt holds {count} {self.audio_token} placeholder(s) for "
                f"{len(audios)} audio clip(s): put one per clip"
            )
        audio = self.audio_features(audios) if audios else {}
        if audio:
            text = self.with_audio_blocks(text, audio)
        return {**self.image_inputs(text, images), **audio}

    def image_inputs(self, text: str, images: list) -> dict[str, np.ndarray]:
        """The ids of ``text`` with its image blocks, the token types, patches and positions."""
        self.count_placeholders(text, images)
        pixels = [self.pixels(image) for image in self.arrays(images)]
        begin = self.token_text("boi_token", "<|image>")
        end = self.token_text("eoi_token", "<image|>")
        blocks = [f"{begin}{self.image_token * tokens}{end}" for *_, tokens in pixels]
        inputs = self.tokenize(self.expand(text, blocks))
        inputs["mm_token_type_ids"] = self.token_types(inputs["input_ids"])
        if pixels:
            inputs["pixel_values"] = np.stack([p for p, _, _ in pixels])
            inputs["image_position_ids"] = np.stack([q for _, q, _ in pixels])
        return inputs

    def token_types(self, input_ids: np.ndarray) -> np.ndarray:
        """1 on image tokens, 2 on video tokens, 3 on audio tokens, else 0."""
        types = np.zeros_like(input_ids)
        # Gemma4Processor adds the video token itself, under this name
        tokens = (self.image_token, "<|video|>", getattr(self.tokenizer, "audio_token", None))
        for kind, token in enumerate(tokens, 1):
            token_id = self.tokenizer.convert_tokens_to_ids(token) if token else None
            if token_id is not None and token_id != self.tokenizer.unk_token_id:
                types[input_ids == token_id] = kind
        return types


def _per_bin(value, name: str, mel_bins: int) -> list[float] | None:
    """A per-mel-bin setting (``per_bin_mean``...): null, or ``mel_bins`` finite numbers."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != mel_bins
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        or not np.isfinite(value).all()
    ):
        raise MobiusError(f"setting {name} must be a list of {mel_bins} finite numbers")
    return [float(v) for v in value]
