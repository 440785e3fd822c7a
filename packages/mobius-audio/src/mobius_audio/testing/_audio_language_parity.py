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


def tone_clip(seconds: float, seed: int, rate: int = 16_000) -> np.ndarray:
    """A tone with noise, float32 mono at ``rate``: each seed its own pitch and noise."""
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).standard_normal(t.shape)
    return (0.4 * np.sin(2 * np.pi * (220 + 110 * seed) * t) + 0.05 * noise).astype(np.float32)


def save_perturbed(model_class, config, directory: Path, *, prepare=None):
    """A transformers ``model_class(config)`` at fp32, every parameter perturbed (seed 0),
    saved to ``directory``; ``prepare(model)`` may set its generation config first."""
    import torch

    from mobius.testing import perturb_parameters

    torch.manual_seed(0)
    model = model_class(config).float().eval()
    perturb_parameters(model, seed=0)
    if prepare is not None:
        prepare(model)
    model.save_pretrained(directory)
    return model


def check_batch_and_generate(
    model, package: Path, ids, mask, audio: dict, *, pad_token_id: int, reference=None
) -> AudioLanguageParity:
    """:func:`compare_audio_language` on one batch, then transformers' greedy ``generate``
    on it: the package's four tokens must be transformers' own.

    ``reference`` defaults to ``model.get_audio_features(**audio).pooler_output``.
    """
    import torch

    feeds = {name: torch.from_numpy(value) for name, value in audio.items()}
    if reference is None:
        with torch.no_grad():
            reference = model.get_audio_features(**feeds).pooler_output.numpy()
    parity = compare_audio_language(model, package, ids, mask, audio, reference)
    parity.assert_close()
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            **feeds,
            do_sample=False,
            max_new_tokens=len(parity.tokens),
            eos_token_id=None,
            pad_token_id=pad_token_id,
        )
    np.testing.assert_array_equal(out[:, ids.shape[1] :].numpy(), np.stack(parity.tokens, axis=1))
    return parity


def check_hub_layout_builds_alike(source: Path, package: Path, workdir: Path, renames, inputs):
    """The source's weights under other prefixes (``renames``: old prefix -> new, e.g.
    transformers 5's in-memory names against the hub's) build a package whose prefill
    logits on ``inputs`` (the processor's ids and audio feeds) equal ``package``'s."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from mobius.testing import build_with_cli
    from mobius_audio.audio_language import OnnxAudioLanguage

    moved = shutil.copytree(source, workdir / "moved")
    renamed = {}
    for name, tensor in load_file(moved / "model.safetensors").items():
        old = next(prefix for prefix in renames if name.startswith(prefix))
        renamed[renames[old] + name[len(old) :]] = tensor
    save_file(renamed, moved / "model.safetensors", metadata={"format": "pt"})
    again = build_with_cli(moved, workdir / "out")
    audio = {k: v for k, v in inputs.items() if k != "input_ids"}
    ids = inputs["input_ids"]
    mask, positions = np.ones_like(ids), np.arange(ids.shape[1])[None]
    runs = [OnnxAudioLanguage(p) for p in (package, again)]
    (first, _), (second, _) = (r(ids, audio, mask, positions, r.empty_cache(1)) for r in runs)
    np.testing.assert_array_equal(first, second)


def transformers_text(model, processor, text: str, clips, max_new_tokens: int) -> str:
    """What transformers' greedy ``generate`` writes after ``text`` over ``clips``, decoded."""
    import torch

    inputs = processor(text=[text], audio=clips)
    with torch.no_grad():
        out = model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens)
    new = out[0, inputs["input_ids"].shape[1] :].tolist()
    return processor.tokenizer.decode(new, skip_special_tokens=True)


def check_python_m_generate(package: Path, prompt: str, wav: Path, expected: str, new_tokens: int):
    """``python -m mobius generate PACKAGE PROMPT --audio WAV`` prints ``expected``."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "mobius", "generate", str(package), prompt, "--audio", str(wav),
         "--max-new-tokens", str(new_tokens)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip("\n") == expected


def check_validate_passes(package: Path, source: Path, workdir: Path) -> None:
    """``mobius.validate.validate_package`` passes a copy of ``package`` against ``source``."""
    import shutil

    from mobius.validate import validate_package

    report = validate_package(shutil.copytree(package, workdir / "copy"), source)
    assert report.passed and report.tokens_agree, report
