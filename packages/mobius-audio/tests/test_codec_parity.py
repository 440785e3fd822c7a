"""Synthetic parity of every registered audio-codec type against PyTorch.

Each case (``codec_cases/``) makes a tiny random codec with every parameter
perturbed, builds it with the CLI path (``--ep default`` and ``cpu``), and checks
a batch of two clips of different lengths padded by the model's feature
extractor: the codes equal transformers' ``encode``, the decoded audio within
1e-4 of its ``decode`` with every codebook and with one.
"""

from __future__ import annotations

import pytest
import transformers
from codec_cases import all_cases
from transformers import AutoConfig

import mobius_audio
from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_audio.testing._codec_parity import (
    check_codec_parity,
    compare_codec,
    make_random_codec,
    random_clips,
)

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_codec_parity(case, tmp_path):
    model_type, overrides, extractor_class, extractor_kwargs, *options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    extractor = getattr(transformers, extractor_class)(**extractor_kwargs)
    options = options[0] if options else {}
    results = check_codec_parity(hf_config, extractor, tmp_path, **options)
    assert [r.ep for r in results] == list(options.get("eps", ("default", "cpu")))
    print(case, [(r.ep, r.codes_shape, r.diffs) for r in results])


def test_dac_weight_norm_checkpoint_is_folded(tmp_path):
    """A checkpoint saved with weight norm (``parametrizations.weight.original0/1``, as
    DAC's own checkpoints store their convolutions) builds to the same codes and audio."""
    model_type, overrides, _, extractor_kwargs, *_ = CASES["dac"]
    model = make_random_codec(AutoConfig.for_model(model_type, **overrides))
    model.apply_weight_norm()
    model.save_pretrained(tmp_path / "hf")
    extractor = transformers.DacFeatureExtractor(**extractor_kwargs)
    extractor.save_pretrained(tmp_path / "hf")
    assert "parametrizations.weight.original0" in (
        tmp_path / "hf/model.safetensors"
    ).read_bytes().decode("latin-1")
    package = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    batch = extractor(random_clips((900, 700)), sampling_rate=16000, return_tensors="np")
    result = compare_codec(model, package, batch["input_values"], "default")
    result.assert_close()


def test_encodec_reflects_short_clips_as_transformers(tmp_path):
    """Clips of 1 to 13 samples, no longer than the reflect padding at some layer: transformers
    zero-pads them first; the graph must do the same (non-causal: the right side is longer)."""
    import numpy as np
    import onnxruntime as ort
    from codec_cases.encodec import ENCODEC

    from mobius_audio.testing._codec_parity import torch_codes_and_audio

    config = AutoConfig.for_model("encodec", **dict(ENCODEC, use_causal_conv=False))
    model = make_random_codec(config)
    model.save_pretrained(tmp_path / "hf")
    package = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    encoder = ort.InferenceSession(str(package / "encoder/model.onnx"))
    decoder = ort.InferenceSession(str(package / "decoder/model.onnx"))
    for length in range(1, 14):
        clip = np.random.default_rng(length).standard_normal((1, 1, length)).astype(np.float32)
        codes, audio = torch_codes_and_audio(model, clip, [config.num_quantizers])
        assert np.array_equal(encoder.run(None, {"input_values": clip})[0], codes), length
        decoded = decoder.run(None, {"audio_codes": codes})[0]
        assert np.abs(decoded - audio[config.num_quantizers]).max() <= PARITY_ATOL, length


def test_unbuilt_configs_are_refused(tmp_path, capsys):
    """One line each, naming the setting: EnCodec's chunks overlapping by more than a stride,
    other norms; bad DAC values."""
    from codec_cases.dac import DAC
    from codec_cases.encodec import ENCODEC

    from mobius.cli import main

    refusals = {
        "overlap by more than a stride": ("encodec", dict(chunk_length_s=0.01, overlap=0.6)),
        "encodec overlap None must be a number": ("encodec", dict(chunk_length_s=0.01)),
        "leave no codebook": ("encodec", dict(target_bandwidths=[1.0])),
        "dac decoder_hidden_size 10 must halve 2 times": ("dac", dict(decoder_hidden_size=10)),
    }  # fmt: skip
    for i, (message, (model_type, change)) in enumerate(refusals.items()):
        base = ENCODEC if model_type == "encodec" else DAC
        source = tmp_path / f"hf-{i}"
        AutoConfig.for_model(model_type, **{**base, **change}).save_pretrained(source)
        capsys.readouterr()
        assert main(["build", "--model", str(source), str(tmp_path / f"out-{i}"), "-q"]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err


def test_fold_weight_norm_reads_both_spellings():
    """``weight_g``/``weight_v`` (older checkpoints) and ``parametrizations`` fold as torch computes."""
    import numpy as np
    import torch

    from mobius_audio.models._codec import fold_weight_norm

    class Tensor:  # what the checkpoint readers hand out: shape, dtype, numpy()
        def __init__(self, array):
            self.array, self.shape = array, array.shape

        def numpy(self):
            return self.array

    rng = np.random.default_rng(0)
    g = rng.standard_normal((4, 1, 1)).astype(np.float32)
    v = rng.standard_normal((4, 3, 5)).astype(np.float32)
    expected = torch._weight_norm(torch.from_numpy(v), torch.from_numpy(g), 0).numpy()
    for magnitude, direction in (
        ("weight_g", "weight_v"),
        ("parametrizations.weight.original0", "parametrizations.weight.original1"),
    ):
        weights = {f"conv.{magnitude}": Tensor(g), f"conv.{direction}": Tensor(v), "conv.bias": 1}
        folded = fold_weight_norm(weights)
        assert sorted(folded) == ["conv.bias", "conv.weight"]
        assert np.abs(folded["conv.weight"].numpy() - expected).max() <= 1e-6


def test_every_codec_type_has_a_parity_case():
    codecs = {
        t
        for t, cls in mobius_audio.model_types().items()
        if getattr(cls, "task", None) == "audio-codec"
    }
    covered = {model_type for model_type, *_ in CASES.values()}
    assert codecs - covered == set(), f"no parity case for {sorted(codecs - covered)}"
