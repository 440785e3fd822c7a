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
#: when each case's value starts with its model_type). The case table is
#: ``"module:ATTR"`` (a dict or a function returning one), or ``"=id1,id2"``: the
#: function's parametrize ids written out (``"="`` alone: an unparametrized test).
Parity = tuple[str, str, str, str | None]

#: Transformers mapping names of a kit's table: ``"NAME"`` (every type of the mapping),
#: ``"NAME[a,b]"`` (only those), ``"NAME[-a,b]"`` (all but those); ``"REGISTRY[K1,K2]"``
#: lists registry keys that are checkpoint classes (a second model of one type).
#: (tasks, transformers mapping names, parity tests, heading, what the parity covers)
KITS: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[Parity, ...], str, str], ...] = (
    (
        ("speech-to-text",),
        (
            "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES[-dia,voxtral,granite_speech,"
            "kyutai_speech_to_text,qwen3_asr,granite_speech_plus]",
        ),
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
        ("transducer",),
        ("MODEL_FOR_RNNT_MAPPING_NAMES", "MODEL_FOR_TDT_MAPPING_NAMES"),
        (
            ("test_parakeet_transducer.py", "test_graphs_and_tokens_match_transformers",
             "=parakeet_rnnt", "parakeet_rnnt"),
            ("test_parakeet_transducer.py", "test_graphs_and_tokens_match_transformers",
             "=parakeet_tdt", "parakeet_tdt"),
        ),
        "Transducers",
        "fp32, max abs difference ≤ 1e-4 on the encoder states, four prediction-network steps "
        "with the LSTM state carried and the joint logits, a batch of two clips of different "
        "lengths; greedy tokens equal transformers' generate on each clip, --ep default",
    ),
    (
        ("audio-language", "streaming-speech-to-text"),
        (
            "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES[qwen2_audio,voxtral,granite_speech,"
            "granite_speech_plus,audioflamingo3,glmasr,qwen3_asr,kyutai_speech_to_text]",
            # transformers' multimodal-LM table leaves these out; its seq2seq one has them
            "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES[musicflamingo,granite_speech_plus]",
        ),
        (
            ("test_qwen2_audio.py", "test_qwen2_audio::test_parity_batch_of_two", "=",
             "qwen2_audio"),
            ("test_voxtral_parity.py", "test_voxtral_parity::test_parity_batch_of_two",
             "=default,cpu", "voxtral"),
            ("test_granite_speech.py", "test_granite_speech::test_parity_batch_of_two", "=",
             "granite_speech"),
            ("test_glmasr.py", "test_glmasr::test_parity_batch_of_two", "=default,cpu",
             "glmasr"),
            ("test_qwen3_asr.py", "test_qwen3_asr::test_parity_batch_of_two", "=default,cpu",
             "qwen3_asr"),
            ("test_audioflamingo3.py", "test_audioflamingo3::test_parity_batch_of_two", "=",
             "audioflamingo3"),
            ("test_musicflamingo.py", "test_musicflamingo::test_parity_batch_of_two", "=",
             "musicflamingo"),
            ("test_granite_speech_plus.py", "test_granite_speech_plus::test_parity_batch_of_two",
             "=", "granite_speech_plus"),
            ("test_kyutai_stt.py", "test_kyutai_stt::test_codes_and_logits_match_transformers",
             "=", "kyutai_speech_to_text"),
            ("test_kyutai_stt.py", "test_kyutai_stt::test_generate_matches_transformers",
             "=default,cpu", "kyutai_speech_to_text"),
        ),
        "Speech LLMs",
        "fp32, max abs difference ≤ 1e-4 on the audio features, the prefill logits and cached "
        "decode steps, greedy tokens equal to transformers' generate (Kyutai: the Mimi codes "
        "and the streamed logits)",
    ),
    (
        ("audio-feature-extraction",),
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
        ("text-to-audio", "bark-text-to-audio", "text-to-music", "text-to-music-prefix",
         "text-to-dialogue", "conversational-speech", "text-to-speech", "spectrogram-vocoder"),
        ("MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES", "MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES",
         "MODEL_MAPPING_NAMES[dia]", "REGISTRY[SpeechT5ForTextToSpeech]"),
        (
            ("test_tts_parity.py", "test_tts_parity", "tts_cases:all_cases", None),
            ("test_bark.py", "test_bark::test_stage_graphs_match_transformers",
             "=default,cpu", "bark"),
            ("test_musicgen.py", "test_musicgen::test_graphs_match_transformers", "=",
             "musicgen"),
            ("test_musicgen_melody.py", "test_musicgen_melody::test_graphs_match_transformers",
             "=", "musicgen_melody"),
            ("test_dia_parity.py", "test_dia_parity::test_encoder_and_cached_decoder_match_transformers",
             "=default,cpu", "dia"),
            ("test_csm.py", "test_csm::test_graphs_match_transformers",
             "=backbone,depth_decoder,codec", "csm"),
            ("test_csm.py", "test_csm::test_cpu_ep_build_matches_transformers", "=", "csm"),
            ("test_speecht5_tts.py", "test_speecht5_tts::test_batch_speaks_as_transformers",
             "=default,cpu", "SpeechT5ForTextToSpeech"),
            ("test_speecht5_tts.py",
             "test_speecht5_tts::test_encoder_and_vocoder_graphs_equal_pytorch", "=",
             "speecht5_hifigan"),
        ),
        "Text to speech and audio",
        "fp32, max abs difference ≤ 1e-4 on every graph (the autoregressive ones: prefill and "
        "cached steps), a batch of two texts of different lengths, transformers fed the same "
        "noise as the graphs' noise inputs; the generated codes equal transformers' greedy "
        "generate and the waveform within 1e-4 (tests of each runner), --ep default and cpu "
        "where the row's test says so",
    ),
    (
        ("audio-codec",),
        ("MODEL_FOR_AUDIO_TOKENIZATION_NAMES", "MODEL_MAPPING_NAMES[encodec,mimi,xcodec]"),
        (
            ("test_codec_parity.py", "test_codec_parity", "codec_cases:all_cases", None),
        ),
        "Audio codecs",
        "codes equal to transformers' and decoded audio within 1e-4 (fp32, max abs), with "
        "every codebook and with one, clips of different lengths, --ep default and cpu",
    ),
    (
        ("seq2seq",),
        ("REGISTRY[SeamlessM4TForTextToText,SeamlessM4Tv2ForTextToText]",),
        (
            ("test_seamless_m4t_text.py", "test_seamless_m4t_text_to_text_parity",
             "=seamless_m4t", "SeamlessM4TForTextToText"),
            ("test_seamless_m4t_text.py", "test_seamless_m4t_text_to_text_parity",
             "=seamless_m4t_v2", "SeamlessM4Tv2ForTextToText"),
        ),
        "Text to text",
        "fp32, max abs difference ≤ 1e-4 on the encoder output, the decoder prefill and "
        "cached steps, a batch of two texts of different lengths, equal greedy tokens",
    ),
    (
        ("text-to-speech-translation", "speech-to-speech-translation"),
        ("REGISTRY[SeamlessM4TForTextToSpeech,SeamlessM4TForSpeechToSpeech]",),
        tuple(
            ("test_seamless_m4t_speech.py", test, cases, key)
            for key in ("SeamlessM4TForTextToSpeech", "SeamlessM4TForSpeechToSpeech")
            for test, cases in (
                ("test_unit_graphs_match_transformers_on_a_padded_batch", "="),
                ("test_vocoder_matches_transformers_on_a_padded_batch", "="),
            )
        )
        + (
            ("test_seamless_m4t_speech.py", "test_generate_speaks_the_translation", "=",
             "SeamlessM4TForTextToSpeech"),
            ("test_seamless_m4t_speech.py", "test_generate_speaks_the_translation_of_speech",
             "=--audio,PROMPT", "SeamlessM4TForSpeechToSpeech"),
        ),
        "Speech translation output",
        "fp32, max abs difference ≤ 1e-4 on the text decoder's last states, the unit "
        "encoder and the cached unit decoder (a padded batch of two), the vocoder's waveform "
        "and lengths; through `mobius generate`, the text, the units and the waveform "
        "(within 1e-4) of transformers' generate(tgt_lang=...)",
    ),
    (
        ("text-to-speech-translation-v2", "speech-to-speech-translation-v2"),
        ("REGISTRY[SeamlessM4Tv2ForTextToSpeech,SeamlessM4Tv2ForSpeechToSpeech]",),
        tuple(
            ("test_seamless_m4t_v2_speech.py", test, "=", key)
            for key in ("SeamlessM4Tv2ForTextToSpeech", "SeamlessM4Tv2ForSpeechToSpeech")
            for test in (
                "test_unit_graphs_match_transformers_on_a_padded_batch",
                "test_vocoder_matches_transformers_on_a_padded_batch",
            )
        )
        + (
            ("test_seamless_m4t_v2_speech.py", "test_generate_speaks_the_translation", "=",
             "SeamlessM4Tv2ForTextToSpeech"),
            ("test_seamless_m4t_v2_speech.py", "test_generate_speaks_the_translation_of_speech",
             "=", "SeamlessM4Tv2ForSpeechToSpeech"),
        ),
        "Speech translation output (v2, non-autoregressive units)",
        "fp32, max abs difference ≤ 1e-4 on the unit encoder and the non-autoregressive unit "
        "decoder (a padded batch of two: states, characters and frames), the vocoder's "
        "waveform and lengths; through `mobius generate`, the text, the units and the "
        "waveform (within 1e-4) of transformers' generate(tgt_lang=...)",
    ),
    (
        ("zero-shot-audio-classification",),
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


def _selected(mapping: str) -> tuple[str, set[str], bool]:
    """``"NAME[a,b]"`` -> (NAME, {a, b}, exclude?): see :data:`KITS`."""
    name, _, listed = mapping.rstrip("]").partition("[")
    exclude = listed.startswith("-")
    return name, set(filter(None, listed.lstrip("-").split(","))), exclude


def transformers_types() -> dict[str, dict[str, str]]:
    """Kit (its first task) -> {key: transformers class} of every audio type transformers ships."""
    from transformers.models.auto import modeling_auto as auto

    def first(name):
        return name if isinstance(name, str) else name[0]

    tables: dict[str, dict[str, str]] = {}
    claimed: set[str] = set()
    for tasks, mappings, *_ in KITS:
        table = tables.setdefault(tasks[0], {})
        for mapping in mappings:
            name, listed, exclude = _selected(mapping)
            if name == "REGISTRY":  # checkpoint classes: the key is the class
                table.update({key: key for key in listed})
                continue
            for key, cls in getattr(auto, name).items():
                if listed and (key in listed) == exclude:
                    continue
                if key not in claimed and key not in table:
                    table[key] = first(cls)
        claimed |= set(table)
    return tables


def _cases(parity: Parity) -> dict[str, str]:
    """Case name -> registry key of one parity test's table ({} if the file is absent)."""
    file, _test, spec, model_type = parity
    if spec.startswith("="):  # parametrize ids written out ("" alone: unparametrized)
        return dict.fromkeys(spec[1:].split(","), model_type) if (TESTS / file).is_file() else {}
    if not (TESTS / file).is_file() and not (TESTS / spec.partition(":")[0]).is_dir():
        return {}
    module_name, _, attr = spec.partition(":")
    found = getattr(importlib.import_module(module_name), attr)
    table = found() if callable(found) else found
    return {case: model_type or value[0] for case, value in table.items()}


def statuses(junit_xml: Path | None) -> dict[str, list[tuple[str, str, str]]]:
    """Kit (its first task) -> rows ``(key, transformers class, status)``."""
    import mobius_audio

    sys.path.insert(0, str(TESTS))
    classes = mobius_audio.model_types()
    registered = {k: cls.task for k, cls in classes.items()}
    files = sorted({TESTS / p[0] for kit in KITS for p in kit[2] if (TESTS / p[0]).is_file()})
    passed = parity_results(files, junit_xml)
    shipped = transformers_types()
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    task_kit = {task: tasks[0] for tasks, *_ in KITS for task in tasks}
    for key, task in registered.items():  # a bare encoder no table lists (parakeet_encoder)
        kit = task_kit.get(task)
        if kit is not None and not any(key in types for types in shipped.values()):
            name = MODEL_MAPPING_NAMES.get(key) or classes[key].__name__
            shipped[kit][key] = name if isinstance(name, str) else name[0]
    tables = {}
    for tasks, _mappings, parities, _heading, _covers in KITS:
        cases_by_key: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for parity in parities:
            for case, key in _cases(parity).items():
                cases_by_key[key].append((parity[1], case))
        rows = []
        for key, hf_class in sorted(shipped[tasks[0]].items()):
            cases = cases_by_key.get(key, [])
            built_as = registered.get(key)
            if built_as in tasks:
                ok = bool(cases) and all(passed[test].get(c, False) for test, c in cases)
                status = f"verified ({len(cases)} cases)" if ok else "registered, parity FAILING"
            elif built_as is not None:
                status = f"built as {built_as}"
            else:
                status = "not yet"
            rows.append((key, hf_class, status))
        tables[tasks[0]] = rows
    return tables


def parity_tests() -> dict[str, str]:
    """Registry key -> the parity tests holding its cases (``tests/FILE::FUNCTION``); nothing runs."""
    sys.path.insert(0, str(TESTS))
    tests: dict[str, str] = {}
    for _tasks, _mappings, parities, _heading, _covers in KITS:
        for parity in parities:
            for key in _cases(parity).values():
                add_test(tests, key, parity[0], parity[1].rpartition("::")[2])
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
        (heading, covers, tables[tasks[0]]) for tasks, _mappings, _parities, heading, covers in KITS
    ]
    text, verified = support_markdown("mobius-audio", transformers.__version__, sections)
    OUTPUT.write_text(text)
    write_verified(VERIFIED, verified, transformers.__version__, tests=parity_tests())
    print(f"wrote {OUTPUT} and {VERIFIED.name}: {len(verified)} verified")
    if any("FAILING" in row[2] for rows in tables.values() for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
