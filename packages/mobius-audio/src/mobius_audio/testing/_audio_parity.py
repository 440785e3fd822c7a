"""Audio-encoder parity: frame features, CTC and utterance logits, ONNX Runtime against PyTorch.

The inputs come from the real feature extractor on random audio of different
lengths (batch 2, padded): ``Wav2Vec2FeatureExtractor``'s waveforms for a model
whose main input is ``input_values``, ``SeamlessM4TFeatureExtractor``'s stacked
fbank frames for one that takes ``input_features`` (Wav2Vec2-BERT). Without a
mask (``return_attention_mask=False``, base wav2vec2 with group norm)
transformers runs the padded batch unmasked; the graph then gets all ones, which
is the same computation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters, record_parity

#: ``head`` -> the transformers auto class of its checkpoint.
_AUTO_CLASSES = {
    "none": "AutoModel",
    "ctc": "AutoModelForCTC",
    "sequence-classification": "AutoModelForAudioClassification",
    "audio-frame-classification": "AutoModelForAudioFrameClassification",
    "xvector": "AutoModelForAudioXVector",
}


def make_random_audio_model(hf_config, head: str, seed: int = 0):
    """A float32 transformers audio encoder for ``head``, every parameter perturbed, eval."""
    import torch
    import transformers

    torch.manual_seed(seed)
    auto = getattr(transformers, _AUTO_CLASSES[head])
    model = auto.from_config(hf_config, dtype=torch.float32, attn_implementation="eager")
    perturb_parameters(model, seed)
    return model.eval()


def random_audio_batch(
    lengths: list[int], with_mask: bool, seed: int = 0, input_name: str = "input_values"
) -> dict[str, np.ndarray]:
    """``input_name`` (and ``attention_mask`` when ``with_mask``) from the real feature extractor.

    ``input_values``: normalised waveforms; ``input_features``: SeamlessM4T's 80-bin
    fbank, two frames stacked (160 features), the mask per stacked frame.
    """
    from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2FeatureExtractor

    rng = np.random.default_rng(seed)
    audio = [rng.standard_normal(n).astype(np.float32) * 0.3 for n in lengths]
    if input_name == "input_features":
        extractor = SeamlessM4TFeatureExtractor(return_attention_mask=with_mask)
    else:
        extractor = Wav2Vec2FeatureExtractor(
            feature_size=1,
            sampling_rate=16000,
            padding_value=0.0,
            do_normalize=True,
            return_attention_mask=with_mask,
        )
    features = extractor(audio, sampling_rate=16000, padding=True, return_tensors="np")
    return {k: np.asarray(v) for k, v in features.items()}


def extracted_batch(feature_extractor, lengths: list[int], with_mask: bool, seed: int = 0):
    """:func:`random_audio_batch`'s clips through ``feature_extractor`` (mask dropped unless ``with_mask``)."""
    rng = np.random.default_rng(seed)
    audio = [rng.standard_normal(n).astype(np.float32) * 0.3 for n in lengths]
    rate = feature_extractor.sampling_rate
    features = feature_extractor(audio, sampling_rate=rate, padding=True, return_tensors="np")
    features = {k: np.asarray(v) for k, v in features.items()}
    if not with_mask:
        features.pop("attention_mask", None)
    return features


@dataclass
class AudioParity:
    """Max abs differences of one head's outputs, with or without the mask."""

    head: str
    ep: str
    with_mask: bool
    diffs: dict[str, float] = field(default_factory=dict)

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        what = f"--ep {self.ep} head {self.head} mask={self.with_mask}"
        assert self.diffs, f"{what}: no output was compared"
        if self.head != "none":  # a head the build missed would leave last_hidden_state alone
            assert set(self.diffs) - {"last_hidden_state"}, f"{what}: the head has no output"
        assert max(self.diffs.values()) <= atol, f"{what}: {self.diffs} > {atol:g}"


def compare_audio(torch_model, session, features: dict[str, np.ndarray]) -> dict[str, float]:
    """Run the batch through both; the max abs difference of every graph output."""
    import torch

    input_name = torch_model.main_input_name  # input_values, or input_features
    values = features[input_name].astype(np.float32)
    mask = features.get("attention_mask")
    feeds = {
        input_name: values,
        "attention_mask": (np.ones(values.shape[:2], np.int64) if mask is None else mask).astype(
            np.int64
        ),
    }
    taken = {i.name for i in session.get_inputs()}  # AST's fixed window takes no mask
    feeds = {name: value for name, value in feeds.items() if name in taken}
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, feeds), strict=True))
    with torch.no_grad():
        kwargs = {input_name: torch.from_numpy(values)}
        if mask is not None:
            kwargs["attention_mask"] = torch.from_numpy(mask.astype(np.int64))
        # A head model's graph also returns the base model's final states.
        base = torch_model.base_model(**kwargs)
        if "last_hidden_state" not in base:  # a head over an encoder attribute (ParakeetForCTC)
            base = torch_model.get_encoder()(**kwargs)
        reference = {"last_hidden_state": base.last_hidden_state}
        if set(got) - set(reference):  # the head's: logits, and the x-vector's embeddings
            output = torch_model(**kwargs)
            reference.update({name: output[name] for name in set(got) - set(reference)})
    diffs = {}
    for name, value in got.items():
        expected = reference[name].float().numpy()
        assert value.shape == expected.shape, f"{name}: {value.shape} != {expected.shape}"
        diffs[name] = float(np.abs(value - expected).max())
    return diffs


def check_audio_parity(
    hf_config,
    workdir: Path,
    *,
    heads: tuple[str, ...] = ("none",),
    lengths: tuple[int, ...] = (1600, 1123),
    masks: tuple[bool, ...] = (True, False),
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
    feature_extractor=None,
) -> list[AudioParity]:
    """Build a perturbed tiny audio encoder per head with the CLI and check it against PyTorch.

    Each head is compared on a batch of 2 padded waveforms, with the attention mask
    and without it (``masks``), on every execution-provider build in ``eps``.
    ``feature_extractor``: a transformers extractor for a model that takes neither
    of :func:`random_audio_batch`'s inputs (Parakeet's log-mels).
    """
    import onnxruntime as ort

    workdir = Path(workdir)
    results = []
    for head in heads:
        torch_model = make_random_audio_model(hf_config, head, seed)
        source = workdir / f"hf-{head}"
        torch_model.save_pretrained(source)
        for ep in eps:
            out = build_with_cli(source, workdir / f"onnx-{head}-{ep}", "--ep", ep)
            if ep == "default":
                onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
            session = ort.InferenceSession(
                str(out / "model.onnx"), providers=["CPUExecutionProvider"]
            )
            for with_mask in masks:
                if feature_extractor is not None:
                    features = extracted_batch(feature_extractor, list(lengths), with_mask, seed)
                else:
                    features = random_audio_batch(
                        list(lengths), with_mask, seed, torch_model.main_input_name
                    )
                diffs = compare_audio(torch_model, session, features)
                result = AudioParity(head, ep, with_mask, diffs)
                result.assert_close(atol)
                results.append(result)
    return results
