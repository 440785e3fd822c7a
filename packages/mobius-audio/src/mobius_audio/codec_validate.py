"""``mobius build --validate`` for ``audio-codec`` packages (the contract: :mod:`mobius.validate`).

The sample is two clips of seeded noise (:data:`SAMPLE_SECONDS`) at the codec's rate
and channels, padded by the package's feature extractor in numpy
(:mod:`mobius_audio.codec_features`). With torch, the source as transformers reads
it (``AutoModel.from_pretrained``, float32) encodes the same batch: the codes must
be equal (reported as ``tokens_agree``), and the decoder's audio of those codes,
with every codebook and with one, is compared with transformers' ``decode``
(:func:`mobius_audio.testing._codec_parity.compare_codec`). Without torch the
sample goes through both graphs alone (a smoke run).
"""

from __future__ import annotations

from pathlib import Path

from mobius.errors import MobiusError
from mobius.generate import _read_json
from mobius.validate import ValidationReport, load_reference, smoke_report
from mobius_audio.codec_features import CodecFeatures

#: The sample clips' lengths in seconds.
SAMPLE_SECONDS = (0.5, 0.3)
SEED = 0


def validate_audio_codec(package_dir: Path, source: Path, record: dict, reference: bool):
    """Encode the sample clips and decode their codes; compare both with transformers."""
    from mobius_audio.codec_runner import AudioCodec
    from mobius_audio.testing._codec_parity import compare_codec, random_clips

    preprocessor = source / "preprocessor_config.json"
    if not preprocessor.is_file():
        raise MobiusError(
            f"--validate: {source} has no preprocessor_config.json: the sample audio needs "
            "the codec's feature extractor"
        )
    features = CodecFeatures.from_config(_read_json(preprocessor))
    rate = features.sampling_rate
    lengths = tuple(int(s * rate) for s in SAMPLE_SECONDS)
    batch = features(random_clips(lengths, SEED, features.channels))["input_values"]
    checked = (
        f"{len(lengths)} clips of seeded noise ({' and '.join(f'{s:g} s' for s in SAMPLE_SECONDS)}"
        "): the codes, and the audio decoded from every codebook and from one"
    )
    if not reference:
        codec = AudioCodec(package_dir)
        codes, *scales = codec.encoder.run(None, {"input_values": batch})
        audio = codec.decode(codes, scales[0] if scales else None)
        outputs = {"audio_values": audio, "audio_codes": codes}
        return smoke_report("audio-codec", checked, outputs)
    torch_model = load_reference("AutoModel", source)
    result = compare_codec(torch_model, package_dir, batch, "validate")
    report = ValidationReport("audio-codec", f"transformers {type(torch_model).__name__}", checked)
    report.diffs = result.diffs
    report.tokens_agree = result.mismatched_codes == 0
    return report
