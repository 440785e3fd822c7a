"""Write SUPPORT.md: every audio model_type transformers ships, and its status.

The status comes from the registry (what mobius-audio registers) and from a
fresh run of the parity tests: a type is *verified* only when it is registered
and every parity case of it passes. The verified types also go into
``src/mobius_audio/verified.json``, which the registry reads.

    uv run python packages/mobius-audio/scripts/support_table.py [--no-run RESULTS.xml]
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections import defaultdict
from pathlib import Path

from mobius.testing._support import add_test, parity_results, support_markdown, write_verified

PACKAGE_DIR = Path(__file__).resolve().parents[1]
TESTS = PACKAGE_DIR / "tests"
OUTPUT = PACKAGE_DIR / "SUPPORT.md"
VERIFIED = PACKAGE_DIR / "src" / "mobius_audio" / "verified.json"

#: A parity test: (file, test function, case table, model_type of every case or None
#: when each case's value starts with its model_type).
Parity = tuple[str, str, str, str | None]

#: (task, transformers mapping names, parity tests, heading, what the parity covers)
KITS: tuple[tuple[str, tuple[str, ...], tuple[Parity, ...], str, str], ...] = (
    (
        "speech-to-text",
        ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",),
        (
            ("test_whisper_parity.py", "test_whisper_parity", "test_whisper_parity:CASES",
             "whisper"),
            ("test_speech_to_text_parity.py", "test_speech_to_text_parity",
             "test_speech_to_text_parity:CASES", "speech_to_text"),
            ("test_moonshine_parity.py", "test_moonshine_parity", "test_moonshine_parity:CASES",
             "moonshine"),
            ("test_speecht5_parity.py", "test_speecht5_parity", "test_speecht5_parity:CASES",
             "speecht5"),
            ("test_seamless_m4t_parity.py", "test_seamless_m4t_parity",
             "test_seamless_m4t_parity:CASES", None),
        ),
        "Speech-to-text models",
        "fp32, max abs difference ≤ 1e-4 on the encoder output, the decoder prefill and 8 "
        "greedy decode steps through both caches, a batch of two clips of different lengths "
        "through the model's real feature extractor, equal greedy tokens, --ep default and cpu",
    ),
    (
        "audio-feature-extraction",
        (
            "MODEL_FOR_CTC_MAPPING_NAMES",
            "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
            "MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES",
            "MODEL_FOR_AUDIO_FRAME_CLASSIFICATION_MAPPING_NAMES",
        ),
        (
            ("test_audio_encoder_parity.py", "test_audio_encoder_parity",
             "audio_encoder_cases:all_cases", None),
        ),
        "Audio encoders",
        "fp32, max abs difference ≤ 1e-4 on hidden states and head logits, a batch of two "
        "waveforms of different lengths through the real feature extractor, with and without "
        "the attention mask as the family is called, --ep default and cpu (the frame and "
        "x-vector heads: --ep default)",
    ),
    (
        "text-to-audio",
        ("MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES", "MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES"),
        (
            ("test_tts_parity.py", "test_tts_parity", "tts_cases:all_cases", None),
        ),
        "Text to speech and audio",
        "fp32, max abs difference ≤ 1e-4 on the waveform of a batch of two texts of different "
        "lengths, transformers fed the same noise as the graphs' noise inputs, equal clip "
        "lengths, --ep default and cpu",
    ),
    (
        "audio-codec",
        ("MODEL_FOR_AUDIO_TOKENIZATION_NAMES", "MODEL_MAPPING_NAMES[encodec,mimi,xcodec]"),
        (
            ("test_codec_parity.py", "test_codec_parity", "codec_cases:all_cases", None),
        ),
        "Audio codecs",
        "codes equal to transformers' and decoded audio within 1e-4 (fp32, max abs), with "
        "every codebook and with one, clips of different lengths, --ep default and cpu",
    ),
    (
        "zero-shot-audio-classification",
        ("MODEL_MAPPING_NAMES[clap]",),
        (
            ("test_clap.py", "test_clap_parity", "test_clap:CASES", None),
        ),
        "Zero-shot audio classification",
        "fp32, max abs difference ≤ 1e-4 on audio_embeds, text_embeds, logits_per_audio and "
        "logits_per_text, two clips of different lengths (fused: one cropped) against two "
        "padded labels, --ep default and cpu (fused: default)",
    ),
)  # fmt: skip


def transformers_types() -> dict[str, dict[str, str]]:
    """Task -> {model_type: transformers class} of every audio type transformers ships."""
    from transformers.models.auto import modeling_auto as auto

    def first(name):
        return name if isinstance(name, str) else name[0]

    tables: dict[str, dict[str, str]] = {}
    claimed: set[str] = set()
    for task, mappings, *_ in KITS:
        table = tables.setdefault(task, {})
        for mapping in mappings:
            # "NAME[a,b]": only those types of the mapping (codecs, CLAP: no task table)
            name_of, _, only = mapping.rstrip("]").partition("[")
            for key, name in getattr(auto, name_of).items():
                if only and key not in only.split(","):
                    continue
                if key not in claimed and key not in table:
                    table[key] = first(name)
        claimed |= set(table)
    return tables


def _cases(parity: Parity) -> dict[str, str]:
    """Case name -> model_type of one parity test file's table ({} if the file is absent)."""
    file, _test, spec, model_type = parity
    if not (TESTS / file).is_file() and not (TESTS / spec.partition(":")[0]).is_dir():
        return {}
    module_name, _, attr = spec.partition(":")
    found = getattr(importlib.import_module(module_name), attr)
    table = found() if callable(found) else found
    return {case: model_type or value[0] for case, value in table.items()}


def statuses(junit_xml: Path | None) -> dict[str, list[tuple[str, str, str]]]:
    """Task -> rows ``(model_type, transformers class, status)``."""
    import mobius_audio

    sys.path.insert(0, str(TESTS))
    registered = {k: cls.task for k, cls in mobius_audio.model_types().items()}
    files = [TESTS / p[0] for kit in KITS for p in kit[2] if (TESTS / p[0]).is_file()]
    passed = parity_results(files, junit_xml)
    shipped = transformers_types()
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    for key, task in registered.items():  # a bare encoder no task table lists (parakeet_encoder)
        if task in shipped and not any(key in types for types in shipped.values()):
            name = MODEL_MAPPING_NAMES.get(key, "?")
            shipped[task][key] = name if isinstance(name, str) else name[0]
    tables = {}
    for task, _mappings, parities, _heading, _covers in KITS:
        cases_by_type: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for parity in parities:
            for case, model_type in _cases(parity).items():
                cases_by_type[model_type].append((parity[1], case))
        rows = []
        for model_type, hf_class in sorted(shipped[task].items()):
            cases = cases_by_type.get(model_type, [])
            built_as = registered.get(model_type)
            if built_as == task:
                ok = bool(cases) and all(passed[test].get(c, False) for test, c in cases)
                status = f"verified ({len(cases)} cases)" if ok else "registered, parity FAILING"
            elif built_as is not None:
                status = f"built as {built_as}"
            else:
                status = "not yet"
            rows.append((model_type, hf_class, status))
        tables[task] = rows
    return tables


def parity_tests() -> dict[str, str]:
    """Registry key -> the parity tests holding its cases (``tests/FILE::FUNCTION``); nothing runs."""
    sys.path.insert(0, str(TESTS))
    tests: dict[str, str] = {}
    for _task, _mappings, parities, _heading, _covers in KITS:
        for parity in parities:
            for model_type in _cases(parity).values():
                add_test(tests, model_type, parity[0], parity[1])
    return tests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-run",
        type=Path,
        metavar="RESULTS.xml",
        help="read parity results from this JUnit XML instead of running the tests",
    )
    tables = statuses(parser.parse_args().no_run)
    import transformers

    sections = [
        (heading, covers, tables[task]) for task, _mappings, _parities, heading, covers in KITS
    ]
    text, verified = support_markdown("mobius-audio", transformers.__version__, sections)
    OUTPUT.write_text(text)
    write_verified(VERIFIED, verified, transformers.__version__, tests=parity_tests())
    print(f"wrote {OUTPUT} and {VERIFIED.name}: {len(verified)} verified")
    if any("FAILING" in row[2] for rows in tables.values() for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
