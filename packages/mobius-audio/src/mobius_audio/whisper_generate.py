"""Whisper transcription as transformers' ``WhisperForConditionalGeneration.generate`` does it.

One loop serves short and long audio, as in transformers 5: the log-mel features of
the whole audio are made once (up to one window the extractor pads to its window;
longer audio ``truncation=False, padding="longest"``, as transformers' ASR pipeline
asks), then window after window of ``2 * max_source_positions`` frames (30 s) is
cut from ``seek``, padded with zeros, encoded and decoded greedily from the same
prompt: ``<|startoftranscript|>``, the language (given, from the generation config,
else detected once: the likeliest language token after the start token on the first
window), the task, and ``<|notimestamps|>`` unless timestamps are on. Audio longer
than one window always decodes with timestamps. The window's tokens are cut into
segments at their timestamp pairs and ``seek`` moves on to the last pair, or by the
whole window (:mod:`mobius_audio.longform`).

Off, as they are off by default in transformers, and not implemented:
``condition_on_prev_tokens``, ``prompt_ids``, temperature fallback with its
compression-ratio and log-probability thresholds, no-speech detection, beam search
and word-level timestamps (``return_token_timestamps``). A generation config that
turns one of them on gets a note, and is decoded without it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import (
    GenerationStats,
    PackageError,
    begin_suppress_tokens,
    suppress_tokens,
)
from mobius_audio import whisper_features
from mobius_audio.audio_file import resample
from mobius_audio.generate import SpeechToTextGenerator, extract_inputs
from mobius_audio.longform import (
    FRAME_SECONDS,
    INPUT_STRIDE,
    Segment,
    TranscriptionStats,
    note_unimplemented,
    split_window,
    timestamp_rules,
)

TASKS = ("transcribe", "translate")


class WhisperGenerator(SpeechToTextGenerator):
    """A Whisper package: long-form transcription, timestamps, language and task.

    :meth:`set_options` fixes ``language``, ``task`` and ``timestamps`` for
    :meth:`stream` (what ``mobius generate`` calls); :meth:`transcribe_segments`
    and :meth:`transcribe_ids` take them per call. ``progress`` shows a bar over the
    windows on a terminal's stderr while the text goes to a file or a pipe.
    """

    progress = False

    def set_options(self, *, language=None, task=None, timestamps=None) -> None:
        """``language`` (``"de"``, ``"german"`` or ``"<|de|>"``), ``task`` and ``timestamps`` for :meth:`stream`."""
        self.transcribe_options = dict(language=language, task=task, timestamps=timestamps)

    # -- settings read from the package ------------------------------------------------

    def _int(self, key: str, low: int, high: int | None = None) -> int | None:
        """generation_config.json's (else config.json's) ``key``: an int in [low, high), or None."""
        value = self._setting(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise PackageError(f"{key} in {self.package_dir} is {value!r}: not an int >= {low}")
        if high is not None and value >= high:
            raise PackageError(f"{key} in {self.package_dir} is {value}: past the vocabulary")
        return value

    def _id_table(self, key: str) -> dict[str, int]:
        """A token table of the generation config (``lang_to_id``, ``task_to_id``), checked."""
        table = self.generation_config.get(key) or {}
        vocab = self._int("vocab_size", 1)
        valid = isinstance(table, dict) and all(
            isinstance(k, str) and isinstance(v, int) and 0 <= v < (vocab or v + 1)
            for k, v in table.items()
        )
        if not valid:
            raise PackageError(f"{key} in {self.package_dir}'s generation config is malformed")
        return table

    @property
    def window_frames(self) -> int:
        """Feature frames in one window: ``2 * max_source_positions`` (3000: 30 s)."""
        positions = self._int("max_source_positions", 1)
        if positions is None:
            raise PackageError(f"config.json in {self.package_dir} has no max_source_positions")
        return INPUT_STRIDE * positions

    @property
    def timestamp_begin(self) -> int | None:
        """The first timestamp token (``<|0.00|>``), after ``<|notimestamps|>``; None without one."""
        no_timestamps = self._int("no_timestamps_token_id", 0, self._int("vocab_size", 1))
        return None if no_timestamps is None else no_timestamps + 1

    # -- the prompt --------------------------------------------------------------------

    def prompt_ids(self, cross, *, language=None, task=None, timestamps=False) -> list[int]:
        """The decoder's first tokens, as transformers' Whisper ``generate`` makes them.

        ``cross`` is the first window's decoder feeds (for language detection).
        """
        return self._prompt(cross, language, task, timestamps)[0]

    def _prompt(self, cross, language, task, timestamps) -> tuple[list[int], str]:
        """``(tokens, language label)``; the label says how the language was chosen."""
        config = self.generation_config
        if (language is not None or task is not None) and config.get("is_multilingual") is False:
            raise MobiusError(
                f"{self.package_dir} is an English-only Whisper: --language and --task do not apply"
            )
        start = self._int("decoder_start_token_id", 0)
        if start is None:
            raise PackageError("config.json has no decoder_start_token_id: cannot start decoding")
        language = config.get("language") if language is None else language
        task = config.get("task") if task is None else task
        tokens: list[int | None] = [start]
        if language is None and task is None:  # the older form: forced_decoder_ids
            forced = sorted(self._setting("forced_decoder_ids") or [])
            for position, (index, token) in enumerate(forced, start=1):
                if index != position:
                    break
                tokens.append(token)
        lang_to_id = self._id_table("lang_to_id")
        label = ""
        if language is not None:
            key = _language_token(str(language), lang_to_id)
            if key not in lang_to_id:
                raise MobiusError(f"language {language!r} is not one this Whisper package knows")
            tokens[1:2], label = [lang_to_id[key]], key
        elif lang_to_id and (len(tokens) < 2 or tokens[1] is None):
            logits = self.decoder_step(cross)([start])
            ids = list(lang_to_id.values())
            detected = ids[int(np.argmax(logits[ids]))]
            tokens[1:2] = [detected]
            label = next(k for k, v in lang_to_id.items() if v == detected) + " (detected)"
        task_to_id = self._id_table("task_to_id")
        if task is not None:
            if task not in TASKS or task not in task_to_id:
                raise MobiusError(f"task {task!r} is not one of this Whisper package's {TASKS}")
            tokens.append(task_to_id[task])
        elif language is not None and task_to_id and not set(tokens) & set(task_to_id.values()):
            tokens.append(task_to_id["transcribe"])
        no_timestamps = None if self.timestamp_begin is None else self.timestamp_begin - 1
        if no_timestamps is not None and not timestamps and tokens[-1] != no_timestamps:
            tokens.append(no_timestamps)
        elif timestamps and tokens[-1] == no_timestamps:
            tokens.pop()
        return [int(t) for t in tokens if t is not None], label

    # -- features and windows ------------------------------------------------------------

    def log_mel(self, audio: np.ndarray, rate: int) -> np.ndarray:
        """The log-mel features [1, mels, frames] of the whole audio, as transformers' ASR pipeline makes them."""
        extractor = self.feature_extractor
        target = int(extractor.sampling_rate)
        audio = resample(audio, int(rate), target)
        window = getattr(extractor, "n_samples", None)
        # Beyond one window the extractor neither truncates nor pads to its window.
        options = (
            dict(truncation=False, padding="longest") if window and audio.size > window else {}
        )
        if whisper_features.supports(extractor):  # the same features, its frame loop vectorised
            return whisper_features.whisper_log_mel(extractor, audio, **options)
        return extract_inputs(extractor, audio, target, **options)["input_features"]

    def _encode_window(self, features: np.ndarray, seek: int) -> dict[str, np.ndarray]:
        """The decoder's cross-attention feeds for the window from frame ``seek``, padded with zeros."""
        window = features[:, :, seek : seek + self.window_frames]
        short = self.window_frames - window.shape[-1]
        if short:
            window = np.pad(window, ((0, 0), (0, 0), (0, short)))
        encoded = self.encoder.run(None, {self._source: window.astype(self._features_type)})
        return self._cross_cache(encoded)

    def transcribe_segments(
        self,
        audio: np.ndarray,
        rate: int,
        *,
        language: str | None = None,
        task: str | None = None,
        timestamps: bool | None = None,
        max_new_tokens: int = 128,
        eos_token_ids=None,
        seed: int | None = None,
        **sampling,
    ) -> Iterator[Segment]:
        """Yield the segments of ``audio`` (mono, ``rate`` Hz), window by window, their text decoded.

        ``language`` and ``task`` default to the generation config's; ``timestamps``
        (default: the config's ``return_timestamps``) decodes with timestamp tokens,
        as audio longer than one window always does. ``max_new_tokens`` counts per
        window; ``seed`` and ``sampling`` are :func:`mobius.generate.decode_loop`'s.
        """
        segments = self._segments(
            audio,
            rate,
            language=language,
            task=task,
            timestamps=timestamps,
            max_new_tokens=max_new_tokens,
            eos_token_ids=eos_token_ids,
            seed=seed,
            **sampling,
        )
        for segment in segments:
            text_ids = [token for token in segment.tokens if self.is_text(token)]
            segment.text = self.tokenizer.decode(text_ids, skip_special_tokens=True)
            yield segment

    def transcribe_ids(self, audio: np.ndarray, rate: int, **options) -> Iterator[int]:
        """Yield the token ids transformers' ``generate`` returns: every segment's, timestamps included.

        The options are those of :meth:`transcribe_segments`; tokens come window by window.
        """
        for segment in self._segments(audio, rate, **options):
            yield from segment.tokens

    def _segments(
        self,
        audio,
        rate,
        *,
        language=None,
        task=None,
        timestamps=None,
        seed=None,
        max_new_tokens=128,
        eos_token_ids=None,
        **sampling,
    ) -> Iterator[Segment]:
        """The window loop: segments with their tokens (see :meth:`transcribe_segments`)."""
        stats = self.stats = TranscriptionStats()
        started = time.perf_counter()
        note_unimplemented(self.generation_config)
        features = self.log_mel(np.asarray(audio, np.float32), rate)
        total, window = features.shape[-1], self.window_frames
        stats.audio_seconds = total * FRAME_SECONDS
        timestamps = bool(timestamps or self.generation_config.get("return_timestamps"))
        timestamps = timestamps or total > window  # long-form needs timestamp tokens
        if timestamps and self.timestamp_begin is None:
            raise PackageError(
                f"{self.package_dir}'s generation config has no no_timestamps_token_id: "
                "timestamps, and audio longer than one window, need it"
            )
        cross = self._encode_window(features, 0)
        prompt, stats.language = self._prompt(cross, language, task, timestamps)
        stats.prompt, stats.prompt_tokens = prompt, len(prompt)
        # Without timestamp tokens nothing splits a window: put their start past the vocabulary.
        split_at = self.timestamp_begin or (self._int("vocab_size", 1) or 0) + 1
        decoding = dict(
            timestamps=timestamps,
            # One generator for every window: a seed gives one stream of draws, not a repeat.
            rng=np.random.default_rng(seed),
            max_new_tokens=max_new_tokens,
            eos_token_ids=eos_token_ids,
            **sampling,
        )
        with self._progress_bar(total, window) as bar:
            seek = 0
            while seek < total:
                frames = min(total - seek, window)
                if seek:
                    cross = self._encode_window(features, seek)
                tokens, decoded = self._decode_window(cross, prompt, started=started, **decoding)
                stats.add_window(seek, decoded)
                segments, advance = split_window(
                    tokens, timestamp_begin=split_at, seek=seek, window_frames=frames
                )
                # A window closing on a pair at 0.00 would not move on: transformers decodes
                # it again forever; mobius moves on by the whole window instead.
                advance = advance if advance > 0 else frames
                yield from segments
                bar.update(min(advance, total - seek) * FRAME_SECONDS)
                seek += advance

    def _decode_window(
        self, cross, prompt, *, timestamps, started, rng, max_new_tokens, eos_token_ids, **sampling
    ) -> tuple[list[int], GenerationStats]:
        """One window's new tokens (without the end token), through the timestamp rules when on,
        and the stats of its decoding."""
        generated: list[int] = []
        processors = [
            begin_suppress_tokens(self._setting("begin_suppress_tokens")),
            suppress_tokens(self._setting("suppress_tokens")),
        ]
        if timestamps:
            eos = self.eos_token_ids
            processors.append(
                timestamp_rules(
                    generated,
                    timestamp_begin=self.timestamp_begin,
                    no_timestamps_id=self.timestamp_begin - 1,
                    eos_id=eos[0] if eos else self._int("bos_token_id", 0),
                    max_initial_index=self._int("max_initial_timestamp_index", 0),
                )
            )
        context = self._int("max_target_positions", 1) or 0
        window = GenerationStats()
        for token in self._run_loop(
            self.decoder_step(cross),
            prompt,
            stats=window,
            started=started if not self.stats.seeks else time.perf_counter(),
            room=context - len(prompt) if context else None,
            eos_token_ids=eos_token_ids,
            max_new_tokens=max_new_tokens,
            processors=processors,
            seed=rng,  # decode_loop's default_rng(seed) hands a Generator back as it is
            **sampling,
        ):
            generated.append(token)
        return generated, window

    def _progress_bar(self, total: int, window: int):
        """A bar over the audio's seconds on stderr, for audio of several windows.

        Only on a terminal, and only when the text goes elsewhere (a file, a pipe):
        text printed to the terminal shows the progress itself, window by window,
        and would land inside the bar's line.
        """
        from tqdm.auto import tqdm

        shown = self.progress and total > window
        shown = shown and sys.stderr.isatty() and not sys.stdout.isatty()
        return tqdm(
            total=round(total * FRAME_SECONDS, 2),
            desc="transcribing",
            unit="s",
            leave=False,
            disable=not shown,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s [{elapsed}<{remaining}]",
        )

    # -- text ---------------------------------------------------------------------------

    def is_text(self, token: int) -> bool:
        """Whether ``token`` belongs in the text: not a timestamp."""
        begin = self.timestamp_begin
        return begin is None or token < begin

    def stream(self, prompt: str, *, chat_template: bool = True, system=None, **options):
        """Yield the transcription of the audio file at ``prompt``: text, or with ``timestamps``
        set (:meth:`set_options`) one ``[start -> end] text`` line per segment."""
        if not self.transcribe_options.get("timestamps"):
            yield from super().stream(prompt, chat_template=chat_template, system=system, **options)
            return
        audio, rate = self._read(prompt, system)
        segments = self.transcribe_segments(audio, rate, **self.transcribe_options, **options)
        for index, segment in enumerate(segments):
            yield ("\n" if index else "") + segment.line()


def _language_token(language: str, lang_to_id: dict) -> str:
    """``"<|de|>"`` for ``"<|de|>"``, ``"de"`` or ``"german"``, as transformers' Whisper reads them."""
    from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

    language = language.lower()
    if language in lang_to_id:
        return language
    return f"<|{TO_LANGUAGE_CODE.get(language, language)}|>"
