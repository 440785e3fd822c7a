"""Whisper's timestamp rules and window splitting, as transformers' Whisper ``generate`` has them.

Long-form transcription decodes one window of features at a time (30 s for the
released checkpoints). With timestamps on, :func:`timestamp_rules` constrains each
window's tokens: it starts with a timestamp, timestamps come in pairs that close one
segment and open the next, never go backwards, and win whenever their probability
mass beats the likeliest text token. :func:`split_window` then cuts the window's
tokens into :class:`Segment` objects at the pairs and says how far to move on: to the
last pair's time when the window ends mid-segment (the unfinished segment is decoded
again from there), the whole window otherwise. Pure numpy; the decoder loop is
:class:`mobius_audio.whisper_generate.WhisperGenerator`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from mobius.generate import GenerationStats, LogitsProcessor

#: Seconds per timestamp token, and per feature frame (hop 160 at 16 kHz).
TIME_PRECISION = 0.02
FRAME_SECONDS = 0.01
#: Feature frames per encoder position: Whisper's two convolutions stride 1 and 2.
INPUT_STRIDE = 2
# Long-form settings of transformers' generate, off by default, that mobius does not implement.
NOT_IMPLEMENTED = (
    "condition_on_prev_tokens",
    "compression_ratio_threshold",
    "logprob_threshold",
    "no_speech_threshold",
)

logger = logging.getLogger("mobius.audio")


@dataclass
class Segment:
    """A transcribed stretch: ``start`` and ``end`` in seconds from the audio's start, its tokens.

    ``tokens`` are those transformers returns for it, timestamp tokens included;
    ``text`` is filled in by the generator that decodes them.
    """

    start: float
    end: float
    tokens: list[int] = field(default_factory=list)
    text: str = ""

    def line(self) -> str:
        """``[0.00 -> 4.20] text``: the segment as ``mobius generate --timestamps`` prints it."""
        return f"[{self.start:.2f} -> {self.end:.2f}] {self.text.strip()}"


@dataclass
class TranscriptionStats(GenerationStats):
    """:class:`~mobius.generate.GenerationStats` over all windows, with the audio and its language."""

    audio_seconds: float = 0.0
    language: str = ""
    #: The decoder prompt every window starts from, and the feature frame each window started at.
    prompt: list[int] = field(default_factory=list)
    seeks: list[int] = field(default_factory=list)

    @property
    def windows(self) -> int:
        return len(self.seeks)

    def add_window(self, seek: int, window: GenerationStats) -> None:
        """Count in the decoding of the window that started at frame ``seek``."""
        if not self.seeks:
            self.time_to_first_token_s = window.time_to_first_token_s
        self.seeks.append(seek)
        self.new_tokens += window.new_tokens
        self.decode_time_s += window.decode_time_s
        self.stop_reason = window.stop_reason

    def summary(self) -> str:
        language = f", language {self.language}" if self.language else ""
        return (
            f"{self.audio_seconds:.1f} s of audio in {self.windows} window"
            f"{'s' if self.windows != 1 else ''}{language}; {super().summary()}"
        )


def timestamp_rules(
    generated: list[int],
    *,
    timestamp_begin: int,
    no_timestamps_id: int,
    eos_id: int,
    max_initial_index: int | None,
) -> LogitsProcessor:
    """The logits processor of Whisper's timestamp rules over one window's ``generated`` tokens.

    ``generated`` is the list the caller appends each new token to: a token is
    yielded by the decode loop before the next step's logits are processed, so it
    holds every token before the current step. Ids from ``timestamp_begin`` up are
    timestamps (``TIME_PRECISION`` seconds each); ``<|notimestamps|>`` is never
    generated; the first token is a timestamp no later than ``max_initial_index``.
    """

    def process(step: int, last: bool, logits: np.ndarray) -> np.ndarray:
        logits[no_timestamps_id] = -np.inf
        last_is_stamp = len(generated) >= 1 and generated[-1] >= timestamp_begin
        before_is_stamp = len(generated) < 2 or generated[-2] >= timestamp_begin
        if last_is_stamp:
            if before_is_stamp:  # a pair just closed (or the opening stamp): text next
                logits[timestamp_begin:] = -np.inf
            else:  # a segment's closing stamp: its pair, or the end token
                logits[:eos_id] = -np.inf
        stamps = [token for token in generated if token >= timestamp_begin]
        if stamps:  # never backwards; the second of a pair may repeat the first
            floor = stamps[-1] if last_is_stamp and not before_is_stamp else stamps[-1] + 1
            logits[timestamp_begin:floor] = -np.inf
        if not generated:
            logits[:timestamp_begin] = -np.inf
            if max_initial_index is not None:
                logits[timestamp_begin + max_initial_index + 1 :] = -np.inf
        # Timestamps win when their total probability beats the likeliest text token;
        # the shared softmax normaliser cancels, so compare in logit space.
        stamp_mass = _logsumexp(logits[timestamp_begin:])
        if stamp_mass > np.max(logits[:timestamp_begin]):
            logits[:timestamp_begin] = -np.inf
        return logits

    return process


def _logsumexp(values: np.ndarray) -> float:
    top = np.max(values)
    if not np.isfinite(top):
        return float(top)
    return float(top + np.log(np.sum(np.exp(values.astype(np.float64) - top))))


def split_window(
    tokens: list[int], *, timestamp_begin: int, seek: int, window_frames: int
) -> tuple[list[Segment], int]:
    """``(segments, advance)``: one window's tokens cut at its timestamp pairs, and the frames to move on.

    ``tokens`` are the window's new tokens without the end token; ``seek`` is the
    window's first feature frame and ``window_frames`` how many real frames it
    holds. Times are computed in the order transformers computes them, so they are
    equal to its segments' ``start`` and ``end`` to the last bit.
    """
    offset = seek * TIME_PRECISION / INPUT_STRIDE
    is_stamp = [token >= timestamp_begin for token in tokens]
    single_ending = is_stamp[-2:] == [False, True]  # text, then one closing stamp
    pair_ends = [i + 1 for i in range(len(tokens) - 1) if is_stamp[i] and is_stamp[i + 1]]
    if not pair_ends:  # one segment: up to its last stamp, else the whole window
        stamps = [token for token in tokens if token >= timestamp_begin]
        # transformers computes this one in float32 (a tensor times a Python float)
        end = int(
            np.float32(window_frames) * np.float32(FRAME_SECONDS) / np.float32(TIME_PRECISION)
        )
        if stamps and stamps[-1] != timestamp_begin:
            end = stamps[-1] - timestamp_begin
        segment = Segment(offset, offset + float(end) * TIME_PRECISION, list(tokens))
        return [segment], window_frames
    cuts = list(pair_ends)
    if single_ending:
        cuts.append(len(tokens))
    else:
        cuts[-1] += 1  # the last segment keeps both stamps of its closing pair
    segments, begin = [], 0
    for index, cut in enumerate(cuts):
        piece = tokens[begin:cut]
        closing = -1 if index < len(cuts) - 1 or single_ending else -2
        start = offset + float(piece[0] - timestamp_begin) * TIME_PRECISION
        end = offset + float(piece[closing] - timestamp_begin) * TIME_PRECISION
        segments.append(Segment(start, end, piece))
        begin = cut
    if single_ending:  # nothing was left unfinished: the window is done
        return segments, window_frames
    # Cut mid-segment: drop what follows the last pair and decode again from its time.
    return segments, (tokens[begin - 2] - timestamp_begin) * INPUT_STRIDE


def note_unimplemented(config: dict) -> None:
    """Say which of the generation config's settings mobius decodes without."""
    unused = [key for key in NOT_IMPLEMENTED if config.get(key) not in (None, False)]
    if isinstance(config.get("temperature"), list):
        unused.append("temperature fallback")
    if unused:
        logger.warning(
            "the generation config sets %s, which mobius does not implement: decoding without",
            ", ".join(unused),
        )
