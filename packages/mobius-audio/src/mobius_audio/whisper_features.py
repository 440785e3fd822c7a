"""Whisper's log-mel features in vectorised numpy: transformers' numpy path, without its frame loop.

transformers' ``WhisperFeatureExtractor`` (numpy path, as mobius runs it: no torch)
takes one FFT per 10 ms frame in a Python loop, 3,000 of them per 30 s window: on
2 threads that is most of the time a short transcription spends outside the graphs.
:func:`whisper_log_mel` computes the same features with all frames of a block in one
``numpy.fft.rfft`` call: the clip zero-padded to the extractor's ``n_samples`` (or cut
to it), or, with ``padding="longest"`` (long-form audio), kept whole; reflection
padding of ``n_fft // 2`` on both sides; a periodic Hann window; the power spectrum
(stored in complex64 first, as transformers does); the extractor's mel filters;
``log10`` floored at 1e-10, cast to float32; the last frame dropped; floored at the
maximum minus 8 and mapped by ``(x + 4) / 4``. Equal to transformers' within 1e-5
(``tests/test_whisper_features.py``).

:func:`supports` says whether an extractor is one this covers: a
``WhisperFeatureExtractor`` without dither (random noise); any other goes through
transformers.

The mel projection is a matrix product, which numpy hands to its BLAS. OpenBLAS's
threads then spin for tens of milliseconds after the call, on the cores ONNX Runtime
runs the encoder on next (Whisper-tiny's encoder: 200 against 146 ms on 2 threads).
So the projection runs on one BLAS thread where threadpoolctl is installed
(``mobius-audio[run]``): at about 5 ms for a 30 s window, one thread is enough.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np

#: Frames per rfft call. Small blocks keep the float64 temporaries (0.8 MB each) in
#: malloc's heap, reused from call to call; 4096-frame blocks (10-13 MB) went back to the
#: kernel after each call and came back as fresh pages, which with the huge pages of
#: ``mobius generate`` (mobius._huge_pages) cost 97 ms a 30 s window (now 22-36 ms).
BLOCK_FRAMES = 256


def supports(extractor) -> bool:
    """Whether ``extractor`` is a Whisper extractor :func:`whisper_log_mel` computes exactly."""
    # (do_normalize is an argument of the extractor's call, which mobius never passes.)
    return type(extractor).__name__ == "WhisperFeatureExtractor" and not getattr(
        extractor, "dither", 0.0
    )


def whisper_log_mel(
    extractor, audio: np.ndarray, *, truncation: bool = True, padding: str = "max_length"
) -> np.ndarray:
    """``input_features`` float32 ``[1, mels, frames]`` of one mono clip at the extractor's rate.

    ``truncation`` and ``padding`` as transformers' extractor takes them: by default
    the clip is padded with zeros or cut to ``n_samples`` (3,000 frames at 30 s);
    ``truncation=False, padding="longest"`` keeps it whole (long-form audio).
    """
    from transformers.audio_utils import window_function  # numpy

    samples = np.asarray(audio, np.float32).reshape(-1)
    window_samples = int(extractor.n_samples)
    if truncation and samples.size > window_samples:
        samples = samples[:window_samples]
    if padding == "max_length" and samples.size < window_samples:
        samples = np.pad(samples, (0, window_samples - samples.size))
    n_fft, hop = int(extractor.n_fft), int(extractor.hop_length)
    padded = np.pad(samples, n_fft // 2, mode="reflect")  # float32: cast block by block
    frames = 1 + (padded.size - n_fft) // hop
    window = window_function(n_fft, "hann").astype(np.float64)  # periodic Hann
    filters = np.asarray(extractor.mel_filters, np.float64)  # [freqs, mels]
    views = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop]  # [frames, n_fft]
    log = np.empty((filters.shape[1], frames), np.float32)  # [mels, frames]
    with _one_blas_thread():
        for start in range(0, frames, BLOCK_FRAMES):
            block = views[start : start + BLOCK_FRAMES].astype(np.float64) * window
            spectrum = np.fft.rfft(block, axis=-1).astype(np.complex64)  # [block, freqs]
            power = np.abs(spectrum, dtype=np.float64) ** 2
            mel = np.maximum(1e-10, power @ filters)  # [block, mels]
            log[:, start : start + len(block)] = np.log10(mel).T
    log = log[:, :-1]
    log = np.maximum(log, log.max() - 8.0)
    return ((log + 4.0) / 4.0)[None]


def _one_blas_thread():
    """A context in which numpy's BLAS runs one thread (a no-op without threadpoolctl)."""
    controller = _blas_controller()
    return controller.limit(limits=1, user_api="blas") if controller else contextlib.nullcontext()


@functools.cache
def _blas_controller():
    """threadpoolctl's view of the loaded BLAS libraries, made once (it scans the process)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()
