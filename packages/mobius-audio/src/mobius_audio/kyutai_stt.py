"""Run a Kyutai STT package (``streaming-speech-to-text``): ``mobius generate PKG speech.wav``.

The audio file is decoded and resampled to the codec's rate
(:func:`mobius_audio.audio_file.read_audio`), padded with the silence before and the
delay after (:mod:`mobius_audio.kyutai_features`), and coded by ``audio_encoder``.
The LM then reads, position by position, the text token it chose last and the codes
of the previous audio frame (position 0: the start token and ``audio_bos_token_id``
in every codebook) through its KV cache, and takes the likeliest text token: one per
``frame_size`` samples of the padded clip, as transformers' ``generate`` does
(``do_sample=False``), stopping early at an end token the generation config names.

Example::

    from mobius_audio.kyutai_stt import KyutaiSpeechToText

    text = KyutaiSpeechToText("kyutai-stt-out/").transcribe("speech.wav")

Needs ONNX Runtime, soundfile and transformers' tokenizer: ``pip install mobius-audio[run]``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mobius.classification import open_session
from mobius.errors import MobiusError
from mobius.generate import (
    PackageError,
    _read_json,
    _refuse_plugin_options,
    load_tokenizer,
    refuse_output_file,
)
from mobius_audio.audio_file import read_audio
from mobius_audio.encoders import _SAMPLING_FLAGS  # the options of sampling and chat
from mobius_audio.kyutai_features import MAX_STEPS, KyutaiFeatures


def is_streaming_stt_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package holds Kyutai STT's ``audio_encoder`` and ``decoder`` graphs."""
    package = Path(package_dir)
    graphs = ("audio_encoder", "decoder")
    return all((package / g / "model.onnx").is_file() for g in graphs) and (
        _read_json(package / "config.json").get("model_type") == "kyutai_speech_to_text"
    )


def _token_id(settings: dict, name: str, limit: int, *, required: bool = True) -> int | None:
    value = settings.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        raise PackageError(f"the package's {name} {value!r} is not a token id below {limit}")
    return value


def _frame_size(config: dict) -> int:
    """Samples per audio frame: ``frame_size``, or what transformers derives it from (the codec's
    strides times the downsampling's 2) where config.json does not spell it out."""
    size = config.get("frame_size")
    if size is None:
        ratios = (config.get("codec_config") or {}).get("upsampling_ratios")
        if (
            isinstance(ratios, list)
            and ratios
            and all(isinstance(r, int) and not isinstance(r, bool) and r > 0 for r in ratios)
        ):
            size = 2 * int(np.prod(ratios))
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise PackageError(f"config.json's frame_size {size!r} is not a sample count")
    return size


class KyutaiSpeechToText:
    """A Kyutai STT package in ONNX Runtime with its feature extractor and tokenizer."""

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package = Path(package_dir)
        if not is_streaming_stt_package(self.package):
            raise PackageError(f"{self.package} is not a Kyutai speech-to-text package")
        self.features = KyutaiFeatures.from_config(
            _read_json(self.package / "preprocessor_config.json")
        )
        config = _read_json(self.package / "config.json")
        settings = {**config, **_read_json(self.package / "generation_config.json")}
        self.frame_size = _frame_size(config)
        counts = [config.get(n) for n in ("vocab_size", "num_codebooks", "codebook_vocab_size")]
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts):
            raise PackageError(f"config.json's vocabulary sizes {counts} are not valid")
        vocab, codebooks, codebook_vocab = counts
        # The start token indexes the whole embedding table (48000 for a 4001-token vocabulary).
        self.bos = _token_id(settings, "bos_token_id", vocab + codebooks * codebook_vocab + 1)
        self.audio_bos = _token_id(settings, "audio_bos_token_id", codebook_vocab)
        eos = settings.get("eos_token_id")
        eos = eos if isinstance(eos, list) else [eos]
        self.eos = {
            _token_id({"eos_token_id": e}, "eos_token_id", vocab, required=False) for e in eos
        }
        self.eos.discard(None)
        self.encoder = open_session(self.package / "audio_encoder" / "model.onnx", threads)
        self.decoder = open_session(self.package / "decoder" / "model.onnx", threads)
        self._tokenizer = None

    @property
    def tokenizer(self):
        """The package's tokenizer, loaded on first use."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.package)
        return self._tokenizer

    def generate_ids(self, audio) -> list[int]:
        """The text tokens of ``audio`` (a file, or mono samples at the codec's rate)."""
        if isinstance(audio, (str, os.PathLike)):
            samples = read_audio(audio, self.features.sampling_rate)
        else:
            samples = np.asarray(audio, np.float32).reshape(-1)
        channels = self.features.padding.channels
        clip = samples if channels == 1 else np.stack([samples] * channels)
        input_values = self.features([clip])["input_values"]
        codes = self.encode(input_values)[0]  # [codebooks, frames]
        steps = input_values.shape[-1] // self.frame_size
        if steps > MAX_STEPS:
            seconds = MAX_STEPS * self.frame_size / self.features.sampling_rate
            raise MobiusError(f"the clip is longer than the {seconds:g} s a package decodes")
        return self.decode_codes(codes, steps)

    def encode(self, input_values: np.ndarray) -> np.ndarray:
        """int64 ``[batch, num_codebooks, frames]``: the codes of the extractor's ``input_values``."""
        return self.encoder.run(None, {"input_values": input_values})[0]

    def empty_cache(self, batch: int) -> dict[str, np.ndarray]:
        """The decoder's ``past_key_values.*`` before the first position: ``[batch, kv_heads, 0, head_dim]``."""
        return {
            value.name: np.zeros((batch, value.shape[1], 0, value.shape[3]), np.float32)
            for value in self.decoder.get_inputs()
            if value.name.startswith("past_key_values.")
        }

    def decode_codes(self, codes: np.ndarray, steps: int) -> list[int]:
        """Greedy: ``steps`` tokens at most, each from the last token and the previous frame's codes."""
        past = self.empty_cache(1)
        tokens, token = [], self.bos
        for position in range(steps):
            audio = (
                np.full(codes.shape[0], self.audio_bos) if position == 0 else codes[:, position - 1]
            )
            feeds = {
                "input_ids": np.concatenate([[token], audio]).astype(np.int64)[None, None],
                "attention_mask": np.ones((1, position + 1), np.int64),
                "position_ids": np.array([[position]], np.int64),
                **past,
            }
            names = [o.name for o in self.decoder.get_outputs()]
            outputs = dict(zip(names, self.decoder.run(names, feeds), strict=True))
            token = int(outputs["logits"][0, -1].argmax())
            tokens.append(token)
            if token in self.eos:
                break
            past = {
                n.replace("present.", "past_key_values."): v
                for n, v in outputs.items()
                if n.startswith("present.")
            }
        return tokens

    def transcribe(self, audio) -> str:
        """The text of ``audio``, special tokens left out."""
        return self.tokenizer.decode(self.generate_ids(audio), skip_special_tokens=True)


def run_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """``mobius generate PKG speech.wav``: print the transcription."""
    _refuse_plugin_options(package_dir, options)
    refuse_output_file(package_dir, options)
    refused = [flag for flag, dest in _SAMPLING_FLAGS.items() if options.get(dest)]
    if refused:
        raise MobiusError(f"{', '.join(refused)}: a Kyutai STT package transcribes greedily")
    print(KyutaiSpeechToText(package_dir, threads=options.get("threads")).transcribe(prompt))
    return 0
