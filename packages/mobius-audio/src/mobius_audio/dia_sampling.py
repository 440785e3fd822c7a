"""Dia's next-frame choice in numpy: guidance, the end-of-audio rules, then greedy or sampling.

The steps and their order are transformers' (``DiaGenerationMixin._get_logits_processor``)
on scores ``[batch, channels, vocab]`` of one frame:

1. classifier-free guidance: ``cond + (cond - uncond) * scale``; with ``top_k``, the
   conditioned scores kept on the ``top_k`` best of that mix (``DiaClassifierFreeGuidanceLogitsProcessor``);
2. temperature (Dia lifts one below 1 to 1);
3. only channel 0 may end the audio (``eos``), and ids above ``eos`` (pad, bos) never
   come; a row whose best is ``eos`` keeps only ``eos``, any other row never takes it;
4. sampling only: top-k, then top-p (transformers' warpers, ties kept);
5. once channel 0 ended (or the frame budget ran out), each channel is made to end
   ``delay`` frames later (``DiaEOSDelayPatternLogitsProcessor``).

Then the best id (greedy) or one drawn from the softmax with the caller's numpy
generator (``--seed``): the draws are reproducible, not torch's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NEG_INF = -np.inf


@dataclass
class DiaSampling:
    """How the next frame is chosen; ``guidance_scale`` None or 1 is no guidance."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = 50
    top_p: float = 1.0
    guidance_scale: float | None = None

    @property
    def guided(self) -> bool:
        return self.guidance_scale is not None and self.guidance_scale != 1


def guide(cond: np.ndarray, uncond: np.ndarray, scale: float, top_k: int | None) -> np.ndarray:
    """Step 1: the guided mix, or with ``top_k`` the conditioned scores on the mix's best ``top_k``."""
    mixed = cond + (cond - uncond) * scale
    if not top_k:
        return mixed
    return np.where(top_k_mask(mixed, top_k), cond, NEG_INF)


def top_k_mask(scores: np.ndarray, k: int) -> np.ndarray:
    """True for the ``k`` highest scores of each row (and any tied with the ``k``-th)."""
    k = min(k, scores.shape[-1])
    kth = np.sort(scores, axis=-1)[..., -k, None]
    return scores >= kth


def filter_eos(scores: np.ndarray, eos: int) -> np.ndarray:
    """Step 3 on ``[batch, channels, vocab]``: only channel 0 ends, and only when ``eos`` is its best."""
    scores = scores.copy()
    scores[:, 1:, eos:] = NEG_INF
    scores[:, 0, eos + 1 :] = NEG_INF
    best_is_eos = scores.argmax(-1) == eos
    below = np.arange(scores.shape[-1]) < eos
    scores[best_is_eos[..., None] & below] = NEG_INF
    scores[..., eos] = np.where(best_is_eos, scores[..., eos], NEG_INF)
    return scores


def top_p_mask(scores: np.ndarray, top_p: float) -> np.ndarray:
    """True for the smallest set of likeliest ids whose probability reaches ``top_p`` (at least one)."""
    order = np.argsort(scores, axis=-1, kind="stable")  # ascending, as transformers sorts
    ordered = np.take_along_axis(scores, order, -1)
    probs = softmax(ordered)
    removed = np.cumsum(probs, axis=-1) <= 1 - top_p
    removed[..., -1] = False
    keep = np.empty_like(removed)
    np.put_along_axis(keep, order, ~removed, -1)
    return keep


def softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


class EndForcing:
    """Step 5: after channel 0's ``eos`` (or at ``last_frame``), channel ``c`` ends ``delay[c]`` frames later."""

    def __init__(self, delays: list[int], batch: int, eos: int, last_frame: int) -> None:
        self.left = np.tile(np.asarray(delays, np.int64), (batch, 1))  # [batch, channels]
        self.ended = np.zeros(batch, bool)
        self.eos, self.last_frame = eos, last_frame

    def __call__(self, scores: np.ndarray, length: int) -> np.ndarray:
        """``scores [batch, channels, vocab]`` of the frame after ``length`` frames."""
        self.ended |= scores[:, 0].argmax(-1) == self.eos
        self.ended |= length == self.last_frame
        forced = self.ended[:, None] & (self.left == 0)
        scores = scores.copy()
        scores[forced] = NEG_INF
        scores[forced, self.eos] = 0.0
        self.left -= self.ended[:, None]
        return scores


def warp(scores: np.ndarray, sampling: DiaSampling) -> np.ndarray:
    """Step 4: sampling keeps the ``top_k`` best, then the ``top_p`` nucleus; greedy keeps all."""
    if not sampling.do_sample:
        return scores
    if sampling.top_k:
        scores = np.where(top_k_mask(scores, sampling.top_k), scores, NEG_INF)
    if sampling.top_p < 1.0:
        scores = np.where(top_p_mask(scores, sampling.top_p), scores, NEG_INF)
    return scores


def pick(scores: np.ndarray, do_sample: bool, rng: np.random.Generator) -> np.ndarray:
    """The chosen ids, int64 ``[batch, channels]``: the best, or one drawn from the softmax."""
    if not do_sample:
        return scores.argmax(-1)
    cumulative = np.cumsum(softmax(scores), axis=-1)
    # A draw in (0, total]: the first id whose cumulative probability reaches it (never a zero one).
    draws = (1.0 - rng.random(scores.shape[:-1]))[..., None] * cumulative[..., -1:]
    return np.minimum((cumulative < draws).sum(-1), scores.shape[-1] - 1)
