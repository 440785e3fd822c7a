"""Text-to-audio parity: the waveform of a built VITS package against transformers' VitsModel.

transformers draws its noise with ``torch.randn`` (the duration latents) and
``torch.randn_like`` (the prior sample); mobius takes both as graph inputs. The
kit runs the package through the runner's own path (:class:`mobius_audio.tts.TextToAudio`)
with a seeded numpy generator and makes PyTorch's two calls draw from a second
generator of the same seed (:func:`numpy_noise_in_torch`): same seed, same noise.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters, record_parity

#: A character vocabulary for tiny tokenizers: the blank first, as VITS wants it.
TINY_VOCAB = ["<pad>", " ", *"abcdefghijklmnopqrstuvwxyz", "'", "<unk>"]


def save_tiny_tokenizer(directory: Path, **settings):
    """A ``VitsTokenizer`` over :data:`TINY_VOCAB` (no phonemizer), saved in ``directory``."""
    from transformers import VitsTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    vocab = directory / "vocab.json"
    vocab.write_text(json.dumps({c: i for i, c in enumerate(TINY_VOCAB)}), encoding="utf-8")
    tokenizer = VitsTokenizer(str(vocab), phonemize=False, **settings)
    tokenizer.save_pretrained(str(directory))
    return tokenizer


def make_random_vits(hf_config, directory: Path, seed: int = 0):
    """A float32 ``VitsModel`` with every parameter perturbed, saved with a tiny tokenizer."""
    import torch
    from transformers import VitsModel

    torch.manual_seed(seed)
    model = VitsModel(hf_config).float()
    perturb_parameters(model, seed)
    model.eval()
    model.save_pretrained(directory)
    save_tiny_tokenizer(directory)
    return model


@contextmanager
def numpy_noise_in_torch(seed: int):
    """``torch.randn`` and ``torch.randn_like`` draw from ``np.random.default_rng(seed)``.

    The runner draws its graphs' noise from that generator in the order transformers
    calls these two (the duration latents, then the prior sample): under this patch
    both see the same numbers.
    """
    from unittest import mock

    import torch

    rng = np.random.default_rng(seed)

    def draw(shape):
        return torch.from_numpy(rng.standard_normal(tuple(shape)).astype(np.float32))

    def randn(*size, **_):
        return draw(size[0] if len(size) == 1 and not isinstance(size[0], int) else size)

    def randn_like(tensor, **_):
        return draw(tensor.shape)

    with (
        mock.patch.object(torch, "randn", randn),
        mock.patch.object(torch, "randn_like", randn_like),
    ):
        yield


def speak_with_torch(torch_model, feeds: dict[str, np.ndarray], seed: int):
    """transformers' ``VitsModel`` output on ``feeds`` with the runner's noise for ``seed``.

    transformers takes one ``speaker_id`` for the batch: the first of ``feeds``'.
    """
    import torch

    speaker = feeds.get("speaker_id")
    with torch.no_grad(), numpy_noise_in_torch(seed):
        return torch_model(
            input_ids=torch.from_numpy(feeds["input_ids"]),
            attention_mask=torch.from_numpy(feeds["attention_mask"]),
            speaker_id=None if speaker is None else int(speaker[0]),
        )


@dataclass
class TtsParity:
    """Max abs difference of the waveform, and each clip's length here and in transformers."""

    texts: tuple[str, ...]
    diffs: dict[str, float] = field(default_factory=dict)
    lengths: list[int] = field(default_factory=list)
    expected_lengths: list[int] = field(default_factory=list)

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        assert self.lengths == self.expected_lengths, (
            f"{self.texts}: clip lengths {self.lengths} != transformers' {self.expected_lengths}"
        )
        assert self.diffs, "no output was compared"
        assert max(self.diffs.values()) <= atol, f"{self.texts}: {self.diffs} > {atol:g}"


def compare_tts(
    torch_model, model, texts: list[str], seed: int = 0, speaker: int | None = None
) -> TtsParity:
    """Speak ``texts`` as one batch with ``model`` (a :class:`mobius_audio.tts.TextToAudio`)
    and with PyTorch on the same noise; a waveform of another shape differs by infinity."""
    from mobius_audio.tts import tokenize

    feeds = tokenize(model.tokenizer, texts)
    feeds.update(model.speaker_feeds(speaker, len(texts)))
    waveform, lengths = model.run_batch(feeds, np.random.default_rng(seed))
    reference = speak_with_torch(torch_model, feeds, seed)
    expected = reference.waveform.numpy()
    result = TtsParity(tuple(texts), lengths=lengths.tolist())
    result.expected_lengths = reference.sequence_lengths.tolist()
    same_shape = waveform.shape == expected.shape
    result.diffs["waveform"] = float(np.abs(waveform - expected).max()) if same_shape else np.inf
    return result


def check_tts_parity(
    hf_config,
    workdir: Path,
    *,
    texts: tuple[str, ...] = ("hello world", "hi there"),
    seed: int = 0,
    speaker: int | None = None,
    atol: float = PARITY_ATOL,
) -> TtsParity:
    """Build a perturbed tiny VITS with the CLI and compare a batch of ``texts`` with PyTorch."""
    workdir = Path(workdir)
    torch_model = make_random_vits(hf_config, workdir / "hf", seed)
    package = build_with_cli(workdir / "hf", workdir / "onnx")
    for stage in ("text_encoder", "vocoder"):
        onnx.checker.check_model(str(package / stage / "model.onnx"), full_check=True)
    from mobius_audio.tts import TextToAudio

    result = compare_tts(torch_model, TextToAudio(package), list(texts), seed, speaker)
    result.assert_close(atol)
    return result
