"""Audio-codec parity: codes and decoded audio, ONNX Runtime against PyTorch.

A tiny random codec (every parameter perturbed) is built with the CLI path. A
batch of two random clips of different lengths goes through the model's own
feature extractor (transformers', saved beside the model, and so copied into the
package); the encoder's ``audio_codes`` must EQUAL transformers' ``encode`` codes,
and the decoder's ``audio_values`` of those codes must be within ``atol`` of
transformers' ``decode``, with every codebook and with fewer (a lower bitrate).
A package with ``audio_scales`` (EnCodec normalised or chunked) must give
transformers' scales within ``atol``; its decoder gets transformers' scales.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters, record_parity


def spread_encoder_weights(model, seed: int = 0) -> None:
    """Redraw the encoder's convolutions at unit gain and the codebooks at unit scale.

    At transformers' init (convolutions of std 0.02) a tiny encoder's latents are
    all near one direction, so every frame picks the same codebook row and equal
    codes would prove nothing. Here each conv weight is drawn with std
    ``1 / sqrt(fan_in)`` and each codebook from N(0, 1): the codes spread over the
    codebook. The decoder keeps its init, so that its output is not saturated.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    # EnCodec's and X-Codec's codebooks are buffers (``codebook.embed``), DAC's parameters
    codebooks = [(n, b) for n, b in model.named_buffers() if n.endswith("codebook.embed")]
    with torch.no_grad():
        for name, param in [*model.named_parameters(), *codebooks]:
            if "decoder" in name.split(".")[0]:  # decoder, acoustic_decoder (X-Codec)
                continue
            if "codebook" in name:
                param.copy_(torch.randn(param.shape, generator=generator))
            elif param.ndim == 3 and name.endswith("weight"):  # Conv1d [out, in, kernel]
                fan_in = param.shape[1] * param.shape[2]
                param.copy_(torch.randn(param.shape, generator=generator) / fan_in**0.5)
        for name, buffer in model.named_buffers():  # Mimi keeps its codebooks as buffers
            if name.endswith("codebook.embed_sum"):
                buffer.copy_(torch.randn(buffer.shape, generator=generator))


def make_random_codec(hf_config, seed: int = 0):
    """A float32 transformers codec (``AutoModel``), codes spread, every parameter perturbed, eval."""
    import torch
    from transformers import AutoModel

    torch.manual_seed(seed)
    model = AutoModel.from_config(hf_config, dtype=torch.float32)
    spread_encoder_weights(model, seed)
    perturb_parameters(model, seed)
    return model.eval()


def build_random_codec(root: Path, hf_config, feature_extractor):
    """``(torch_model, hf_dir, package_dir)``: :func:`make_random_codec` saved with its
    feature extractor under ``root / "hf"`` and built with the CLI into ``root / "onnx"``."""
    model = make_random_codec(hf_config)
    model.save_pretrained(root / "hf")
    feature_extractor.save_pretrained(root / "hf")
    return model, root / "hf", build_with_cli(root / "hf", root / "onnx")


def random_clips(lengths: tuple[int, ...], seed: int = 0, channels: int = 1) -> list[np.ndarray]:
    """Float32 noise clips of ``lengths`` samples: ``[samples]`` mono, ``[channels, samples]`` else."""
    rng = np.random.default_rng(seed)
    shapes = [(n,) if channels == 1 else (channels, n) for n in lengths]
    return [(rng.standard_normal(shape) * 0.3).astype(np.float32) for shape in shapes]


@dataclass
class CodecParity:
    """Whether the codes are equal, and the max abs difference of the decoded audio per codebook count."""

    model_type: str
    ep: str
    codes_shape: list[int] = field(default_factory=list)
    mismatched_codes: int = 0
    diffs: dict[str, float] = field(default_factory=dict)

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        what = f"{self.model_type} --ep {self.ep}"
        assert self.codes_shape, f"{what}: no codes were compared"
        assert self.mismatched_codes == 0, (
            f"{what}: {self.mismatched_codes} codes of {self.codes_shape} differ"
        )
        assert self.diffs, f"{what}: no audio was compared"
        assert max(self.diffs.values()) <= atol, f"{what}: {self.diffs} > {atol:g}"


def torch_codes_and_audio(torch_model, input_values: np.ndarray, codebooks: list[int]):
    """transformers' codes ``[batch, stages, frames]`` and, per count in ``codebooks``, its decoded audio.

    EnCodec encodes at its largest bandwidth (every stage) and returns its chunks'
    codes ``[chunks, batch, stages, frames]`` (the last padded) with ``audio_scales``
    (None: not normalised); the codes are given as the contract lays them, chunk
    after chunk.
    """
    import torch

    values = torch.from_numpy(input_values)
    with torch.no_grad():
        if torch_model.config.model_type == "encodec":
            largest = torch_model.config.target_bandwidths[-1]
            encoded = torch_model.encode(values, bandwidth=largest)
            chunks, scales = encoded.audio_codes, encoded.audio_scales
            pad = encoded.last_frame_pad_length
            audio = {
                k: torch_model.decode(
                    chunks[:, :, :k], scales, last_frame_pad_length=pad
                ).audio_values.numpy()
                for k in codebooks
            }
            codes = _chunks_one_after_another(chunks, pad)
        else:  # DAC
            codes = torch_model.encode(values).audio_codes
            audio = {
                k: torch_model.decode(audio_codes=codes[:, :k]).audio_values.numpy()
                for k in codebooks
            }
    return codes.numpy(), audio


def _chunks_one_after_another(chunks, pad: int):
    """transformers' per-chunk codes ``[chunks, batch, K, F]`` (the last padded by ``pad``
    frames) as the contract lays them: ``[batch, K, frames]``, chunk after chunk."""
    import torch

    parts = list(chunks)
    if pad:
        parts[-1] = parts[-1][..., :-pad]
    return torch.cat(parts, dim=-1)


def torch_scales(torch_model, input_values: np.ndarray) -> np.ndarray:
    """EnCodec's ``audio_scales`` as the contract has them: ``[batch, chunks]``, 1 where None."""
    import torch

    largest = torch_model.config.target_bandwidths[-1]
    with torch.no_grad():
        scales = torch_model.encode(torch.from_numpy(input_values), bandwidth=largest).audio_scales
    ones = np.ones((input_values.shape[0], 1), np.float32)
    return np.concatenate([ones if s is None else s.numpy() for s in scales], axis=1)


def compare_codec(
    torch_model, package: Path, input_values: np.ndarray, ep: str, reference=None
) -> CodecParity:
    """Run one padded batch through the package's two graphs and through transformers.

    ``reference`` is :func:`torch_codes_and_audio`'s answer for one and every
    codebook, when the caller has it already (it is the same for every ``--ep``).
    """
    import onnxruntime as ort

    def session(part: str):
        path = str(package / part / "model.onnx")
        return ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    encoder, decoder = session("encoder"), session("decoder")
    codes, *scales = encoder.run(None, {"input_values": input_values})
    scaled = {}  # the decoder's audio_scales input: transformers' scales
    if scales:
        expected_scales = torch_scales(torch_model, input_values)
        assert scales[0].shape == expected_scales.shape, (scales[0].shape, expected_scales.shape)
        scaled["audio_scales"] = expected_scales
    stages = codes.shape[1]
    counts = sorted({1, stages})
    if reference is None:
        reference = torch_codes_and_audio(torch_model, input_values, counts)
    expected_codes, expected_audio = reference
    result = CodecParity(torch_model.config.model_type, ep, list(codes.shape))
    assert codes.shape == expected_codes.shape, f"codes {codes.shape} != {expected_codes.shape}"
    result.mismatched_codes = int((codes != expected_codes).sum())
    if scales:
        result.diffs["audio_scales"] = float(np.abs(scales[0] - scaled["audio_scales"]).max())
    for k in counts:
        audio = decoder.run(None, {"audio_codes": expected_codes[:, :k], **scaled})[0]
        expected = expected_audio[k].reshape(audio.shape)  # DAC squeezes its one channel
        result.diffs[f"audio_values[{k} codebooks]"] = float(np.abs(audio - expected).max())
    return result


def check_codec_parity(
    hf_config,
    feature_extractor,
    workdir: Path,
    *,
    lengths: tuple[int, ...] = (4000, 2900),
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
) -> list[CodecParity]:
    """Build a perturbed tiny codec with the CLI (for each ``--ep``) and check it against PyTorch."""
    workdir = Path(workdir)
    torch_model = make_random_codec(hf_config, seed)
    torch_model.save_pretrained(workdir / "hf")
    feature_extractor.save_pretrained(workdir / "hf")
    inputs = feature_extractor(
        random_clips(lengths, seed, feature_extractor.feature_size),
        sampling_rate=feature_extractor.sampling_rate,
        return_tensors="np",
    )
    input_values = np.asarray(inputs["input_values"], np.float32)
    stages = (
        torch_model.config.n_codebooks
        if hasattr(torch_model.config, "n_codebooks")
        else (torch_model.config.num_quantizers)
    )
    reference = torch_codes_and_audio(torch_model, input_values, sorted({1, stages}))
    results = []
    for ep in eps:
        out = build_with_cli(workdir / "hf", workdir / f"onnx-{ep}", "--ep", ep)
        if ep == "default":
            for part in ("encoder", "decoder"):
                onnx.checker.check_model(str(out / part / "model.onnx"), full_check=True)
        result = compare_codec(torch_model, out, input_values, ep, reference)
        used = min(len(np.unique(reference[0][:, k])) for k in range(stages))
        assert used > 1, "every frame has the same code: the comparison would prove nothing"
        result.assert_close(atol)
        results.append(result)
    return results
