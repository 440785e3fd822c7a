"""The base of every family's processor: settings, tokenizer, the prompt's image placeholders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import ImageSettings, to_chw
from mobius_vision.processing._settings import PackageSettings, load_tokenizer, read_settings


class ImageTextProcessor:
    """A vision–language family's processor, torch-free: what transformers' processor
    returns with ``return_tensors="np"``, from the settings a built package holds.

    A family subclasses it and implements :meth:`__call__`; M-RoPE families also
    :meth:`rope_positions`. ``image_token`` is the placeholder a prompt holds once per
    image; ``image_defaults`` the family image processor's defaults for the fields
    :class:`ImageSettings` reads (where ``preprocessor_config.json`` lacks them).
    """

    image_token = "<image>"
    image_defaults: dict[str, Any] = {}
    #: Whether the tokenizer adds its special tokens (BOS); the runner clears it for a
    #: prompt its chat template wrote them into, as transformers' apply_chat_template does.
    add_special_tokens = True
    #: The position of the first token: 1 where the family's generate counts from 1 (PaliGemma).
    first_position = 0

    def __init__(self, tokenizer, image: ImageSettings, settings: PackageSettings) -> None:
        self.tokenizer = tokenizer
        self.image = image
        self.settings = settings

    @classmethod
    def from_package(cls, package_dir: str | Path, tokenizer=None):
        """The processor of the package at ``package_dir`` (``tokenizer``: already loaded)."""
        settings = read_settings(package_dir)
        image = ImageSettings.from_dict(settings.image, **cls.image_defaults)
        return cls(tokenizer or load_tokenizer(package_dir), image, settings)

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        """The model inputs of ``text`` (holding :attr:`image_token` once per image) and
        ``images`` (PIL images or uint8 arrays): input_ids, attention_mask, pixel_values..."""
        raise NotImplementedError

    def rope_positions(self, inputs: dict[str, np.ndarray]):
        """``(positions [3, 1, sequence], deltas [1, 1])`` for M-RoPE families, else None."""
        return None

    def reference_inputs(self, inputs: dict) -> dict:
        """``inputs`` (arrays or tensors, by the graphs' names) as transformers' model takes
        them, for ``--validate``: the same, where the graphs take the processor's names."""
        return inputs

    # -- helpers for the families -------------------------------------------------------

    def processor_setting(self, name: str, default=None):
        """A raw value of the HF processor's settings (check its type before use)."""
        value = self.settings.processor.get(name)
        return default if value is None else value

    def config_value(self, name: str, default=None, *, section: str | None = None):
        """A raw value of config.json (of its ``section``, e.g. ``"vision_config"``)."""
        config = self.settings.config
        if section is not None:
            config = config.get(section)
            config = config if isinstance(config, dict) else {}
        value = config.get(name)
        return default if value is None else value

    def token_text(self, attribute: str, default: str) -> str:
        """A named special token of the tokenizer (``tokenizer.boi_token``...), else ``default``."""
        value = getattr(self.tokenizer, attribute, None)
        return value if isinstance(value, str) and value else default

    def token_id(self, token: str) -> int:
        """The id of ``token``, which must be in the vocabulary."""
        token_id = self.tokenizer.convert_tokens_to_ids(token)
        if token_id is None or token_id == self.tokenizer.unk_token_id:
            raise MobiusError(f"the tokenizer has no {token!r} token")
        return int(token_id)

    @staticmethod
    def arrays(images: list) -> list[np.ndarray]:
        """Each image as ``[3, height, width]`` uint8 RGB."""
        return [to_chw(image) for image in images]

    def count_placeholders(self, text: str, images: list) -> int:
        """How many :attr:`image_token` ``text`` holds; it must be one per image."""
        count = text.count(self.image_token)
        if count != len(images):
            raise MobiusError(
                f"the prompt holds {count} {self.image_token} placeholder(s) for "
                f"{len(images)} image(s): put one per image"
            )
        return count

    def expand(self, text: str, expansions: list[str]) -> str:
        """``text`` with the i-th :attr:`image_token` replaced by ``expansions[i]``."""
        pieces = text.split(self.image_token)
        if len(pieces) != len(expansions) + 1:
            raise MobiusError(
                f"the prompt holds {len(pieces) - 1} {self.image_token} placeholder(s) for "
                f"{len(expansions)} image(s)"
            )
        out = [pieces[0]]
        for expansion, piece in zip(expansions, pieces[1:], strict=True):
            out += [expansion, piece]
        return "".join(out)

    def with_placeholders(self, prompt: str, count: int) -> str:
        """``prompt`` for ``count`` images when it holds no placeholder: one
        :attr:`image_token` per image, then a newline, before it."""
        if count == 0 or self.image_token in prompt:
            return prompt
        return self.image_token * count + "\n" + prompt

    def tokenize(self, text: str) -> dict[str, np.ndarray]:
        """``input_ids`` and ``attention_mask`` int64 ``[1, n]`` of ``text``
        (special tokens as :attr:`add_special_tokens` says)."""
        ids = self.tokenizer(text, add_special_tokens=self.add_special_tokens)["input_ids"]
        ids = np.asarray([ids], dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}
