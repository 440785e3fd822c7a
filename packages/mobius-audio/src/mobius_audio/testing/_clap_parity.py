"""CLAP parity: both embeddings and both logits, ONNX Runtime against transformers' ``ClapModel``.

A tiny random ``ClapModel`` (every parameter and saved float buffer perturbed: the
BatchNorms' running statistics too) is saved with its ``ClapFeatureExtractor``
(``rand_trunc``, or ``fusion`` for a fused model) and a word-level tokenizer, built by
the ``mobius build`` path and run on a batch of two clips of different lengths against
two labels of different token lengths (padded, masked). The extractor's random draws
(a long clip's crops) follow ``numpy.random.seed(seed)``; the graph gets what it made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters, record_parity

#: The words of :func:`clap_tokenizer`: transformers' pipeline template and a few labels.
WORDS = ("This", "is", "a", "sound", "of", "dog", "barking.", "rain.", "dog.", "a.")


def clap_tokenizer():
    """A word-level RoBERTa-style tokenizer: ``<s>`` 0, ``<pad>`` 1 (CLAP's pad_token_id), right padding."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    vocab = {**specials, **{word: 4 + i for i, word in enumerate(WORDS)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        padding_side="right",
    )


def make_random_clap(hf_config, seed: int = 0):
    """A float32 ``ClapModel`` from ``hf_config``, every parameter perturbed, eval."""
    import torch
    from transformers import ClapModel

    torch.manual_seed(seed)
    model = ClapModel(hf_config).to(torch.float32)
    perturb_parameters(model, seed)
    return model.eval()


def save_clap_source(hf_config, extractor_options: dict, directory: Path, seed: int = 0):
    """The perturbed model, its ``ClapFeatureExtractor`` and tokenizer saved to ``directory``;
    the extractor truncates as the model takes it (``fusion`` for a fused model)."""
    from transformers import ClapFeatureExtractor

    model = make_random_clap(hf_config, seed)
    model.save_pretrained(directory)
    truncation = "fusion" if hf_config.audio_config.enable_fusion else "rand_trunc"
    extractor = ClapFeatureExtractor(truncation=truncation, **extractor_options)
    extractor.save_pretrained(directory)
    clap_tokenizer().save_pretrained(directory)
    return model, extractor


def random_clips(lengths: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(n) * 0.3).astype(np.float32) for n in lengths]


@dataclass
class ClapParity:
    """Max abs differences of the four outputs, per execution-provider build."""

    ep: str
    diffs: dict[str, float] = field(default_factory=dict)

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        assert len(self.diffs) == 4, f"--ep {self.ep}: compared only {sorted(self.diffs)}"
        assert max(self.diffs.values()) <= atol, f"--ep {self.ep}: {self.diffs} > {atol:g}"


def transformers_feeds(extractor, clips, texts, seed: int = 0) -> dict[str, np.ndarray]:
    """The graph's inputs from transformers' extractor (its torch path; its random crops
    drawn after ``numpy.random.seed(seed)``) and :func:`clap_tokenizer`."""
    np.random.seed(seed)
    features = extractor(clips, sampling_rate=extractor.sampling_rate, return_tensors="np")
    text = clap_tokenizer()(texts, padding=True, return_tensors="np")
    assert int(text["attention_mask"].min()) == 0, "the labels should pad (test the mask)"
    feeds = {
        "input_ids": text["input_ids"].astype(np.int64),
        "attention_mask": text["attention_mask"].astype(np.int64),
        "input_features": features["input_features"].astype(np.float32),
    }
    if extractor.truncation == "fusion":
        feeds["is_longer"] = np.asarray(features["is_longer"], bool)
    return feeds


def compare_clap(model, session, feeds: dict[str, np.ndarray]) -> dict[str, float]:
    """The graph and ``ClapModel`` on the same inputs: the max abs difference of each output."""
    import torch

    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, feeds), strict=True))
    with torch.no_grad():
        out = model(**{name: torch.from_numpy(value) for name, value in feeds.items()})
    diffs = {}
    for name in ("logits_per_audio", "logits_per_text", "text_embeds", "audio_embeds"):
        expected = getattr(out, name).float().numpy()
        assert got[name].shape == expected.shape, f"{name}: {got[name].shape} != {expected.shape}"
        diffs[name] = float(np.abs(got[name] - expected).max())
    return diffs


def check_clap_parity(
    hf_config,
    extractor_options: dict,
    workdir: Path,
    *,
    lengths: tuple[int, ...] = (4000, 2900),
    texts: tuple[str, ...] = ("This is a sound of dog barking.", "This is a sound of rain."),
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
) -> list[ClapParity]:
    """Build a perturbed tiny CLAP with the CLI per ``--ep`` and compare it with PyTorch."""
    import onnx
    import onnxruntime as ort

    workdir = Path(workdir)
    model, extractor = save_clap_source(hf_config, extractor_options, workdir / "hf", seed)
    clips = random_clips(lengths, seed)
    results = []
    for ep in eps:
        out = build_with_cli(workdir / "hf", workdir / f"onnx-{ep}", "--ep", ep)
        onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
        session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
        feeds = transformers_feeds(extractor, clips, list(texts), seed)
        result = ClapParity(ep, compare_clap(model, session, feeds))
        result.assert_close(atol)
        results.append(result)
    return results
