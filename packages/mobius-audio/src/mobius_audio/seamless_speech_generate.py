"""Speech translation out loud: ``mobius generate PKG "text" --language fra --output out.wav``.

A SeamlessM4T speech-output package (:mod:`mobius_audio.tasks_seamless_speech`)
runs as transformers' ``SeamlessM4TForTextToSpeech.generate(input_ids,
tgt_lang=...)`` (or ``...ForSpeechToSpeech``'s) runs by default, without torch:

1. the text translation, greedy: the text-to-text or speech-to-text generator
   (:mod:`mobius_audio.seamless_text_generate`, :mod:`mobius_audio.seamless_generate`);
2. the decoder's ``last_hidden_state`` over the whole translated sequence
   (``</s> __fra__ ... </s>``), one run with an empty cache;
3. the units, greedy: the unit encoder over those states, the unit decoder prompted
   with ``t2u_eos_token_id`` and the language's ``t2u_lang_code_to_id`` unit, up to
   ``t2u_eos_token_id`` or ``t2u_max_new_tokens``;
4. the end unit turned into ``t2u_pad_token_id``, the others minus ``vocoder_offset``;
   the vocoder with the speaker and the language's ``vocoder_lang_code_to_id``; the
   waveform cut at its length and written as a 32-bit float WAV.

Every id read from the package's configs is checked (type, range) before use. A v2
package (its unit decoder reads characters) opens as
:mod:`mobius_audio.seamless_v2_speech_generate`'s translator, which changes step 3.

Example::

    from mobius_audio.seamless_speech_generate import open_speech_translator

    translator = open_speech_translator("seamless-t2st/")
    translator.target_language = "fra"
    text, waveform, rate = translator.translate("Hello, how are you?")
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import GenerationStats, PackageError, _as_ids, decode_loop, read_graph
from mobius_audio.models.seamless_m4t_text import SEAMLESS_TYPES
from mobius_audio.seamless_generate import SeamlessM4TGenerator
from mobius_audio.seamless_text_generate import SeamlessM4TTextGenerator
from mobius_audio.tts import sampling_rate, write_wav

DEFAULT_OUTPUT = "translation.wav"
SPEECH_GRAPHS = {
    "t2u_encoder": "t2u_encoder/model.onnx",
    "t2u_decoder": "t2u_decoder/model.onnx",
    "vocoder": "vocoder/model.onnx",
}
SAMPLING_FLAGS = (
    ("do_sample", "--do-sample"),
    ("temperature", "--temperature"),
    ("top_k", "--top-k"),
    ("top_p", "--top-p"),
)


def _model_type(package: Path) -> str | None:
    try:
        config = json.loads((package / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # not ours to judge: the runner that takes it names the broken file
    return config.get("model_type") if isinstance(config, dict) else None


def is_seamless_speech_package(package: str | os.PathLike) -> bool:
    """Whether ``package`` is a SeamlessM4T package with a unit model (its other graphs are
    checked when it opens, so that a missing vocoder is named)."""
    package = Path(package)
    unit_model = (package / "t2u_encoder" / "model.onnx").is_file()
    return unit_model and _model_type(package) in SEAMLESS_TYPES


def _config_id(table: dict, key: str, limit: int, what: str) -> int:
    """``table[key]`` as an id in ``[0, limit)``, or a PackageError naming it."""
    value = table.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < limit:
        raise PackageError(f"{what}={value!r} is not an id below {limit}")
    return value


class UnitSpeech:
    """A SeamlessM4T text generator that also speaks (a mixin before it); see the module docstring."""

    GRAPHS = {"encoder": "encoder/model.onnx", "decoder": "decoder/model.onnx", **SPEECH_GRAPHS}
    contract = "SeamlessM4T speech-output"
    #: The vocoder's speaker (``0`` to ``vocoder_num_spkrs - 1``).
    speaker: int = 0
    _text_source: dict | None = None

    def _check_contract(self) -> None:
        super()._check_contract()
        if "last_hidden_state" not in {o.name for o in self.decoder.get_outputs()}:
            raise PackageError(f"{self.package_dir}: the decoder has no last_hidden_state output")
        inputs = self.t2u_decoder.get_inputs()
        self._unit_cache = [i for i in inputs if i.name.startswith("past_key_values.")]
        self._unit_cache = [i for i in self._unit_cache if ".decoder." in i.name]
        self._unit_presents = self._cache_outputs(self._unit_cache)

    def decoder_step(self, source: dict):
        """The base's step; the source feeds are kept for the states pass after generation."""
        self._text_source = source
        return super().decoder_step(source)

    def _int_setting(self, key: str, minimum: int = 0) -> int:
        """``key`` of generation_config.json, else config.json, checked."""
        value = self._setting(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise PackageError(
                f"{key}={value!r} in {self.package_dir}'s configs must be an integer >= {minimum}"
            )
        return value

    def speech_language_ids(self) -> tuple[int, int]:
        """The target language's ``(unit, vocoder language)`` ids, checked."""
        self.language_token()  # a missing or unknown text language first
        code = self.target_language.replace("__", "")
        ids = []
        for key, limit in (
            ("t2u_lang_code_to_id", self._int_setting("t2u_vocab_size", 1)),
            ("vocoder_lang_code_to_id", self._int_setting("vocoder_num_langs", 1)),
        ):
            table = self.generation_config.get(key)
            if not isinstance(table, dict):
                raise PackageError(f"generation_config.json in {self.package_dir} has no {key} map")
            if code not in table:
                raise MobiusError(
                    f"--language {self.target_language!r} is not a language this package speaks "
                    f"({len(table)} known: {', '.join(sorted(map(str, table))[:12])})"
                )
            ids.append(_config_id(table, code, limit, f"{key}[{code!r}]"))
        return ids[0], ids[1]

    def translated_sequence(self, tokens: list[int]) -> list[int]:
        """What transformers' ``sequences`` holds: the decoder prompt, the tokens, the end token."""
        sequence = [self._int_setting("decoder_start_token_id"), self.language_token(), *tokens]
        if self.stats.stop_reason == "eos":
            eos = _as_ids(self._setting("eos_token_id"))
            if len(eos) != 1:
                raise PackageError(f"eos_token_id={eos!r}: one end token is needed here")
            sequence.append(eos[0])
        return sequence

    def text_states(self, sequence: list[int]) -> np.ndarray:
        """The text decoder's ``last_hidden_state`` [1, len, hidden] over ``sequence``."""
        feeds = {
            "input_ids": np.asarray([sequence], np.int64),
            **self._text_source,
            **self._empty_cache(),
        }
        return self.decoder.run(["last_hidden_state"], feeds)[0]

    def unit_source_mask(self, sequence: list[int]) -> np.ndarray:
        """transformers' mask of the states: the first ``count(tokens != pad_token_id)`` positions."""
        pad = self._setting("pad_token_id")
        real = sum(token != pad for token in sequence)
        return (np.arange(len(sequence)) < real).astype(np.int64)[None]

    def units(self, states: np.ndarray, mask: np.ndarray, unit_language: int) -> list[int]:
        """The unit model's greedy units after its prompt; the end unit becomes padding."""
        names = [o.name for o in self.t2u_encoder.get_outputs()]
        encoded = self.t2u_encoder.run(None, {"inputs_embeds": states, "attention_mask": mask})
        source = {
            name.replace("present.", "past_key_values.", 1): value
            for name, value in zip(names, encoded, strict=True)
            if name.startswith("present.")
        }
        source["encoder_attention_mask"] = mask
        cache = {
            i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), states.dtype) for i in self._unit_cache
        }

        def step(ids: list[int]) -> np.ndarray:
            nonlocal cache
            feeds = {"input_ids": np.asarray([ids], np.int64), **source, **cache}
            logits, *present = self.t2u_decoder.run(["logits", *self._unit_presents], feeds)
            cache = {i.name: v for i, v in zip(self._unit_cache, present, strict=True)}
            return logits[0, -1].astype(np.float32)

        eos = self._int_setting("t2u_eos_token_id")
        stats = GenerationStats()
        prompt = [eos, unit_language]  # transformers' t2u decoder_input_ids
        limit = self._int_setting("t2u_max_new_tokens", 1)
        units = list(
            decode_loop(step, prompt, stats=stats, max_new_tokens=limit, eos_token_ids=[eos])
        )
        if stats.stop_reason == "eos":
            units.append(self._int_setting("t2u_pad_token_id"))
        return units

    def speech_units(self, tokens: list[int], unit_language: int) -> list[int]:
        """The units of the translated ``tokens``, the end unit as padding (v2 overrides this)."""
        sequence = self.translated_sequence(tokens)
        states = self.text_states(sequence)
        return self.units(states, self.unit_source_mask(sequence), unit_language)

    def vocoder_ids(self, units: list[int]) -> np.ndarray:
        """The units as the vocoder's ids: padding kept, the others minus ``vocoder_offset``."""
        pad, offset = self._int_setting("t2u_pad_token_id"), self._int_setting("vocoder_offset")
        ids = [unit if unit == pad else unit - offset for unit in units]
        vocab = self._int_setting("unit_hifi_gan_vocab_size", 1)
        bad = [unit for unit, i in zip(units, ids, strict=True) if not 0 <= i < vocab]
        if bad:
            raise MobiusError(
                f"the unit model made unit {bad[0]}, a control unit the vocoder has no "
                f"embedding for (units {offset} to {offset + vocab - 1} are speech)"
            )
        return np.asarray([ids], np.int64)

    def speak(self, tokens: list[int]) -> tuple[np.ndarray, int]:
        """The waveform (float32, cut at its length) and rate of the translated ``tokens``."""
        speakers = self._int_setting("vocoder_num_spkrs", 1)
        if not 0 <= self.speaker < speakers:
            raise MobiusError(
                f"--speaker {self.speaker} is not a speaker of this package (0 to {speakers - 1})"
            )
        unit_language, vocoder_language = self.speech_language_ids()
        units = self.speech_units(tokens, unit_language)
        feeds = {
            "unit_ids": self.vocoder_ids(units),
            "speaker_id": np.asarray([self.speaker], np.int64),
            "language_id": np.asarray([vocoder_language], np.int64),
        }
        waveform, lengths = self.vocoder.run(["waveform", "waveform_lengths"], feeds)
        length = min(int(lengths[0]), waveform.shape[1])
        return waveform[0, :length].astype(np.float32), sampling_rate(self.config, self.package_dir)


class SeamlessM4TTextToSpeech(UnitSpeech, SeamlessM4TTextGenerator):
    """Text in: ``translate(text) -> (text, waveform, rate)``."""

    def translate(self, text: str, max_new_tokens: int = 128):
        tokens = list(self.generate_ids(self.encode_prompt(text), max_new_tokens=max_new_tokens))
        waveform, rate = self.speak(tokens)
        return self.tokenizer.decode(tokens, skip_special_tokens=True), waveform, rate


class SeamlessM4TSpeechToSpeech(UnitSpeech, SeamlessM4TGenerator):
    """Audio in: ``translate(path) -> (text, waveform, rate)``."""

    def translate(self, audio_path: str, max_new_tokens: int = 128):
        audio, rate = self._read(audio_path, None)
        tokens = list(self.transcribe_ids(audio, rate, max_new_tokens=max_new_tokens))
        waveform, rate = self.speak(tokens)
        return self.tokenizer.decode(tokens, skip_special_tokens=True), waveform, rate


def open_speech_translator(package_dir, *, threads: int | None = None) -> UnitSpeech:
    """The translator of a speech-output package: by its encoder's source, text or audio."""
    encoder = Path(package_dir) / "encoder" / "model.onnx"
    if not encoder.is_file():
        raise PackageError(f"no encoder/model.onnx in {package_dir}: not a package built by mobius")
    inputs = {i.name for i in read_graph(encoder).graph.input}
    kind = SeamlessM4TTextToSpeech if "input_ids" in inputs else SeamlessM4TSpeechToSpeech
    if has_character_units(package_dir):
        from mobius_audio import seamless_v2_speech_generate as v2

        kind = (
            v2.SeamlessM4Tv2TextToSpeech
            if "input_ids" in inputs
            else v2.SeamlessM4Tv2SpeechToSpeech
        )
    return kind(package_dir, threads=threads)


def has_character_units(package_dir) -> bool:
    """Whether the package's unit decoder is v2's non-autoregressive one (it reads characters)."""
    decoder = Path(package_dir) / "t2u_decoder" / "model.onnx"
    if not decoder.is_file():
        return False  # the translator names the missing graph when it opens
    graph = read_graph(decoder).graph
    return "char_input_ids" in {i.name for i in graph.input}


def _source(translator: UnitSpeech, prompt: str, audios) -> str:
    """The text, or the audio file: PROMPT, or the one ``--audio`` of a speech-to-speech package."""
    if not audios:
        return prompt
    if isinstance(translator, SeamlessM4TTextToSpeech):
        raise MobiusError(
            f"{translator.package_dir} translates text (a text-to-speech package): drop --audio"
        )
    if len(audios) > 1 or prompt not in ("", audios[0]):
        raise MobiusError(
            "a speech-to-speech package translates one clip: give it as PROMPT or --audio"
        )
    return audios[0]


def run_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """mobius-audio's ``mobius generate`` runner of SeamlessM4T speech-output packages."""
    given = [flag for dest, flag in SAMPLING_FLAGS if options.get(dest)]
    if given:
        raise MobiusError(
            f"{', '.join(given)}: SeamlessM4T speech output decodes greedily, as transformers' "
            "generate does by default"
        )
    translator = open_speech_translator(package_dir, threads=options.get("threads"))
    translator.target_language = options.get("language")
    translator.language_token()  # a missing or unknown language is refused before any work
    if options.get("speaker") is not None:
        translator.speaker = options["speaker"]
    source = _source(translator, prompt, options.get("audios"))
    text, waveform, rate = translator.translate(source, options.get("max_new_tokens") or 128)
    output = options.get("output_file") or DEFAULT_OUTPUT
    write_wav(output, waveform, rate)
    print(text)
    print(f"wrote {output}: {len(waveform) / rate:.2f} s at {rate} Hz", file=sys.stderr)
    return 0
