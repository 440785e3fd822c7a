"""A Bark package's generation settings and voice presets, read and checked.

``generation_config.json`` holds one object per stage (``semantic_config``,
``coarse_acoustics_config``, ``fine_acoustics_config``) with Bark's token offsets,
windows and sampling; a key left out takes transformers' default
(``generation_configuration_bark.py``). A voice preset is a stranger's ``.npz``: its
arrays are checked for type, rank, rows and range before use. Used by
:mod:`mobius_audio.bark_generate`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import sample_next_token
from mobius_audio.tts import _read_json as read_json_object

#: transformers' defaults of each stage's generation config (used where the package's
#: generation_config.json leaves a key out).
SEMANTIC_DEFAULTS = dict(
    eos_token_id=10_000,
    max_new_tokens=768,
    text_encoding_offset=10_048,
    text_pad_token=129_595,
    semantic_infer_token=129_599,
    semantic_vocab_size=10_000,
    max_input_semantic_length=256,
    semantic_rate_hz=49.9,
)
COARSE_DEFAULTS = dict(
    coarse_semantic_pad_token=12_048,
    coarse_rate_hz=75,
    n_coarse_codebooks=2,
    coarse_infer_token=12_050,
    max_coarse_input_length=256,
    max_coarse_history=630,
    sliding_window_len=60,
)
FINE_DEFAULTS = dict(max_fine_history_length=512, max_fine_input_length=1024, n_fine_codebooks=8)
#: Keys that may be real numbers; every other setting is a non-negative integer.
_RATES = ("semantic_rate_hz", "coarse_rate_hz")


def read_optional_json(path: Path) -> dict:
    """The JSON object at ``path``; ``{}`` when the file is absent (then defaults apply)."""
    return read_json_object(path) if path.is_file() else {}


@dataclass
class Sampling:
    """How a stage picks its tokens: greedy, or sampled after temperature, top-k, top-p."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    @classmethod
    def from_config(cls, settings: dict, where: str) -> Sampling:
        temperature = settings.get("temperature")
        temperature = 1.0 if temperature is None else temperature
        top_k, top_p = settings.get("top_k"), settings.get("top_p")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise MobiusError(f"{where}: temperature {temperature!r} is not a number")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)):
            raise MobiusError(f"{where}: top_k {top_k!r} is not an integer")
        if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float))):
            raise MobiusError(f"{where}: top_p {top_p!r} is not a number")
        return cls(bool(settings.get("do_sample")), float(temperature), top_k, top_p)

    def pick(self, logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One token per row of ``logits [batch, vocab]``."""
        return np.array(
            [sample_next_token(row, rng, **vars(self)) for row in logits], dtype=np.int64
        )


@dataclass
class BarkSettings:
    """The three stages' generation settings, checked (``generation_config.json``)."""

    semantic: dict
    coarse: dict
    fine: dict
    codebook_size: int
    sampling: dict[str, Sampling] = field(default_factory=dict)
    fine_temperature: float | None = None

    @classmethod
    def read(cls, package: Path) -> BarkSettings:
        path = package / "generation_config.json"
        config = read_optional_json(path)
        stages = {}
        for key, defaults in (
            ("semantic_config", SEMANTIC_DEFAULTS),
            ("coarse_acoustics_config", COARSE_DEFAULTS),
            ("fine_acoustics_config", FINE_DEFAULTS),
        ):
            given = config.get(key) or {}
            if not isinstance(given, dict):
                raise MobiusError(f"{path}: {key} is not an object")
            stages[key] = {**given, **{k: given.get(k, v) for k, v in defaults.items()}}
            for name in defaults:
                check_setting(stages[key][name], name, path)
        codebook_size = config.get("codebook_size", 1024)
        check_setting(codebook_size, "codebook_size", path)
        semantic, coarse, fine = stages.values()
        fine_temperature = fine.get("temperature", 1.0)
        if fine_temperature is not None and (
            isinstance(fine_temperature, bool)
            or not isinstance(fine_temperature, (int, float))
            or fine_temperature <= 0
        ):
            raise MobiusError(f"{path}: fine temperature {fine_temperature!r} is not positive")
        return cls(
            semantic=semantic,
            coarse=coarse,
            fine=fine,
            codebook_size=codebook_size,
            sampling={
                "semantic": Sampling.from_config(semantic, f"{path} semantic_config"),
                "coarse": Sampling.from_config(coarse, f"{path} coarse_acoustics_config"),
            },
            fine_temperature=fine_temperature,
        )

    def override(
        self,
        temperature: float | None = None,
        do_sample: bool = False,
        top_k: int | None = None,
        top_p: float | None = None,
    ) -> None:
        """The command line's sampling over the config's: ``temperature`` 0 is greedy
        everywhere (the fine stage's argmax too); another samples every stage at it."""
        for sampling in self.sampling.values():
            if temperature is not None:
                sampling.do_sample, sampling.temperature = temperature > 0, temperature
            elif do_sample or top_k is not None or top_p is not None:
                sampling.do_sample = True
            sampling.top_k = sampling.top_k if top_k is None else top_k
            sampling.top_p = sampling.top_p if top_p is None else top_p
        if temperature is not None:
            self.fine_temperature = None if temperature == 0 else temperature


def check_setting(value, name: str, path: Path) -> None:
    kinds = (int, float) if name in _RATES else (int,)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < 0:
        raise MobiusError(f"{path}: {name} {value!r} is not a non-negative number")
    if name in _RATES and value <= 0:
        raise MobiusError(f"{path}: {name} {value!r} must be positive")


@dataclass
class VoicePreset:
    """A Bark speaker prompt: the semantic, coarse and fine codes of a reference clip."""

    semantic_prompt: np.ndarray  # [tokens]
    coarse_prompt: np.ndarray  # [n_coarse_codebooks, frames]
    fine_prompt: np.ndarray  # [n_fine_codebooks, frames]

    @classmethod
    def load(cls, path: str | os.PathLike, settings: BarkSettings) -> VoicePreset:
        """The ``.npz`` at ``path``, each array's type, rank, rows and range checked."""
        path = Path(path)
        if not path.is_file():
            raise MobiusError(f"no such voice preset file: {path}")
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {key: np.asarray(data[key]) for key in data.files}
        except (OSError, ValueError, KeyError) as exc:
            raise MobiusError(f"cannot read {path} as a Bark voice preset (.npz): {exc}") from None
        semantic_vocab = settings.semantic["semantic_vocab_size"]
        size = settings.codebook_size
        rules = {  # name: (rank, rows, exclusive upper bound of the values)
            "semantic_prompt": (1, None, semantic_vocab),
            "coarse_prompt": (2, settings.coarse["n_coarse_codebooks"], size),
            "fine_prompt": (2, settings.fine["n_fine_codebooks"], size),
        }
        for name, (rank, rows, bound) in rules.items():
            value = arrays.get(name)
            if value is None:
                raise MobiusError(f"{path}: the voice preset has no {name}")
            if value.dtype.kind not in "iu" or value.ndim != rank:
                raise MobiusError(
                    f"{path}: {name} must be a {rank}-D integer array, not {value.ndim}-D "
                    f"{value.dtype}"
                )
            if rows is not None and value.shape[0] != rows:
                raise MobiusError(f"{path}: {name} has {value.shape[0]} rows, not {rows}")
            if value.size and (value.min() < 0 or value.max() >= bound):
                raise MobiusError(f"{path}: {name} holds codes outside 0..{bound - 1}")
        return cls(*(arrays[name].astype(np.int64) for name in rules))
