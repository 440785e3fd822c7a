"""Speak text with a CSM package (:mod:`mobius_audio.tasks_csm`): the frame-then-codebook loop.

The prompt is one text turn of the chat template, ``<bos>[speaker]text<eos>`` (the
hub template's rendering of a text-only turn; ``[0]`` is prefixed when the text names
no speaker), tokenized by the package's tokenizer without further special tokens.
Context turns (``--context TEXT AUDIO``) come first, each its text turn, then its
audio as Mimi's frames (``codec_encoder``, the clip resampled to the codec's rate) and
the all-eos frame of ``<|audio_eos|>``, as ``CsmProcessor`` and the model merge them.
Each frame: the backbone's last logits choose codebook 0; the depth decoder, started
from ``[0, code0]`` and the backbone's last hidden state, chooses codebooks 1..K-1
one at a time through its own cache; the frame goes back into the backbone.
Generation stops after ``max_new_tokens`` frames, or once a frame's codebooks
0..K-2 are all ``codebook_eos_token_id``; the audio is the frames before the first
all-eos frame through Mimi (transformers' ``CsmForConditionalGeneration.generate``
with ``output_audio=True``). A row that ended keeps generating until all end.

Choosing: greedy, or seeded numpy sampling (temperature, top-k, top-p: core's
:func:`mobius.generate.sample_next_token`) with the package's
``generation_config.json`` settings, the depth decoder's from its ``depth_decoder_*``
keys. Codes at or above the codec's ``codebook_size`` (CSM's special ids) are never
chosen: Mimi has no rows for them.

Example::

    from mobius_audio.csm_generate import CsmGenerator

    csm = CsmGenerator("csm-out/")
    waveform = csm.speak("[0]Hello from Sesame.", seed=0)

:func:`run_cli` is the ``mobius generate`` runner of the packages :func:`is_csm_package`
accepts. Needs ONNX Runtime and soundfile: ``pip install mobius-audio[run]``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from mobius.classification import open_session
from mobius.errors import MobiusError
from mobius.generate import load_tokenizer, sample_next_token
from mobius_audio.dia_generate import carry_cache, config_int, read_config, run_named

GRAPHS = ("backbone", "depth_decoder", "codec_encoder", "codec_decoder")
DEFAULT_OUTPUT = "speech.wav"
DEFAULT_FRAMES = 125  # 10 s at Mimi's 12.5 frames a second
SPEAKER = re.compile(r"^\[\d+\]")


def is_csm_package(package: str | os.PathLike) -> bool:
    """Whether ``package`` holds CSM's four graphs and a csm ``config.json``."""
    package = Path(package)
    config = read_config(package)
    graphs = all((package / g / "model.onnx").is_file() for g in GRAPHS)
    return graphs and config is not None and config.get("model_type") == "csm"


def _float_type(graph_input) -> type:
    """The numpy type ONNX Runtime feeds a float input with: float32, or float16 (``--dtype f16``)."""
    if graph_input.type == "tensor(float16)":
        return np.float16
    if graph_input.type != "tensor(float)":
        raise MobiusError(
            f"{graph_input.name} is {graph_input.type}: build with --dtype f32 or f16"
        )
    return np.float32


@dataclass
class Sampling:
    """How one stage (backbone or depth decoder) chooses a code."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = 50
    top_p: float | None = 1.0


def sampling_settings(package: Path, prefix: str = "") -> Sampling:
    """``generation_config.json``'s settings (keys ``prefix + name``), transformers' defaults where unset."""
    path = package / "generation_config.json"
    sampling = Sampling()
    if not path.is_file():
        return sampling
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MobiusError(f"cannot read {path}: {exc}") from None
    kinds = {
        "do_sample": (bool,),
        "temperature": (int, float),
        "top_k": (int,),
        "top_p": (int, float),
    }
    for name, types in kinds.items():
        value = config.get(prefix + name) if isinstance(config, dict) else None
        if value is None:
            continue
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise MobiusError(f"{path}: {prefix + name} {value!r} is not a {types[0].__name__}")
        setattr(sampling, name, value)
    if sampling.temperature < 0 or (sampling.top_k or 0) < 0:
        raise MobiusError(f"{path}: {prefix}temperature and {prefix}top_k must be >= 0")
    return sampling


class CsmGenerator:
    """A CSM package in ONNX Runtime: its backbone, depth decoder, Mimi decoder and tokenizer."""

    def __init__(self, package_dir, threads: int | None = None) -> None:
        self.package = Path(package_dir)
        if not is_csm_package(self.package):
            raise MobiusError(
                f"{self.package} is not a CSM package (backbone/, depth_decoder/, "
                "codec_encoder/, codec_decoder/ and a csm config.json)"
            )
        where = str(self.package / "config.json")
        config = read_config(self.package)
        self.num_codebooks = config_int(config, "num_codebooks", 2, where)
        self.vocab_size = config_int(config, "vocab_size", 2, where)
        self.eos = config_int(config, "codebook_eos_token_id", 0, where)
        self.max_positions = config_int(config, "max_position_embeddings", 2, where)
        codec = config.get("codec_config")
        if not isinstance(codec, dict):
            raise MobiusError(f"{where}: codec_config is not a Mimi config")
        self.sampling_rate = config_int(codec, "sampling_rate", 1, where)
        self.codebook_size = min(config_int(codec, "codebook_size", 1, where), self.vocab_size)
        if self.eos >= self.codebook_size:
            raise MobiusError(f"{where}: codebook_eos_token_id {self.eos} is not a codec code")
        self.backbone, self.depth, self.encoder, self.codec = (
            open_session(self.package / g / "model.onnx", threads) for g in GRAPHS
        )
        self._tokenizer = None

    @property
    def tokenizer(self):
        """The package's tokenizer, loaded on first use."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.package)
        return self._tokenizer

    def prompt_ids(self, text: str) -> list[int]:
        """The ids of one text turn: ``<bos>[speaker]text<eos>``, ``[0]`` when no speaker is named."""
        if not text.strip():
            raise MobiusError("the text to speak is empty")
        tokenizer = self.tokenizer
        if tokenizer.bos_token is None or tokenizer.eos_token is None:
            raise MobiusError(f"the tokenizer of {self.package} has no bos or eos token")
        turn = text if SPEAKER.match(text) else "[0]" + text
        ids = tokenizer(tokenizer.bos_token + turn + tokenizer.eos_token, add_special_tokens=False)
        return list(ids["input_ids"])

    def text_rows(self, ids: list[int]) -> np.ndarray:
        """Backbone rows ``[len, K + 1]`` of text tokens: no codes, the token last."""
        rows = np.full((len(ids), self.num_codebooks + 1), -1, np.int64)
        rows[:, -1] = ids
        return rows

    def audio_rows(self, waveform: np.ndarray) -> np.ndarray:
        """Backbone rows of a context clip: Mimi's frames (first ``K`` codebooks), then the
        all-``codebook_eos`` frame that stands for ``<|audio_eos|>``."""
        samples = np.asarray(waveform, _float_type(self.encoder.get_inputs()[0]))[None, None]
        codes = self.encoder.run(["audio_codes"], {"input_values": samples})[0][0]
        frames = np.concatenate([codes[: self.num_codebooks].T, [[self.eos] * self.num_codebooks]])
        return np.concatenate([frames, np.full((len(frames), 1), -1, np.int64)], axis=1)

    def prompt_rows(self, text: str, context=()) -> np.ndarray:
        """The backbone rows of ``context`` turns ``(text, waveform at sampling_rate)``, each its
        text then its audio, followed by the turn ``text`` to speak."""
        parts = []
        for turn_text, waveform in context:
            if len(waveform) < 1:
                raise MobiusError(f"the context audio of {turn_text[:40]!r} is empty")
            parts += [self.text_rows(self.prompt_ids(turn_text)), self.audio_rows(waveform)]
        return np.concatenate([*parts, self.text_rows(self.prompt_ids(text))])

    def _choose(self, logits: np.ndarray, sampling: Sampling, rng) -> np.ndarray:
        """One code per row of ``logits [batch, vocab]``."""
        logits = logits.astype(np.float32, copy=True)
        logits[:, self.codebook_size :] = -np.inf
        return np.array([sample_next_token(row, rng, **vars(sampling)) for row in logits], np.int64)

    def empty_cache(self, session, batch: int) -> dict[str, np.ndarray]:
        """The ``past_key_values.*`` feeds of ``session`` holding nothing yet (a first step)."""
        feeds = {}
        for graph_input in session.get_inputs():
            if graph_input.name.startswith("past_key_values."):
                _, heads, _, dim = graph_input.shape
                feeds[graph_input.name] = np.zeros((batch, heads, 0, dim), _float_type(graph_input))
        return feeds

    def _frame_rest(self, code0, state, sampling: Sampling, rng) -> np.ndarray:
        """Codebooks 1..K-1 after ``code0 [batch]`` from the depth decoder: ``[batch, K]``."""
        feeds = self.empty_cache(self.depth, len(code0))
        feeds["backbone_last_hidden_state"] = state
        codes, step = [code0], np.stack([np.zeros_like(code0), code0], axis=1)
        for _ in range(self.num_codebooks - 1):
            outputs = run_named(self.depth, {**feeds, "input_ids": step})
            carry_cache(feeds, outputs)
            codes.append(self._choose(outputs["logits"][:, -1], sampling, rng))
            step = codes[-1][:, None]
        return np.stack(codes, axis=1)

    def generate_codes(
        self,
        prompts: list[np.ndarray],
        backbone: Sampling,
        depth: Sampling,
        max_new_tokens: int,
        seed: int | None = None,
    ) -> np.ndarray:
        """Frames int64 ``[batch, frames, K]`` after the backbone rows ``prompts`` (each
        ``[len, K + 1]``, :meth:`prompt_rows`; left-padded as a batch)."""
        longest = max(map(len, prompts))
        if not 1 <= max_new_tokens <= self.max_positions - longest:
            raise MobiusError(
                f"--max-new-tokens {max_new_tokens}: CSM makes 1 to {self.max_positions - longest} "
                f"frames after this {longest}-position prompt ({self.max_positions} positions)"
            )
        batch, books = len(prompts), self.num_codebooks
        frames_in = np.full((batch, longest, books + 1), -1, np.int64)
        mask = np.zeros((batch, longest), np.int64)
        for i, rows in enumerate(prompts):
            frames_in[i, longest - len(rows) :] = rows
            mask[i, longest - len(rows) :] = 1
        positions = np.where(mask == 1, mask.cumsum(-1) - 1, 1)
        feeds = self.empty_cache(self.backbone, batch)
        rng = np.random.default_rng(seed)
        running = np.ones(batch, bool)
        frames = []
        while True:
            feeds.update(input_ids=frames_in, attention_mask=mask, position_ids=positions)
            outputs = run_named(self.backbone, feeds)
            carry_cache(feeds, outputs)
            code0 = self._choose(outputs["logits"][:, -1], backbone, rng)
            state = outputs["last_hidden_state"][:, -1]
            frame = self._frame_rest(code0, state, depth, rng)
            frames.append(frame)
            running &= ~(frame[:, :-1] == self.eos).all(-1)
            if not running.any() or len(frames) == max_new_tokens:
                return np.stack(frames, axis=1)
            frames_in = np.concatenate([frame, np.full((batch, 1), -1, np.int64)], 1)[:, None]
            mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
            positions = positions[:, -1:] + 1

    def to_audio(self, frames: np.ndarray) -> np.ndarray:
        """Mimi's mono waveform (float32) of one row's ``frames [n, K]``, cut at the first all-eos frame."""
        ended = np.flatnonzero((frames == self.eos).all(-1))
        frames = frames[: ended[0]] if ended.size else frames
        if len(frames) == 0:
            return np.zeros(0, np.float32)
        audio = self.codec.run(["audio_values"], {"audio_codes": frames.T[None]})[0]
        return audio[0, 0].astype(np.float32)

    def speak(
        self,
        text: str,
        backbone: Sampling | None = None,
        depth: Sampling | None = None,
        max_new_tokens: int = DEFAULT_FRAMES,
        seed: int | None = None,
        context=(),
    ) -> np.ndarray:
        """The waveform of ``text`` at :attr:`sampling_rate` (default: the package's sampling),
        after the ``context`` turns ``(text, waveform)``."""
        backbone = backbone or sampling_settings(self.package)
        depth = depth or sampling_settings(self.package, "depth_decoder_")
        prompt = self.prompt_rows(text, context)
        frames = self.generate_codes([prompt], backbone, depth, max_new_tokens, seed)
        return self.to_audio(frames[0])


def sampling_from_options(package: Path, options: dict) -> tuple[Sampling, Sampling]:
    """The backbone's and depth decoder's settings, overridden alike by the command line's.

    ``--temperature 0`` decodes both greedily; ``--do-sample``, ``--temperature``,
    ``--top-k`` or ``--top-p`` samples both; otherwise the generation config decides.
    """
    stages = [sampling_settings(package), sampling_settings(package, "depth_decoder_")]
    overrides = {
        k: options[k] for k in ("temperature", "top_k", "top_p") if options.get(k) is not None
    }
    if overrides or options.get("do_sample"):
        stages = [replace(s, do_sample=True, **overrides) for s in stages]
    if options.get("temperature") == 0:
        stages = [replace(s, do_sample=False, temperature=1.0) for s in stages]
    if any(s.temperature < 0 or (s.top_k or 0) < 0 for s in stages):
        raise MobiusError("--temperature and --top-k must be >= 0")
    return stages[0], stages[1]


def run_cli(package_dir, prompt: str, options: dict) -> int:
    """``mobius generate CSM "[0]Hello." [--context "[1]Hi." hi.wav] [--output x.wav] [--seed N]
    [--temperature 0]``."""
    from mobius_audio.audio_file import read_audio
    from mobius_audio.tts import write_wav

    package = Path(package_dir)
    csm = CsmGenerator(package, threads=options.get("threads"))
    backbone, depth = sampling_from_options(package, options)
    max_new_tokens = options.get("max_new_tokens") or DEFAULT_FRAMES
    context = [
        (text, read_audio(path, csm.sampling_rate))
        for text, path in options.get("csm_context") or ()
    ]
    rows = csm.prompt_rows(prompt, context)
    frames = csm.generate_codes([rows], backbone, depth, max_new_tokens, options.get("seed"))
    waveform = csm.to_audio(frames[0])
    output = options.get("output_file") or DEFAULT_OUTPUT
    write_wav(output, waveform, csm.sampling_rate)
    seconds = waveform.size / csm.sampling_rate
    print(
        f"wrote {output}: {seconds:.2f} s at {csm.sampling_rate} Hz ({frames.shape[1]} frames)",
        file=sys.stderr,
    )
    return 0
