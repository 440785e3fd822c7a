"""Write SUPPORT.md: every model_type transformers ships for mobius-text's tasks, and its status.

Three tables: causal LMs, encoders (feature extraction) and encoder–decoders. The
status comes from the registry (what mobius-text registers, under which task) and
from a fresh run of the parity tests (which of its cases pass): a type is
*verified* only when it is registered and every parity case of it passes. The verified
types also go into ``src/mobius_text/verified.json``, which the registry reads
(``registry.is_verified``, ``mobius info``).

    uv run python packages/mobius-text/scripts/support_table.py [--no-run RESULTS.xml]
    uv run python packages/mobius-text/scripts/support_table.py --verified-from-table
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

from mobius.testing._support import add_test, parity_results
from mobius.testing._support import write_verified as write_verified_file

PACKAGE_DIR = Path(__file__).resolve().parents[1]
TESTS = PACKAGE_DIR / "tests"
OUTPUT = PACKAGE_DIR / "SUPPORT.md"
README = PACKAGE_DIR / "README.md"
VERIFIED = PACKAGE_DIR / "src" / "mobius_text" / "verified.json"
BEGIN, END = "<!-- verified-models:begin -->", "<!-- verified-models:end -->"

# Model types in transformers' causal-LM table that mobius builds under another task, or
# that belong to other packages.
MULTIMODAL = (
    "aria_text emu3 fuyu gemma3 gemma3n gemma4 gemma4_unified git got_ocr2 mllama "
    "phi4_multimodal minimax_m3_vl_text dots3_note moss_transcribe_diarize "
    "llama4 qwen3_5 qwen3_5_moe qwen4_exp"
).split()
AUDIO = "moshi musicgen musicgen_melody".split()
# transformers' decoder halves of encoder-decoders (``*ForCausalLM``): mobius builds the
# whole model (the seq2seq table) or, for the OCR/speech ones, leaves them to their issues.
SEQ2SEQ_DECODER_HALVES = "trocr whisper".split()
# Encoder types that need inputs beyond text (layout boxes, entity spans, images...).
NOT_TEXT_ONLY = {
    "layoutlmv2": "needs bounding boxes and images",
    "layoutlmv3": "needs bounding boxes and images",
    "luke": "needs entity inputs",
    "perceiver": "a multimodal latent model",
    "modernvbert": "a vision–language encoder: the vision–language issue",
    "ultravbert": "a vision–language encoder: the vision–language issue",
}
# Speculative-decoding drafters: no token input and no cache of their own; each step reads
# its target model's embeddings and last hidden state (``inputs_embeds``) and the target's
# key/value states (``shared_kv_states``), so they need a drafter contract, not causal-lm's.
DRAFTERS = {
    t: "a drafter for assisted decoding: it reads its target model's hidden and key/value "
    "states, with no token input or cache of its own (a drafter contract)"
    for t in ("gemma4_assistant", "gemma4_unified_assistant")
}
SPEECH_SEQ2SEQ = (
    "audioflamingo3 glmasr granite_speech granite_speech_plus moss_transcribe_diarize "
    "musicflamingo nemo_speechlm omniasr qwen2_audio qwen3_asr seamless_m4t seamless_m4t_v2 "
    "vibevoice_asr voxtral voxtral_realtime"
).split()

# Rows whose transformers class is the very model a sibling package builds (the multimodal
# Gemma 3 is transformers' causal LM of gemma3; SeamlessM4TForTextToText its seq2seq): credited
# to that package where its parity suite verifies the key (the row's class, else its type).
SIBLING_BUILDS = (
    "fuyu gemma3 gemma3n gemma4 gemma4_unified got_ocr2 phi4_multimodal "
    "seamless_m4t seamless_m4t_v2 granite_speech qwen2_audio voxtral glmasr qwen3_asr "
    "audioflamingo3 musicflamingo granite_speech_plus"
).split()

# Types with a reason no graph can match transformers (stated where the row would say "not yet").
NOT_BUILT = {
    "mra": "transformers runs MRA attention only through a CUDA kernel from the hub; on CPU it "
    "returns zeros, so there is no reference to check a graph against",
    "reformer": "its LSH attention hashes with torch.randn rotations drawn at every call "
    "(seeded or not): a graph cannot reproduce torch's generator",
    "xlnet": "it generates by re-reading the last tokens with a permutation mask and a dummy "
    "target token each step, not through the per-token cache of the causal-LM contract",
}

OUT_OF_SCOPE = {
    **{t: "multimodal model: the vision–language issue" for t in MULTIMODAL},
    **{t: "audio model: the audio issue" for t in AUDIO},
    **{t: "speech or OCR model: the audio and vision issues" for t in SEQ2SEQ_DECODER_HALVES},
    **NOT_TEXT_ONLY,
    **{t: "speech model: the audio issue" for t in SPEECH_SEQ2SEQ},
    **DRAFTERS,
}

# (task, test function, cases package, heading, what verified means)
KITS = (
    (
        "causal-lm",
        "test_causal_lm_parity",
        "text_parity_cases",
        "Causal LMs",
        "fp32, max abs logit difference ≤ 1e-4 on prefill and 8 cached decode steps, "
        "identical greedy tokens, batch 1 and left-padded batch 2",
    ),
    (
        "feature-extraction",
        "test_encoder_parity",
        "encoder_parity_cases",
        "Encoders",
        "fp32, max abs difference ≤ 1e-4 on last_hidden_state and every head the family "
        "has, a right-padded batch of two different lengths, --ep default and cpu",
    ),
    (
        "seq2seq",
        "test_seq2seq_parity",
        "seq2seq_parity_cases",
        "Encoder–decoders",
        "fp32, max abs difference ≤ 1e-4 on the encoder output (padded batch of two), the "
        "decoder prefill and 8 decode steps through both caches, greedy tokens equal to "
        "generate()",
    ),
    (
        "text-encoder",
        "test_text_encoder_parity",
        "text_encoder_parity_cases",
        "Decoders as text encoders",
        "fp32, max abs difference ≤ 1e-4 on last_hidden_state and the hidden_states.{i} "
        "built, at the real tokens of a batch of two prompts padded right and left",
    ),
    (
        "text-classification",
        "test_decoder_classifier_parity",
        "decoder_classifier_cases",
        "Decoders with a sequence-classification head",
        "fp32, max abs difference ≤ 1e-4 on logits [batch, num_labels] (the rightmost token "
        "that is not pad_token_id) and last_hidden_state, a batch of two prompts padded "
        "right and left",
    ),
)
PARITY_TESTS = (
    "test_parity.py",
    "test_encoder_parity.py",
    "test_seq2seq_parity.py",
    "test_text_encoder_builds.py",
    "test_decoder_classification.py",
)
# Encoder heads the shared harness cannot drive, verified in a test file of their own:
# (model_type, head) -> (test function, the prefix of its case ids that check the head).
BEYOND_HARNESS = "test_encoder_heads_beyond_harness.py"
BEYOND_HARNESS_HEADS = {
    ("longformer", "question-answering"): (
        "test_longformer_global_attention_heads",
        "question-answering",
    ),
    ("longformer", "multiple-choice"): (
        "test_longformer_global_attention_heads",
        "multiple-choice",
    ),
    ("funnel", "multiple-choice"): ("test_funnel_multiple_choice", ""),
}
# The encoder heads with a column of their own: the transformers table of each, by model_type.
HEAD_COLUMNS = {
    "question-answering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "multiple-choice": "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",
}


def transformers_types() -> dict[str, dict[str, str]]:
    """Task -> {model_type: transformers class} of every type transformers ships natively."""
    from transformers.models.auto import modeling_auto as auto

    seq2seq = dict(auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)
    causal = dict(auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    encoders = dict(auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    for table in (
        auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES,
        auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
    ):  # encoder-only types without a masked-LM class
        for key, name in table.items():
            if key not in causal and key not in seq2seq:
                encoders.setdefault(key, name)
    encoders = {k: v for k, v in encoders.items() if k not in seq2seq}
    return {
        "causal-lm": dict(sorted(causal.items())),
        "feature-extraction": dict(sorted(encoders.items())),
        "seq2seq": dict(sorted(seq2seq.items())),
        # every causal LM's bare model (AutoModel: the embedders') and sequence classifier
        "text-encoder": {
            t: auto.MODEL_MAPPING_NAMES[t] for t in causal if t in auto.MODEL_MAPPING_NAMES
        },
        "text-classification": {
            t: c
            for t, c in auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.items()
            if t in causal
        },
    }


def case_key(model_type: str, rest: list, registered) -> str:
    """The registry key a parity case verifies: its ``model_class`` where that class is a key
    of its own (``T5EncoderModel``, built from a ``t5`` config), else its ``model_type``."""
    model_class = rest[-1].get("model_class") if rest and isinstance(rest[-1], dict) else None
    return model_class if model_class in registered else model_type


def statuses(
    junit_xml: Path | None, passed: dict | None = None
) -> dict[str, list[tuple[str, str, str]]]:
    """Task -> rows ``(model_type, transformers class, status)``; ``passed``: the parity
    results already read (:func:`parity_results`), else they are read or run here."""
    import importlib

    import mobius_text

    sys.path.insert(0, str(TESTS))
    registered = {
        key: getattr(cls, "task", "causal-lm") for key, cls in mobius_text.model_types().items()
    }
    if passed is None:
        passed = parity_results(
            [TESTS / name for name in (*PARITY_TESTS, BEYOND_HARNESS)], junit_xml
        )
    shipped = transformers_types()
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    for key, task in registered.items():  # sub-model types no task table lists (CLIP's text tower)
        # (a key that is a listed type's class, BertLMHeadModel, verifies that type's row)
        listed = any(key in types or key in types.values() for types in shipped.values())
        if task in shipped and not listed:
            shipped[task][key] = MODEL_MAPPING_NAMES.get(key) or key  # T5EncoderModel: a class
    shipped = {task: dict(sorted(types.items())) for task, types in shipped.items()}
    tables = {}
    for task, test, cases_module, _heading, _ in KITS:
        cases_by_type: dict[str, list[str]] = defaultdict(list)
        for case, (model_type, *rest) in importlib.import_module(cases_module).all_cases().items():
            cases_by_type[case_key(model_type, rest, registered)].append(case)
        rows = []
        for model_type, hf_class in shipped[task].items():
            # the row's class where it is registered for this task on its own (BertLMHeadModel
            # beside bert's encoder), else its model_type
            key = model_type if registered.get(model_type) == task else hf_class
            key = key if registered.get(key) == task else model_type
            cases = cases_by_type.get(key, [])
            other = registered.get(key)
            if other == task:
                ok = bool(cases) and all(passed[test].get(c, False) for c in cases)
                status = f"verified ({len(cases)} cases)" if ok else "registered, parity FAILING"
            elif other is not None:
                other_heading = next(k[3] for k in KITS if k[0] == other)
                status = f"built as {other}: see {other_heading}"
            elif task in ("causal-lm", "seq2seq") and (
                sibling := sibling_status(model_type, hf_class)
            ):
                status = sibling
            elif model_type in OUT_OF_SCOPE:
                status = f"out of scope: {OUT_OF_SCOPE[model_type]}"
            elif model_type in NOT_BUILT:
                status = f"not built: {NOT_BUILT[model_type]}"
            else:
                status = "not yet"
            rows.append((model_type, hf_class, status))
        tables[task] = rows
    return tables


def sibling_status(model_type: str, hf_class: str) -> str | None:
    """``built by mobius-vision (vision-language), verified there`` for a :data:`SIBLING_BUILDS`
    row whose key that package registers and verifies; else None."""
    from mobius import registry

    if model_type not in SIBLING_BUILDS:
        return None
    for key in (hf_class, model_type):
        if key in registry and registry.get(key).package != "mobius-text":
            entry = registry.get(key)
            if registry.is_verified(key):
                return f"built by {entry.package} ({entry.task}), verified there"
    return None


def head_columns(passed: dict) -> dict[str, dict[str, str]]:
    """Encoder model_type -> {head of :data:`HEAD_COLUMNS`: its cell}: ``verified`` where a
    passing parity case builds the head (``passed``: :func:`parity_results`), ``no class``
    where transformers has none."""
    import importlib
    import inspect

    from transformers.models.auto import modeling_auto as auto

    from mobius.testing import check_encoder_parity

    sys.path.insert(0, str(TESTS))
    default = inspect.signature(check_encoder_parity).parameters["heads"].default
    built: dict[str, set[str]] = defaultdict(set)
    cases = importlib.import_module("encoder_parity_cases").all_cases()
    for case, (model_type, _, *options) in cases.items():
        if passed["test_encoder_parity"].get(case, False):
            built[model_type].update((options[0] if options else {}).get("heads", default))
    for (model_type, head), (function, prefix) in BEYOND_HARNESS_HEADS.items():
        results = [ok for case, ok in passed.get(function, {}).items() if case.startswith(prefix)]
        if results and all(results) and model_type in built:
            built[model_type].add(head)
    cells: dict[str, dict[str, str]] = defaultdict(dict)
    for head, table in HEAD_COLUMNS.items():
        classes = getattr(auto, table)
        for model_type, heads in built.items():
            if head in heads:
                cells[model_type][head] = "verified"
            else:
                cells[model_type][head] = "not yet" if model_type in classes else "no class"
    return cells


def parity_tests() -> dict[str, str]:
    """Registry key -> the parity test holding its cases (``tests/FILE::FUNCTION``); nothing runs."""
    import importlib

    import mobius_text

    sys.path.insert(0, str(TESTS))
    registered = {
        key: getattr(cls, "task", "causal-lm") for key, cls in mobius_text.model_types().items()
    }
    tests: dict[str, str] = {}
    for (_task, test, cases_module, *_), file in zip(KITS, PARITY_TESTS, strict=True):
        for model_type, *rest in importlib.import_module(cases_module).all_cases().values():
            add_test(tests, case_key(model_type, rest, registered), file, test)
    return tests


def write_verified(rows: list[tuple[str, str]], transformers_version: str) -> None:
    """``verified.json`` from the verified rows ``(model_type, transformers class)``: the
    model types, and the classes registered as keys of their own (``BertLMHeadModel``)."""
    tests = parity_tests()
    keys = {t for t, _ in rows} | {c for _, c in rows if c in tests}
    write_verified_file(VERIFIED, sorted(keys), transformers_version, tests=tests)


def verified_from_table() -> tuple[list[tuple[str, str]], str]:
    """The verified rows and transformers version that SUPPORT.md records (no parity run)."""
    text = OUTPUT.read_text()
    version = re.search(r"against transformers ([^\s:]+):", text)
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]*)` \| verified ", text, flags=re.MULTILINE)
    return sorted(set(rows)), version[1] if version else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-run",
        type=Path,
        metavar="RESULTS.xml",
        help="read parity results from this JUnit XML instead of running the tests",
    )
    parser.add_argument(
        "--verified-from-table",
        action="store_true",
        help="only rewrite src/mobius_text/verified.json from SUPPORT.md's rows (no parity run)",
    )
    args = parser.parse_args()
    if args.verified_from_table:
        verified_rows, version = verified_from_table()
        write_verified(verified_rows, version)
        count = len({t for t, _ in verified_rows})
        print(f"wrote {VERIFIED}: {count} verified types from {OUTPUT.name}")
        return
    passed = parity_results([TESTS / name for name in (*PARITY_TESTS, BEYOND_HARNESS)], args.no_run)
    tables = statuses(args.no_run, passed)
    import transformers

    rows = [row for task_rows in tables.values() for row in task_rows]
    verified_types = sorted({t for t, _, status in rows if status.startswith("verified")})
    lines = [
        "# mobius-text: support",
        "",
        f"Generated by `scripts/support_table.py` against transformers {transformers.__version__}:",
        "every model_type transformers ships natively for each task mobius-text builds, and",
        f"its status; {len(verified_types)} types are verified by synthetic parity.",
    ]
    heads = head_columns(passed)
    for task, _, _, heading, meaning in KITS:
        task_rows = tables[task]
        verified = sum(status.startswith("verified") for _, _, status in task_rows)
        elsewhere = sum(status.endswith("verified there") for _, _, status in task_rows)
        also = f", and {elsewhere} more by sibling packages" if elsewhere else ""
        columns = list(HEAD_COLUMNS) if task == "feature-extraction" else []
        lines += [
            "",
            f"## {heading} ({task})",
            "",
            f"{verified} of {len(task_rows)} types verified ({meaning}){also}.",
            "",
            "| model_type | transformers class | status |" + "".join(f" {h} |" for h in columns),
            "|---|---|---|" + "---|" * len(columns),
            *(
                f"| `{t}` | `{c}` | {s} |"
                + "".join(f" {heads.get(t, {}).get(h, '')} |" for h in columns)
                for t, c, s in task_rows
            ),
        ]
    OUTPUT.write_text("\n".join(lines) + "\n")
    readme = README.read_text()
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    summary = [""]
    for task, _, _, heading, _ in KITS:
        names = [f"`{t}`" for t, _, status in tables[task] if status.startswith("verified")]
        summary.append(f"{heading} ({len(names)}): {', '.join(names)}.\n")
    README.write_text(readme[:start] + "\n".join(summary) + readme[end:])
    write_verified(
        [(t, c) for t, c, s in rows if s.startswith("verified")], transformers.__version__
    )
    print(f"wrote {OUTPUT}, {VERIFIED.name} and the README list: {len(verified_types)} verified")
    if any("FAILING" in s for _, _, s in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
