"""Speak text with a Bark package (:mod:`mobius_audio.tasks_bark`), as ``BarkModel.generate`` does.

Four stages, each as transformers runs it (``modeling_bark.py``):

1. semantic: the text's token ids moved up by ``text_encoding_offset`` (padding set to
   ``text_pad_token``) over ``max_input_semantic_length`` positions, each summed with
   the semantic history (a voice preset's, else ``semantic_pad_token``), then the
   ``semantic_infer_token``; decoded through the cache with the ids past
   ``semantic_vocab_size`` suppressed (the end token excepted) until every row has
   ended (``eos_token_id``) or ``max_new_tokens``;
2. coarse acoustics: in windows of ``sliding_window_len`` tokens, each a fresh prompt
   (the semantic tokens around the window, ``coarse_infer_token``, the last
   ``max_coarse_history`` coarse tokens), the two codebooks alternating;
3. fine acoustics: the remaining codebooks one at a time over blocks of
   ``max_fine_input_length`` frames that move by ``max_fine_history_length``;
4. the codec decoder.

Sampling follows each stage's generation config (``generation_config.json``:
``do_sample``, ``temperature``, ``top_k``, ``top_p``; the fine stage samples when its
``temperature`` is not 1, as transformers' does), drawn from one numpy generator
seeded with ``seed``. ``temperature=0`` decodes every stage greedily: then the codes
are transformers' ``generate(..., do_sample=False, fine_temperature=None)``.
:class:`Bark` is the Python API; :func:`run_cli` the ``mobius generate`` runner.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import load_session, load_tokenizer
from mobius_audio.bark_settings import BarkSettings, VoicePreset, check_setting, read_optional_json
from mobius_audio.tasks_bark import GRAPHS
from mobius_audio.tts import write_wav

DEFAULT_OUTPUT = "bark.wav"


def is_bark_package(package: str | os.PathLike) -> bool:
    """Whether ``package`` holds the four graphs of the Bark contract."""
    return all((Path(package) / name / "model.onnx").is_file() for name in GRAPHS)


class _CausalStage:
    """A causal-LM graph in ONNX Runtime: prefill, then one token at a time through its cache."""

    def __init__(self, session) -> None:
        self.session = session
        self.past = [i for i in session.get_inputs() if i.name.startswith("past_key_values.")]
        self.outputs = [o.name for o in session.get_outputs()]

    def start(self, batch: int) -> None:
        self.cache = {
            i.name: np.zeros((batch, i.shape[1], 0, i.shape[3]), np.float32) for i in self.past
        }
        self.length = 0

    def __call__(self, input_ids: np.ndarray, **extra: np.ndarray) -> np.ndarray:
        """The last position's logits ``[batch, vocab]`` after feeding ``input_ids``."""
        batch, sequence = input_ids.shape
        total = self.length + sequence
        positions = np.arange(self.length, total, dtype=np.int64)
        feeds = {
            "input_ids": input_ids.astype(np.int64),
            "attention_mask": np.ones((batch, total), np.int64),
            "position_ids": np.broadcast_to(positions, (batch, sequence)).copy(),
            **self.cache,
            **extra,
        }
        outputs = dict(zip(self.outputs, self.session.run(None, feeds), strict=True))
        self.cache = {
            name.replace("present.", "past_key_values.", 1): value
            for name, value in outputs.items()
            if name.startswith("present.")
        }
        self.length = total
        return outputs["logits"][:, -1, :]


class Bark:
    """A Bark package in ONNX Runtime: its four sessions, tokenizer and settings."""

    def __init__(self, package_dir: str | os.PathLike, threads: int | None = None) -> None:
        import onnxruntime as ort

        self.package = Path(package_dir)
        if not is_bark_package(self.package):
            raise MobiusError(
                f"{self.package} is not a Bark package ({', '.join(g + '/' for g in GRAPHS)})"
            )
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.sessions = {
            name: load_session(self.package / name / "model.onnx", options) for name in GRAPHS
        }
        self.settings = BarkSettings.read(self.package)
        config = read_optional_json(self.package / "config.json")
        codec = config.get("codec_config") or {}
        rate = codec.get("sampling_rate", 24_000)
        if isinstance(rate, bool) or not isinstance(rate, int) or not 1000 <= rate <= 384_000:
            raise MobiusError(f"{self.package / 'config.json'}: codec sampling_rate {rate!r}")
        self.sampling_rate = rate
        # The semantic stage's positions: the prompt and the tokens fed back must fit.
        semantic = config.get("semantic_config") or {}
        positions = semantic.get("block_size", 1024)
        check_setting(positions, "semantic block_size", self.package / "config.json")
        self.semantic_positions = positions
        vocab = semantic.get("input_vocab_size", 129_600)
        check_setting(vocab, "semantic input_vocab_size", self.package / "config.json")
        self.semantic_input_vocab = vocab
        self.tokenizer = _load_tokenizer(self.package)

    # -- the stages -------------------------------------------------------------------

    def tokenize(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``input_ids`` and ``attention_mask`` as ``BarkProcessor`` makes them (no special
        tokens, right-padded to ``max_input_semantic_length``)."""
        length = self.settings.semantic["max_input_semantic_length"]
        encoded = self.tokenizer(
            texts, padding="max_length", max_length=length, add_special_tokens=False
        )
        ids = [row[:length] for row in encoded["input_ids"]]
        mask = [row[:length] for row in encoded["attention_mask"]]
        if any(not any(row) for row in mask):
            raise MobiusError("the text is empty: there is nothing to speak")
        return np.array(ids, np.int64), np.array(mask, np.int64)

    def semantic(
        self,
        input_ids: np.ndarray,
        attention_mask: np.ndarray,
        rng: np.random.Generator,
        preset: VoicePreset | None = None,
        max_new_tokens: int | None = None,
    ) -> np.ndarray:
        """Semantic tokens ``[batch, new]``; a row that ended early is filled with the end id."""
        s = self.settings.semantic
        length, eos = s["max_input_semantic_length"], s["eos_token_id"]
        batch = input_ids.shape[0]
        text = np.where(
            attention_mask == 1, input_ids + s["text_encoding_offset"], s["text_pad_token"]
        )
        history = np.full(length, eos, np.int64)  # the semantic pad token is the end token
        if preset is not None:
            given = preset.semantic_prompt[-length:]
            history[: len(given)] = given
        width = min(text.shape[1], length)
        prompt = np.concatenate(
            [text[:, :length], np.full((batch, 1), s["semantic_infer_token"])], axis=1
        )
        added = np.concatenate(
            [np.broadcast_to(history[:width], (batch, width)), np.full((batch, 1), -1)], axis=1
        )
        if prompt.max() >= self.semantic_input_vocab or added.max() >= self.semantic_input_vocab:
            raise MobiusError(
                f"{self.package}: the text's ids, moved by text_encoding_offset, pass the semantic "
                f"model's {self.semantic_input_vocab} embeddings: tokenizer and model do not match"
            )
        stage = _CausalStage(self.sessions["semantic"])
        stage.start(batch)
        logits = stage(prompt, history_ids=added.astype(np.int64))
        vocab = logits.shape[-1]
        suppressed = np.r_[s["semantic_vocab_size"] : eos, eos + 1 : vocab]
        limit = s["max_new_tokens"] if max_new_tokens is None else max_new_tokens
        limit = min(limit, self.semantic_positions - prompt.shape[1] + 1)
        sampling = self.settings.sampling["semantic"]
        tokens, done = [], np.zeros(batch, bool)
        for step in range(limit):
            if step:
                logits = stage(tokens[-1][:, None], history_ids=np.full((batch, 1), -1, np.int64))
            logits = logits.copy()
            logits[:, suppressed] = -np.inf
            picked = np.where(done, eos, sampling.pick(logits, rng))
            tokens.append(picked)
            done |= picked == eos
            if done.all():
                break
        return np.stack(tokens, axis=1) if tokens else np.zeros((batch, 0), np.int64)

    def coarse(
        self, semantic: np.ndarray, rng: np.random.Generator, preset: VoicePreset | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, lengths)``: the coarse tokens ``[batch, 2 * frames]`` (codebooks interleaved,
        still offset) and each row's own length in tokens."""
        s, c, size = self.settings.semantic, self.settings.coarse, self.settings.codebook_size
        pad, n_coarse = c["coarse_semantic_pad_token"], c["n_coarse_codebooks"]
        semantic = np.where(semantic == s["eos_token_id"], pad, semantic)
        ratio = c["coarse_rate_hz"] / s["semantic_rate_hz"] * n_coarse
        max_semantic_history = int(np.floor(c["max_coarse_history"] / ratio))
        # transformers computes the lengths in float32 (an integer tensor times a float).
        counts = (semantic != pad).sum(axis=1).astype(np.float32)
        lengths = np.floor(counts * np.float32(ratio) / np.float32(n_coarse))
        lengths = np.round(lengths * np.float32(n_coarse)).astype(np.int64)
        longest = int(lengths.max()) if lengths.size else 0
        batch = semantic.shape[0]
        semantic_history, coarse = self._coarse_histories(preset, ratio, batch)
        base = semantic_history.shape[1]
        semantic = np.concatenate([semantic_history, semantic], axis=1)
        history_length, window = coarse.shape[1], c["sliding_window_len"]
        stage = _CausalStage(self.sessions["coarse_acoustics"])
        sampling = self.settings.sampling["coarse"]
        first = s["semantic_vocab_size"]
        generated = 0
        for _ in range(math.ceil(longest / window) if window else 0):
            index = base + int(round(generated / ratio))
            prompt = semantic[:, max(0, index - max_semantic_history) :][
                :, : c["max_coarse_input_length"]
            ]
            fill = c["max_coarse_input_length"] - prompt.shape[1]
            prompt = np.pad(prompt, ((0, 0), (0, fill)), constant_values=pad)
            infer = np.full((batch, 1), c["coarse_infer_token"], np.int64)
            prompt = np.concatenate([prompt, infer, coarse[:, -c["max_coarse_history"] :]], axis=1)
            stage.start(batch)
            logits = stage(prompt)
            new = []
            for step in range(min(window, longest - generated)):
                if step:
                    logits = stage(new[-1][:, None])
                logits = logits.copy()
                if step % 2 == 0:  # the first codebook's ids, then the second's and above
                    logits[:, :first] = -np.inf
                    logits[:, first + size :] = -np.inf
                else:
                    logits[:, : first + size] = -np.inf
                new.append(sampling.pick(logits, rng))
            coarse = np.concatenate([coarse, np.stack(new, axis=1)], axis=1)
            generated = coarse.shape[1] - history_length
        return coarse[:, history_length:], lengths

    def _coarse_histories(self, preset, ratio: float, batch: int):
        """The voice preset's semantic and (offset, interleaved) coarse histories, trimmed
        to the same span, as transformers' ``preprocess_histories``; empty without one."""
        if preset is None:
            return np.zeros((batch, 0), np.int64), np.zeros((batch, 0), np.int64)
        s, c, size = self.settings.semantic, self.settings.coarse, self.settings.codebook_size
        semantic = preset.semantic_prompt
        offsets = size * np.arange(preset.coarse_prompt.shape[0])[:, None]
        coarse = (preset.coarse_prompt + offsets).T.reshape(-1) + s["semantic_vocab_size"]
        n_semantic = min(
            int(np.floor(c["max_coarse_history"] / ratio)),
            len(semantic) - len(semantic) % 2,
            int(np.floor(len(coarse) / ratio)),
        )
        n_coarse = int(round(n_semantic * ratio))
        semantic, coarse = semantic[-n_semantic:], coarse[-n_coarse:][:-2]
        return np.tile(semantic, (batch, 1)), np.tile(coarse, (batch, 1))

    def fine(
        self, coarse: np.ndarray, rng: np.random.Generator, preset: VoicePreset | None = None
    ) -> np.ndarray:
        """All codebooks' codes ``[batch, n_fine_codebooks, frames]`` from the coarse tokens."""
        s, c, f = self.settings.semantic, self.settings.coarse, self.settings.fine
        size, n_coarse, n_fine = (
            self.settings.codebook_size,
            c["n_coarse_codebooks"],
            f["n_fine_codebooks"],
        )
        history_max, input_max = f["max_fine_history_length"], f["max_fine_input_length"]
        batch = coarse.shape[0]
        codes = np.mod(coarse.reshape(batch, -1, n_coarse) - s["semantic_vocab_size"], size)
        frames = codes.shape[1]
        fine = np.pad(codes, ((0, 0), (0, 0), (0, n_fine - n_coarse)), constant_values=size)
        n_history = 0
        if preset is not None:
            history = (
                preset.fine_prompt.T[-history_max:] if history_max else preset.fine_prompt.T[:0]
            )
            fine = np.concatenate([np.broadcast_to(history, (batch, *history.shape)), fine], axis=1)
            n_history = history.shape[0]
        removed = max(0, input_max - fine.shape[1])
        fine = np.pad(fine, ((0, 0), (0, removed), (0, 0)), constant_values=size)
        loops = max(0, int(np.ceil((frames - (input_max - n_history)) / history_max))) + 1
        session = self.sessions["fine_acoustics"]
        for outer in range(loops):
            start = min(outer * history_max, fine.shape[1] - input_max)
            fill_from = min(n_history + outer * history_max, fine.shape[1] - history_max)
            relative = fill_from - start
            block = fine[:, start : start + input_max, :]  # a view: filled in place
            for index in range(n_coarse, n_fine):
                feeds = {"input_ids": block, "codebook_idx": np.array(index, np.int64)}
                (logits,) = session.run(None, feeds)
                block[:, relative:, index] = self._fine_codes(logits[:, relative:, :size], rng)
        fine = fine.transpose(0, 2, 1)[:, :, n_history:]
        return fine[:, :, : fine.shape[2] - removed] if removed else fine

    def _fine_codes(self, logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Argmax at temperature 1 (or none), else one draw per position from the softmax."""
        temperature = self.settings.fine_temperature
        if temperature is None or temperature == 1.0:
            return logits.argmax(-1)
        scaled = logits.astype(np.float64) / temperature
        probs = np.exp(scaled - scaled.max(-1, keepdims=True))
        cumulative = np.cumsum(probs / probs.sum(-1, keepdims=True), axis=-1)
        draws = rng.random(cumulative.shape[:-1])[..., None]
        return np.minimum((cumulative < draws).sum(-1), logits.shape[-1] - 1)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """The waveform ``[batch, samples]`` of ``codes [batch, codebooks, frames]``."""
        (waveform,) = self.sessions["codec_decoder"].run(None, {"audio_codes": codes})
        return waveform

    # -- the whole chain ---------------------------------------------------------------

    def speak(
        self,
        texts: list[str],
        seed: int | None = None,
        voice_preset: str | os.PathLike | VoicePreset | None = None,
        max_new_tokens: int | None = None,
    ) -> list[np.ndarray]:
        """Each text's waveform (float32 at :attr:`sampling_rate`), as transformers'
        ``generate(..., return_output_lengths=True)`` makes it: each clip decoded alone.
        ``voice_preset`` is a speaker ``.npz`` (or its :class:`VoicePreset`)."""
        rng = np.random.default_rng(seed)
        preset = voice_preset
        if preset is not None and not isinstance(preset, VoicePreset):
            preset = VoicePreset.load(preset, self.settings)
        input_ids, attention_mask = self.tokenize(texts)
        semantic = self.semantic(input_ids, attention_mask, rng, preset, max_new_tokens)
        coarse, lengths = self.coarse(semantic, rng, preset)
        codes = self.fine(coarse, rng, preset)
        frames = lengths // self.settings.coarse["n_coarse_codebooks"]
        return [self.decode(row[None, :, :n])[0] for row, n in zip(codes, frames, strict=True)]


def _load_tokenizer(package: Path):
    """The package's tokenizer (Bark's is a BERT WordPiece vocabulary)."""
    if not any((package / name).is_file() for name in ("vocab.txt", "tokenizer.json")):
        raise MobiusError(f"{package} has no tokenizer (vocab.txt): build from a Bark checkpoint")
    return load_tokenizer(package)


def run_cli(package_dir, prompt: str, options: dict) -> int:
    """``mobius generate PKG "text" [--output out.wav] [--seed N] [--voice-preset NPZ]``."""
    output = options.get("output_file") or DEFAULT_OUTPUT
    limit = options.get("max_new_tokens")
    if limit is not None and limit < 1:
        raise MobiusError(f"--max-new-tokens {limit}: Bark needs at least one semantic token")
    preset = options.get("bark_voice_preset")
    if preset is not None:  # checked before the sessions load
        preset = VoicePreset.load(preset, BarkSettings.read(Path(package_dir)))
    bark = Bark(package_dir, threads=options.get("threads"))
    bark.settings.override(
        temperature=options.get("temperature"),
        do_sample=bool(options.get("do_sample")),
        top_k=options.get("top_k"),
        top_p=options.get("top_p"),
    )
    (waveform,) = bark.speak(
        [prompt], seed=options.get("seed"), voice_preset=preset, max_new_tokens=limit
    )
    write_wav(output, waveform, bark.sampling_rate)
    seconds = len(waveform) / bark.sampling_rate
    print(f"wrote {output}: {seconds:.2f} s at {bark.sampling_rate} Hz", file=sys.stderr)
    return 0
