"""Phi-4-multimodal's inputs: the HD crops of each image, its global view, their patch
masks; the log-mel features of each audio clip.

transformers has this image processor on its torchvision backend only; here it is
numpy, with torchvision's arithmetic where it resizes (:mod:`._antialias` for the
bilinear resize of the uint8 image, :func:`torch_bicubic` for the global view).

Each image is resized (aspect kept) into a grid of ``size x size`` crops, padded white
on the right and bottom; the grid is the image's own size in crops, or, past
``dynamic_hd`` crops, the grid of closest aspect ratio. Its outputs (per image, padded
to the batch's most crops): ``image_pixel_values`` (the global view, then the crops
row by row), ``image_attention_mask`` (the real patches of each), ``image_sizes``
(the grid's size in pixels); the prompt's placeholder becomes one image token per
feature the model makes (global view and real sub-grid, rows ended, one separator).

Each audio clip (float32 mono at ``sampling_rate``) becomes what transformers'
``Phi4MultimodalFeatureExtractor`` computes (with PyTorch; here numpy, in the same
precisions): windows of ``win_length`` samples every ``hop_length``, pre-emphasis,
a Hamming window, the power spectrum, a Kaldi mel filter bank, the log (floored at
1). Clips are padded to the longest; the frames of a shorter clip between its last
whole window and its end are zeroed, as transformers zeroes them. Outputs, under the
names of the audio graph: ``input_features [clips, frames, mel_bins]``,
``feature_attention_mask [clips, frames]`` (bool), ``audio_sizes`` (each clip's
tokens: its frames over ``audio_compression_rate``, rounded up) and
``audio_projection_mode`` (1 when the prompt has images, else 0); the clip's
placeholder becomes that many audio tokens.
"""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._antialias import resize_antialiased
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import integer, number

_CUBIC_A = -0.75  # PyTorch's bicubic


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """``[n, 4]`` float32: PyTorch's cubic convolution weights at fractions ``t``."""
    a = np.float32(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one = np.float32(1)
    return np.stack([far(t + one), near(t), near(one - t), far(2 - t)], axis=1)


def _bicubic_axis(image: np.ndarray, out_size: int, axis: int) -> np.ndarray:
    in_size = image.shape[axis]
    scale = np.float32(in_size) / np.float32(out_size)
    source = scale * (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) - np.float32(0.5)
    first = np.floor(source)
    weights = _cubic_weights((source - first).astype(np.float32))  # [out, 4]
    index = np.clip(first.astype(np.int64)[:, None] + np.arange(-1, 3), 0, in_size - 1)
    taps = np.take(image, index, axis=axis)  # axis -> (out, 4)
    shape = [1] * taps.ndim
    shape[axis], shape[axis + 1] = out_size, 4
    return (taps * weights.reshape(shape)).sum(axis=axis + 1, dtype=np.float32)


def torch_bicubic(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A float32 ``[c, h, w]`` image resized as ``torch.nn.functional.interpolate(...,
    mode="bicubic", align_corners=False, antialias=False)`` does (edge pixels repeated)."""
    image = _bicubic_axis(image.astype(np.float32), size[1], 2)
    return _bicubic_axis(image, size[0], 1)


def closest_aspect_ratio(height: int, width: int, tile: int, max_crops: int) -> tuple[int, int]:
    """``(columns, rows)`` of at most ``max_crops`` crops whose ratio is closest to the image's;
    a tie goes to the larger grid when the image covers over half of it (transformers' rule)."""
    ratios = {
        (i, j)
        for n in range(1, max_crops + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if i * j <= max_crops
    }
    aspect, best, best_diff = width / height, (1, 1), float("inf")
    for ratio in sorted(ratios, key=lambda r: r[0] * r[1]):
        diff = abs(aspect - ratio[0] / ratio[1])
        if diff < best_diff:
            best, best_diff = ratio, diff
        elif diff == best_diff and width * height > 0.5 * tile * tile * ratio[0] * ratio[1]:
            best = ratio
    return best


def hd_canvas(height: int, width: int, tile: int, patch: int, max_crops: int):
    """``(grid (columns, rows), resized (height, width), patch mask [rows*m, columns*m])`` of
    an image: the canvas of crops it fills, aspect kept, and which patches are real."""
    columns, rows = math.ceil(width / tile), math.ceil(height / tile)
    if columns * rows > max_crops:
        columns, rows = closest_aspect_ratio(height, width, tile, max_crops)
    target_h, target_w = tile * rows, tile * columns
    if target_w / width < target_h / height:
        resized = (int(height * (target_w / width)), target_w)
    else:
        resized = (target_h, int(width * (target_h / height)))
    if min(resized[0], target_h) < 10 or min(resized[1], target_w) < 10:
        raise MobiusError(f"image of {height}x{width}: the aspect ratio is too extreme")
    side = tile // patch
    mask = np.ones((side * rows, side * columns), np.float32)
    pad_h, pad_w = target_h - resized[0], target_w - resized[1]
    if pad_w >= patch:
        mask[:, mask.shape[1] - pad_w // patch :] = 0
    if pad_h >= patch:
        mask[mask.shape[0] - pad_h // patch :, :] = 0
    return (columns, rows), resized, mask


class Phi4MultimodalProcessor(ImageTextProcessor):
    """Phi4MultimodalProcessor's images and prompt (module docstring)."""

    image_defaults = dict(size={"height": 448, "width": 448})

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<|endoftext10|>")

    @property
    def tile(self) -> int:
        size = self.image.size
        if size.get("height") != size.get("width") or not size.get("height"):
            raise MobiusError(f"Phi-4-multimodal's crops are square; size is {size}")
        return size["height"]

    def preprocess(self, image: np.ndarray):
        """``(crops [1 + n, 3, s, s] float32, mask [1 + n, m, m], size (h, w), tokens)`` of one
        ``[3, h, w]`` uint8 image: the global view first."""
        tile = self.tile
        patch = integer(self.image.raw, "patch_size", 14, 1, tile)
        max_crops = integer(self.image.raw, "dynamic_hd", 36, 1, 1 << 10)
        if tile % patch:
            raise MobiusError(f"crop size {tile} is not a multiple of patch_size {patch}")
        (columns, rows), resized, mask = hd_canvas(*image.shape[1:], tile, patch, max_crops)
        canvas = np.full((3, tile * rows, tile * columns), 255, np.uint8)
        canvas[:, : resized[0], : resized[1]] = resize_antialiased(image, resized)
        # transformers fuses rescale and normalise: (x - mean / factor) / (std / factor)
        factor = np.float32(1.0 / self.image.rescale_factor)
        mean = np.float32(self.image.image_mean) * factor
        std = np.float32(self.image.image_std) * factor
        pixels = (canvas.astype(np.float32) - mean[:, None, None]) / std[:, None, None]
        crops = pixels.reshape(3, rows, tile, columns, tile).transpose(1, 3, 0, 2, 4)
        glance = torch_bicubic(pixels, (tile, tile))
        crops = np.concatenate([glance[None], crops.reshape(-1, 3, tile, tile)])
        side = tile // patch
        tiles = (
            mask.reshape(rows, side, columns, side).transpose(0, 2, 1, 3).reshape(-1, side, side)
        )
        masks = np.concatenate([np.ones((1, side, side), np.float32), tiles])
        # the model's tokens: global view (rows ended), separator, real sub-grid (rows ended)
        base = side // 2 + side % 2
        real = tiles[:, ::2, ::2].reshape(rows, columns, base, base).transpose(0, 2, 1, 3)
        real = real.reshape(rows * base, columns * base)
        tokens = base * base + 1 + int(real.sum()) + int(real[:, 0].sum()) + base
        return crops, masks, (tile * rows, tile * columns), tokens

    @staticmethod
    def stack(done: list) -> dict[str, np.ndarray]:
        """The images' :meth:`preprocess` outputs as one batch, padded to the most crops
        (all-zero crops, all-real masks, as transformers pads them)."""
        most = max(len(d[0]) for d in done)
        pixels = np.zeros((len(done), most, *done[0][0].shape[1:]), np.float32)
        masks = np.ones((len(done), most, *done[0][1].shape[1:]), np.float32)
        for i, (crops, mask, _, _) in enumerate(done):
            pixels[i, : len(crops)], masks[i, : len(mask)] = crops, mask
        sizes = np.asarray([d[2] for d in done], np.int64)
        return dict(image_pixel_values=pixels, image_sizes=sizes, image_attention_mask=masks)

    # -- audio -------------------------------------------------------------------------

    @property
    def audio_token(self) -> str:
        return self.token_text("audio_token", "<|endoftext11|>")

    @property
    def audio_settings(self) -> dict:
        """The feature extractor's settings: nested in the HF processor's (transformers 5), or
        beside the image processor's in ``preprocessor_config.json``."""
        nested = self.settings.processor.get("audio_processor")
        return nested if isinstance(nested, dict) else self.settings.image

    @property
    def audio(self) -> Phi4MultimodalAudio:
        """The log-mel feature extractor, of the package's checked settings."""
        if getattr(self, "_audio", None) is None:
            self._audio = Phi4MultimodalAudio(self.audio_settings)
        return self._audio

    @property
    def sampling_rate(self) -> int:
        """The rate the clips are read at, in Hz."""
        return self.audio.sampling_rate

    #: the graphs' audio input -> transformers' name of it (module docstring)
    REFERENCE_NAMES = {
        "input_features": "audio_input_features",
        "feature_attention_mask": "audio_attention_mask",
        "audio_sizes": "audio_embed_sizes",
    }

    def reference_inputs(self, inputs: dict) -> dict:
        """``inputs`` as transformers' model takes them: its names, no projection mode (it
        picks the projection by the images), no mask for a lone clip (its processor gives
        none)."""
        inputs = {self.REFERENCE_NAMES.get(k, k): v for k, v in inputs.items()}
        inputs.pop("audio_projection_mode", None)
        mask = inputs.get("audio_attention_mask")
        if mask is not None and len(mask) == 1 and bool(mask.all()):
            del inputs["audio_attention_mask"]
        return inputs

    def with_audio_placeholders(self, prompt: str, count: int) -> str:
        """``prompt`` after one audio placeholder per clip, when it holds none."""
        if count == 0 or self.audio_token in prompt:
            return prompt
        return self.audio_token * count + prompt

    def __call__(self, text: str, images: list, audios: list = ()) -> dict[str, np.ndarray]:
        """The inputs of ``text`` (one :attr:`image_token` per image, one :attr:`audio_token`
        per clip), ``images`` and ``audios`` (float32 mono clips at :attr:`sampling_rate`)."""
        self.count_placeholders(text, images)
        count = text.count(self.audio_token)
        if count != len(audios):
            raise MobiusError(
                f"the prompt holds {count} {self.audio_token} placeholder(s) for "
                f"{len(audios)} audio clip(s): put one per clip"
            )
        audio = self.audio(audios, with_images=bool(images)) if audios else {}
        if audio:
            pieces = text.split(self.audio_token)
            text = pieces[0] + "".join(
                self.audio_token * int(n) + piece
                for n, piece in zip(audio["audio_sizes"], pieces[1:], strict=True)
            )
        done = [self.preprocess(image) for image in self.arrays(images)]
        inputs = self.tokenize(self.expand(text, [self.image_token * d[3] for d in done]))
        return {**inputs, **(self.stack(done) if done else {}), **audio}


#: The feature extractor's int settings: (default, lowest, highest).
AUDIO_INTS = {
    "feature_size": (80, 1, 1024),
    "sampling_rate": (16000, 1000, 192000),
    "hop_length": (160, 1, 1 << 16),
    "n_fft": (512, 2, 1 << 16),
    "win_length": (400, 2, 1 << 16),
    "audio_compression_rate": (8, 1, 1 << 10),
    "audio_downsample_rate": (1, 1, 1 << 10),
    "audio_feat_stride": (1, 1, 1 << 10),
}


class Phi4MultimodalAudio:
    """transformers' ``Phi4MultimodalFeatureExtractor`` in numpy (module docstring)."""

    def __init__(self, settings: dict) -> None:
        for name, (default, low, high) in AUDIO_INTS.items():
            setattr(self, name, integer(settings, name, default, low, high))
        if self.win_length > self.n_fft:
            raise MobiusError(f"win_length {self.win_length} is longer than n_fft {self.n_fft}")
        self.preemphasis = number(settings, "preemphasis", 0.97)
        low = number(settings, "mel_min_frequency", 0.0)
        high = number(settings, "mel_max_frequency", 7690.0)
        if not 0 <= low < high <= self.sampling_rate / 2:
            raise MobiusError(f"mel frequencies [{low}, {high}] do not fit the sampling rate")
        from transformers.audio_utils import mel_filter_bank  # numpy

        self.mel_filters = mel_filter_bank(
            num_frequency_bins=self.n_fft // 2 + 1,
            num_mel_filters=self.feature_size,
            min_frequency=low,
            max_frequency=high,
            sampling_rate=self.sampling_rate,
            triangularize_in_mel_space=True,
            mel_scale="kaldi",
        ).astype(np.float32)

    def frames(self, clips: list[np.ndarray]) -> np.ndarray:
        """``[clips, frames, win_length]`` float32: each clip's windows, padded to the longest."""
        lengths = [clip.size for clip in clips]
        padded = np.zeros((len(clips), max(lengths)), np.float32)
        for row, clip in enumerate(clips):
            padded[row, : clip.size] = clip
        count = (padded.shape[1] - self.win_length) // self.hop_length + 1
        starts = np.arange(count)[:, None] * self.hop_length
        frames = padded[:, starts + np.arange(self.win_length)]
        for row, length in enumerate(lengths):
            if len(clips) > 1 and length != padded.shape[1]:  # transformers' zeroed tail
                whole = (length - self.win_length) // self.hop_length + 1
                frames[row, whole : length // self.hop_length - 1] = 0
        return frames

    def log_mel(self, frames: np.ndarray) -> np.ndarray:
        """``[clips, frames, mel_bins]`` float32 of :meth:`frames` (transformers' precisions)."""
        previous = np.concatenate([frames[..., :1], frames[..., :-1]], axis=-1)
        frames = (frames - self.preemphasis * previous) * 32768  # float32, as in PyTorch
        window = np.hamming(self.win_length)  # float64, symmetric: torch's periodic=False
        spectrum = np.fft.rfft(window * frames, n=self.n_fft, axis=-1).astype(np.complex64)
        power = np.abs(spectrum) ** 2
        return np.log(np.maximum(power @ self.mel_filters, np.float32(1.0)))

    def __call__(self, clips: list, with_images: bool) -> dict[str, np.ndarray]:
        """The audio graph's inputs of float32 mono ``clips`` (module docstring)."""
        clips = [np.asarray(clip, np.float32).reshape(-1) for clip in clips]
        for clip in clips:
            if clip.size < self.win_length:
                raise MobiusError(
                    f"an audio clip of {clip.size} samples is shorter than one window "
                    f"({self.win_length} samples)"
                )
        features = self.log_mel(self.frames(clips))
        lengths = np.asarray([clip.size for clip in clips], np.int64)
        real = ((lengths - self.win_length) // self.hop_length + 1) * self.audio_feat_stride
        sizes = -(-real // self.audio_compression_rate)
        sizes = -(-sizes // self.audio_downsample_rate)
        mask = np.arange(features.shape[1])[None, :] < real[:, None]
        return {
            "input_features": features.astype(np.float32),
            "feature_attention_mask": mask,
            "audio_sizes": sizes.astype(np.int64),
            "audio_projection_mode": np.asarray([1 if with_images else 0], np.int64),
        }
