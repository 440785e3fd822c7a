"""Parity of a built audio–language package with its transformers model, batch by batch.

:func:`compare_audio_language` feeds one batch (left-padded ids, the audio inputs by the
graph's names) to both: the audio graph's ``audio_features`` against ``reference``
(transformers' projected features, selected as its model selects them), the prefill
logits at every real position, then ``steps`` greedy tokens through the package's KV
cache (the package's choice fed to both), each step's logits against a full forward of
the longer sequence, and which token each side picks. transformers' generate positions are used (real tokens counted, 1 on
padding).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mobius.testing import PARITY_ATOL


def generate_positions(mask: np.ndarray) -> np.ndarray:
    """transformers' generate positions: the count of real tokens before, 1 on padding."""
    positions = np.cumsum(mask, axis=1) - 1
    return np.where(mask == 0, 1, positions).astype(np.int64)


@dataclass
class AudioLanguageParity:
    """The largest differences (features where checked, prefill, each step) and the greedy
    tokens (``[batch]`` a step), which both sides chose alike."""

    features_diff: float | None = None
    prefill_diff: float = 0.0
    decode_diffs: list[float] = field(default_factory=list)
    tokens: list[np.ndarray] = field(default_factory=list)
    torch_tokens: list[np.ndarray] = field(default_factory=list)

    @property
    def tokens_agree(self) -> bool:
        return all(
            np.array_equal(a, b) for a, b in zip(self.tokens, self.torch_tokens, strict=True)
        )

    @property
    def diffs(self) -> list[float]:
        features = [] if self.features_diff is None else [self.features_diff]
        return [*features, self.prefill_diff, *self.decode_diffs]

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        assert max(self.diffs) <= atol, f"max abs diffs {self.diffs} over {atol}"
        assert self.tokens_agree, (
            f"greedy tokens {self.tokens} != transformers' {self.torch_tokens}"
        )


def compare_audio_language(
    model, package: Path, ids, mask, audio: dict, reference: np.ndarray | None, steps: int = 4
) -> AudioLanguageParity:
    """Run the batch through ``model`` (transformers, float32, eval) and the package;
    ``reference`` None leaves the features to the logits' check."""
    import torch

    from mobius_audio.audio_language import OnnxAudioLanguage

    def torch_logits(ids, mask):
        feeds = {name: torch.from_numpy(value) for name, value in audio.items()}
        with torch.no_grad():
            out = model(
                input_ids=torch.from_numpy(ids),
                attention_mask=torch.from_numpy(mask),
                position_ids=torch.from_numpy(generate_positions(mask)),
                **feeds,
            )
        return out.logits.numpy()

    onnx = OnnxAudioLanguage(package)
    result = AudioLanguageParity()
    if reference is not None:
        features = onnx.encoder_features(audio)["audio_features"]
        assert features.shape == reference.shape, (features.shape, reference.shape)
        result.features_diff = float(np.abs(features - reference).max())
    expected = torch_logits(ids, mask)
    batch = ids.shape[0]
    logits, cache = onnx(ids, audio, mask, generate_positions(mask), onnx.empty_cache(batch))
    real = mask.astype(bool)
    result.prefill_diff = float(np.abs(logits[real] - expected[real]).max())
    for _ in range(steps):
        following = logits[:, -1].argmax(-1)[:, None]
        result.tokens.append(following[:, 0])
        result.torch_tokens.append(expected[:, -1].argmax(-1))
        ids = np.concatenate([ids, following], axis=1)
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
        expected = torch_logits(ids, mask)
        logits, cache = onnx(following, None, mask, generate_positions(mask)[:, -1:], cache)
        result.decode_diffs.append(float(np.abs(logits[:, -1] - expected[:, -1]).max()))
    return result
