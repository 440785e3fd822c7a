"""Run an audio-codec package (DAC, EnCodec, X-Codec): audio to codes and back, ``mobius codec``.

An ``audio-codec`` package (:mod:`mobius_audio.tasks_codec`) holds an encoder
(waveform to ``audio_codes``) and a decoder (codes to waveform). The audio file is
decoded and resampled by :func:`mobius_audio.audio_file.read_audio` (channels
averaged; a stereo EnCodec gets that mono signal on both channels), padded as the
package's feature extractor pads it (:mod:`mobius_audio.codec_features`; EnCodec's
padding zeroed, as transformers masks it), encoded (with the chunks' ``audio_scales``
where the package has them, EnCodec 48 kHz),
cut to the first ``codebooks`` quantizer stages (fewer stages: a lower bitrate;
EnCodec's and X-Codec's ``bandwidth`` in kbps picks them as transformers does), decoded, and cut
back to the clip's length.

Example::

    from mobius_audio.codec_runner import AudioCodec

    codec = AudioCodec("dac-out/")
    codes, audio = codec.round_trip("speech.wav", codebooks=4)

Needs ONNX Runtime and soundfile: ``pip install mobius-audio[run]``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from mobius.classification import open_session
from mobius.errors import MobiusError
from mobius.generate import PackageError, _read_json, read_graph
from mobius_audio.audio_file import read_audio
from mobius_audio.codec_features import CodecFeatures


def _graph_inputs(graph: Path) -> list[str]:

    model = read_graph(graph)  # PackageError if not ONNX
    return [i.name for i in model.graph.input]


def is_codec_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package is an audio codec's: a waveform encoder and a codes decoder."""
    encoder = Path(package_dir) / "encoder" / "model.onnx"
    decoder = Path(package_dir) / "decoder" / "model.onnx"
    if not (encoder.is_file() and decoder.is_file()):
        return False
    return _graph_inputs(encoder) == ["input_values"] and _graph_inputs(decoder) in (
        ["audio_codes"],
        ["audio_codes", "audio_scales"],  # EnCodec normalised or chunked (tasks_codec)
    )


class AudioCodec:
    """An audio-codec package in ONNX Runtime with its feature extractor's padding."""

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package_dir = Path(package_dir)
        if not is_codec_package(self.package_dir):
            raise PackageError(
                f"{self.package_dir} is not an audio-codec package (encoder/model.onnx taking "
                "input_values, decoder/model.onnx taking audio_codes)"
            )
        preprocessor = self.package_dir / "preprocessor_config.json"
        if not preprocessor.is_file():
            raise PackageError(
                f"no preprocessor_config.json in {self.package_dir}: build from a checkpoint "
                "that has its feature extractor"
            )
        self.features = CodecFeatures.from_config(_read_json(preprocessor))
        self.config = _read_json(self.package_dir / "config.json")
        self.encoder = open_session(self.package_dir / "encoder" / "model.onnx", threads)
        self.decoder = open_session(self.package_dir / "decoder" / "model.onnx", threads)
        stages = self.encoder.get_outputs()[0].shape[1]
        if not isinstance(stages, int) or stages < 1:
            raise PackageError(f"{self.package_dir}'s encoder declares no number of codebooks")
        self.num_codebooks = stages
        self.scaled = len(self.decoder.get_inputs()) == 2

    @property
    def sampling_rate(self) -> int:
        return self.features.sampling_rate

    def encode(self, samples: np.ndarray) -> np.ndarray:
        """int64 ``[1, num_codebooks, frames]``: the codes of one mono clip at :attr:`sampling_rate`."""
        return self.encode_with_scales(samples)[0]

    def encode_with_scales(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The codes of one mono clip and, for a package with ``audio_scales``, its chunks'
        scales ``[1, chunks]`` (None otherwise)."""
        clip = samples if self.features.channels == 1 else np.stack([samples] * 2)
        inputs = self.features([clip])
        values = inputs["input_values"]
        if self.config.get("model_type") == "encodec":  # transformers zeroes the padding
            values = values * inputs["padding_mask"][:, None, :].astype(np.float32)
        codes, *scales = self.encoder.run(None, {"input_values": values})
        return codes, (scales[0] if scales else None)

    def _strides(self):
        """The strides whose product is the hop: EnCodec's, or X-Codec's acoustic DAC's."""
        if self.config.get("model_type") == "encodec":
            return self.config.get("upsampling_ratios")
        acoustic = self.config.get("acoustic_model_config")
        return acoustic.get("downsampling_ratios") if isinstance(acoustic, dict) else None

    def codebooks_for_bandwidth(self, bandwidth: float) -> int:
        """EnCodec, X-Codec: the stages of ``bandwidth`` kbps, one of ``target_bandwidths``, as
        transformers counts them."""
        bandwidths = self.config.get("target_bandwidths")
        kind = self.config.get("model_type")
        if kind not in ("encodec", "xcodec") or not isinstance(bandwidths, list):
            raise MobiusError(
                "--bandwidth applies to EnCodec packages (and X-Codec); use --codebooks"
            )
        if bandwidth not in bandwidths:
            raise MobiusError(f"--bandwidth {bandwidth:g}: this codec encodes at {bandwidths} kbps")
        size, ratios = self.config.get("codebook_size"), self._strides()
        if (
            not isinstance(size, int)
            or size < 2
            or not isinstance(ratios, list)
            or not all(isinstance(r, int) and r > 0 for r in ratios)
        ):
            raise PackageError(f"{self.package_dir}'s config.json has no usable codebook_size")
        frame_rate = math.ceil(self.sampling_rate / math.prod(ratios))
        bits_per_frame = math.log2(size) * frame_rate
        return int(max(1, math.floor(bandwidth * 1000 / bits_per_frame)))

    def decode(self, codes: np.ndarray, scales: np.ndarray | None = None) -> np.ndarray:
        """float32 ``[batch, channels, samples]``: the waveform of ``codes`` ``[batch, K, frames]``
        (and, for a package with ``audio_scales``, the encoder's ``scales``)."""
        codes = np.asarray(codes)
        if self.scaled != (scales is not None):
            need = "needs" if self.scaled else "takes no"
            raise MobiusError(f"{self.package_dir}'s decoder {need} audio_scales with the codes")
        if codes.ndim != 3 or not 1 <= codes.shape[1] <= self.num_codebooks:
            raise MobiusError(
                f"codes of shape {list(codes.shape)}: expected [batch, 1..{self.num_codebooks}, "
                "frames]"
            )
        size = self.config.get("codebook_size")
        if codes.size and (codes.min() < 0 or (isinstance(size, int) and codes.max() >= size)):
            raise MobiusError(f"codes must index the codebooks: 0 to {size} - 1")
        feeds = {"audio_codes": codes.astype(np.int64)}
        if scales is not None:
            feeds["audio_scales"] = np.asarray(scales, np.float32)
        return self.decoder.run(None, feeds)[0]

    def codebooks_option(self, options: dict) -> int | None:
        """The stages ``--codebooks`` or ``--bandwidth`` ask for (None: all)."""
        codebooks, bandwidth = options.get("codec_codebooks"), options.get("codec_bandwidth")
        if codebooks is not None and bandwidth is not None:
            raise MobiusError("give --codebooks or --bandwidth, not both")
        return codebooks if bandwidth is None else self.codebooks_for_bandwidth(bandwidth)

    def round_trip(self, audio, codebooks: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(codes [1, K, frames], audio [1, channels, samples])`` of a file or mono samples.

        ``codebooks`` keeps the first ``K`` quantizer stages (default: all); the
        decoded audio is cut to the clip's length.
        """
        count = self.num_codebooks if codebooks is None else codebooks
        if isinstance(count, bool) or not isinstance(count, int):
            raise MobiusError(f"codebooks must be an integer, not {codebooks!r}")
        if not 1 <= count <= self.num_codebooks:
            raise MobiusError(
                f"--codebooks {count}: this codec has 1 to {self.num_codebooks} codebooks"
            )
        if isinstance(audio, (str, os.PathLike)):
            samples = read_audio(audio, self.sampling_rate)
        else:
            samples = np.asarray(audio, np.float32).reshape(-1)
        codes, scales = self.encode_with_scales(samples)
        codes = codes[:, :count]
        return codes, self.decode(codes, scales)[..., : samples.size]


def write_audio(path: Path, audio: np.ndarray, rate: int) -> None:
    """Write ``audio`` ``[channels, samples]`` as a 32-bit float WAV (the decoded values as they are)."""
    try:
        import soundfile
    except ImportError:
        raise MobiusError("writing audio needs soundfile: pip install mobius-audio[run]") from None
    try:
        soundfile.write(str(path), np.asarray(audio, np.float32).T, rate, subtype="FLOAT")
    except (RuntimeError, OSError, ValueError, TypeError) as exc:
        raise MobiusError(f"cannot write {path}: {' '.join(str(exc).split())}") from None


def run_cli(package_dir: str | os.PathLike, inputs: list[str], options: dict) -> int:
    """``mobius codec PKG AUDIO... [--output WAV] [--codes NPY] [--codebooks K]``."""
    output, codes_path = options.get("codec_output"), options.get("codec_codes")
    if len(inputs) > 1 and (output or codes_path):
        raise MobiusError("--output and --codes name the files of one input; give one audio file")
    codec = AudioCodec(package_dir, threads=options.get("threads"))
    codebooks = codec.codebooks_option(options)
    for name in inputs:
        codes, audio = codec.round_trip(name, codebooks)
        target = Path(output) if output else Path(f"{Path(name).stem}.decoded.wav")
        write_audio(target, audio[0], codec.sampling_rate)
        if codes_path:
            np.save(codes_path, codes[0])
        kept, frames = codes.shape[1], codes.shape[2]
        saved = f", codes in {codes_path}" if codes_path else ""
        print(f"{name} -> {target}: {kept} codebooks x {frames} frames{saved}")
    return 0
