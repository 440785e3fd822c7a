"""``mobius generate PKG PROMPT --image FILE`` for image-to-text packages, without torch.

An image-to-text package (:mod:`mobius_vision.tasks.image_to_text`) encodes the one
image once, which also gives every decoder layer's cross-attention cache; the
decoder then starts from ``decoder_start_token_id``, followed by the PROMPT's tokens
when it is not empty (a task prompt), and runs greedily (or sampled) through its
cache: core's :class:`~mobius.generate.Seq2SeqGenerator` with an image for a source.
(BLIP starts from its text config's ``bos_token_id`` and stops at its ``sep_token_id``,
as its ``generate`` does: :class:`Family`.)
The encoder's feeds (pixels, or Pix2Struct's patch list and mask) are made by the
family's image processing (:data:`FAMILIES`) from the package's
``preprocessor_config.json``, with the shared torch-free operations of
:mod:`mobius_vision.processing._image`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import (
    ORT_FLOAT_TYPES,
    GenerationStats,
    PackageError,
    Seq2SeqGenerator,
    force_token,
    stream_to_stdout,
)
from mobius_vision.processing._image import BILINEAR, ImageSettings, open_image, to_chw
from mobius_vision.processing._settings import read_json_object


def encoder_decoder_pixels(settings: dict) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """A vision encoder–decoder's image processor: Donut's (by ``image_processor_type``),
    else ``ViTImageProcessor``'s (TrOCR's): resize to ``size`` (bilinear), rescale, normalise."""
    kind = settings.get("image_processor_type")
    if isinstance(kind, str) and kind.startswith("Donut"):
        from mobius_vision.processing.donut import DonutPixels

        return DonutPixels(settings)
    image = ImageSettings.from_dict(settings, resample=BILINEAR)
    return lambda chw: {"pixel_values": image.standard(chw)[None]}


def pix2struct_patches(settings: dict) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """Pix2Struct's padded patch list and its mask (:mod:`mobius_vision.processing.pix2struct`)."""
    from mobius_vision.processing.pix2struct import Pix2StructPatches

    return Pix2StructPatches(settings)


def blip_pixels(settings: dict) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """BLIP's image processor: resize to ``size`` (bicubic), rescale, normalise (CLIP's)."""
    from mobius_vision.processing.blip_2 import BLIP_DEFAULTS

    image = ImageSettings.from_dict(settings, **BLIP_DEFAULTS)
    return lambda chw: {"pixel_values": image.standard(chw)[None]}


@dataclass(frozen=True)
class Family:
    """How the runner feeds a family: its image processing (``preprocessor_config.json``'s
    settings → one ``[3, h, w]`` uint8 image → the encoder's feeds), the config.json
    section that holds the decoder's settings, and whether the decoder masks the source."""

    processor: Callable[[dict], Callable[[np.ndarray], dict[str, np.ndarray]]]
    encoder_inputs: frozenset[str]
    decoder_section: str
    masks_source: bool = False
    #: The decoder section's key of the token decoding starts from, where the family's
    #: generate reads its own (BLIP's ``bos_token_id``, its ``[DEC]``); None: the usual
    #: ``decoder_start_token_id``.
    start_key: str | None = None
    #: The decoder section's key of the token decoding stops at, where the family's generate
    #: passes its own (BLIP's ``sep_token_id``); None: the package's ``eos_token_id``.
    end_key: str | None = None


#: The families the runner feeds, by the package's ``config.json`` model_type.
FAMILIES = {
    "vision-encoder-decoder": Family(
        encoder_decoder_pixels, frozenset({"pixel_values"}), "decoder"
    ),
    "pix2struct": Family(
        pix2struct_patches,
        frozenset({"flattened_patches", "attention_mask"}),
        "text_config",
        masks_source=True,
    ),
    "blip": Family(
        blip_pixels,
        frozenset({"pixel_values"}),
        "text_config",
        start_key="bos_token_id",
        end_key="sep_token_id",
    ),
}


def is_token_id(value) -> bool:
    """Whether a config value is a token id (a non-negative int, not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_image_to_text_package(package_dir: str | os.PathLike) -> bool:
    """Whether ``package_dir`` holds an encoder–decoder over images that this runner can feed."""
    package = Path(package_dir)
    if not (package / "encoder" / "model.onnx").is_file():
        return False
    try:
        config = read_json_object(package / "config.json")
    except MobiusError:
        return False
    return config.get("model_type") in FAMILIES


class ImageToTextGenerator(Seq2SeqGenerator):
    """An image-to-text package in ONNX Runtime: one image in, its text out."""

    contract = "image-to-text"

    def __init__(self, package_dir, image: str | os.PathLike, **options) -> None:
        package = Path(package_dir)
        family = FAMILIES.get(read_json_object(package / "config.json").get("model_type"))
        if family is None:
            raise PackageError(f"{package} is not an image-to-text package mobius runs")
        self.family = family
        # What core's contract check compares the graphs with.
        self.encoder_inputs = family.encoder_inputs
        masked = {"encoder_attention_mask"} if family.masks_source else set()
        self.decoder_source_inputs = frozenset(masked)
        super().__init__(package_dir, **options)
        self.image = image
        settings = read_json_object(self.package_dir / "preprocessor_config.json")
        self.processor = family.processor(settings)

    def _decoder_setting(self, key: str) -> int | None:
        """An int of config.json's decoder section (``max_position_embeddings``...), checked."""
        decoder = self.config.get(self.family.decoder_section)
        value = decoder.get(key) if isinstance(decoder, dict) else None
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            section = self.family.decoder_section
            raise PackageError(
                f"config.json's {section}.{key} is not a non-negative int: {value!r}"
            )
        return value

    def encode_prompt(self, prompt: str, *, chat_template=True, system=None) -> list[int]:
        """The decoder's prompt as transformers' ``generate`` makes it from ``prompt``'s
        tokens: the start token alone for "", the start token put before tokens that do
        not begin with it, except for Donut, whose task prompt (``<s_cord-v2>``...) is the
        start."""
        if system is not None:
            raise MobiusError("--system does not apply to an image-to-text package")
        key = self.family.start_key or "decoder_start_token_id"
        # a family's own key is its decoder section's alone; the usual one may be top-level
        start = None if self.family.start_key else self._setting(key)
        if start is None:
            start = self._decoder_setting(key)
        if not is_token_id(start):
            raise PackageError(f"config.json has no {key}: cannot start decoding")
        task = self.tokenizer(prompt, add_special_tokens=False)["input_ids"] if prompt else []
        if not task:
            return [start]
        if self.prompt_is_the_start() or task[0] == start:
            return list(task)
        return [start, *task]

    @property
    def eos_token_ids(self) -> list[int]:
        """The family's own end token (:attr:`Family.end_key`), else the package's."""
        if self.family.end_key is None:
            return super().eos_token_ids
        end = self._decoder_setting(self.family.end_key)
        return [] if end is None else [end]

    def prompt_is_the_start(self) -> bool:
        """Whether the encoder is Donut's (transformers' ``generate`` then prepends nothing)."""
        encoder = self.config.get("encoder")
        kind = encoder.get("model_type") if isinstance(encoder, dict) else None
        return isinstance(kind, str) and "donut" in kind.lower()

    def forced_tokens(self) -> list:
        """``forced_bos_token_id`` and ``forced_eos_token_id`` of generation_config.json, as
        transformers' ``generate`` applies them (mBART decoders force the end token)."""
        processors = []
        forced_bos = self._setting("forced_bos_token_id")
        if is_token_id(forced_bos):
            processors.append(force_token(forced_bos, at="first"))
        forced_eos = self._setting("forced_eos_token_id")
        if isinstance(forced_eos, list) and forced_eos:
            forced_eos = forced_eos[0]  # transformers forces the first
        if is_token_id(forced_eos):
            processors.append(force_token(forced_eos, at="last"))
        return processors

    def encoder_feeds(self) -> dict[str, np.ndarray]:
        """The encoder's feeds of :attr:`image` (``pixel_values`` [1, 3, height, width]...),
        floats in the encoder's input type."""
        feeds = self.processor(to_chw(open_image(self.image)))
        types = {i.name: i.type for i in self.encoder.get_inputs()}
        return {
            name: value.astype(ORT_FLOAT_TYPES[types[name]], copy=False)
            if types[name] in ORT_FLOAT_TYPES
            else value
            for name, value in feeds.items()
        }

    def generate_ids(
        self,
        prompt_ids: Sequence[int],
        *,
        max_new_tokens: int = 128,
        eos_token_ids: Iterable[int] | None = None,
        **sampling,
    ) -> Iterator[int]:
        """Yield the decoder's new token ids after ``prompt_ids`` (start token first)."""
        stats = self.stats = GenerationStats(prompt_tokens=len(prompt_ids))
        started = time.perf_counter()
        feeds = self.encoder_feeds()
        encoded = self.encoder.run(None, feeds)
        source = self._cross_cache(encoded)
        if self.family.masks_source:
            source["encoder_attention_mask"] = feeds["attention_mask"]
        context = self._decoder_setting("max_position_embeddings")
        room = context - len(prompt_ids) + 1 if context else None
        if room is not None and room < 1:
            raise MobiusError(
                f"the prompt has {len(prompt_ids)} tokens; the decoder takes {context}"
            )
        yield from self._run_loop(
            self.decoder_step(source),
            list(prompt_ids),
            processors=self.forced_tokens(),
            stats=stats,
            started=started,
            room=room,
            eos_token_ids=eos_token_ids,
            max_new_tokens=max_new_tokens,
            **sampling,
        )


def run_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """The ``mobius generate`` runner of image-to-text packages: one ``--image``, text out."""
    images = options.get("images") or []
    if len(images) != 1:
        raise MobiusError(
            f"an image-to-text package reads one image: give --image FILE once (got {len(images)})"
        )
    generator = ImageToTextGenerator(package_dir, images[0], threads=options.get("threads"))
    return stream_to_stdout(generator, prompt, options)
