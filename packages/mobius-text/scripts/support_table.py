"""Write SUPPORT.md: every causal-LM model_type transformers ships, and its status in mobius-text.

The status comes from the registry (what mobius-text registers) and from a
fresh run of the parity tests (which of its cases pass): a type is *verified*
only when it is registered and every parity case of it passes. The verified
types also go into ``src/mobius_text/verified.json``, which the registry reads
(``registry.is_verified``, ``mobius info``).

    uv run python packages/mobius-text/scripts/support_table.py [--no-run RESULTS.xml]
    uv run python packages/mobius-text/scripts/support_table.py --verified-from-table
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
TESTS = PACKAGE_DIR / "tests"
OUTPUT = PACKAGE_DIR / "SUPPORT.md"
README = PACKAGE_DIR / "README.md"
VERIFIED = PACKAGE_DIR / "src" / "mobius_text" / "verified.json"
BEGIN, END = "<!-- verified-models:begin -->", "<!-- verified-models:end -->"

ENCODERS = (
    "bert bert-generation big_bird camembert data2vec-text electra ernie megatron-bert rembert "
    "roberta roberta-prelayernorm roc_bert roformer xlm xlm-roberta xlm-roberta-xl xmod xlnet "
    "reformer"
).split()
SEQ2SEQ_DECODERS = (
    "bart bigbird_pegasus blenderbot blenderbot-small marian mbart mvp pegasus plbart prophetnet "
    "trocr whisper"
).split()
MULTIMODAL = (
    "aria_text emu3 fuyu gemma3 gemma3n gemma4 gemma4_unified git got_ocr2 mllama "
    "phi4_multimodal minimax_m3_vl_text dots3_note moss_transcribe_diarize blt "
    "llama4 qwen3_5 qwen3_5_moe qwen4_exp"
).split()
AUDIO = "moshi musicgen musicgen_melody".split()

OUT_OF_SCOPE = {
    **{t: "encoder with a causal-LM head: the encoder issue" for t in ENCODERS},
    **{
        t: "decoder half of an encoder–decoder: the encoder–decoder issues"
        for t in SEQ2SEQ_DECODERS
    },
    **{t: "multimodal model: the vision–language issue" for t in MULTIMODAL},
    **{t: "audio model: the audio issue" for t in AUDIO},
}


def causal_lm_types() -> dict[str, str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return dict(sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()))


def parity_results(junit_xml: Path | None) -> dict[str, bool]:
    """Case name -> passed, from a JUnit XML report (running the parity tests if none is given)."""
    with tempfile.TemporaryDirectory() as tmp:
        if junit_xml is None:
            junit_xml = Path(tmp) / "parity.xml"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    str(TESTS / "test_parity.py"),
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    f"--junitxml={junit_xml}",
                ],
                check=False,
            )
        results = {}
        for case in ET.parse(junit_xml).iter("testcase"):
            name = case.get("name", "")
            if name.startswith("test_causal_lm_parity["):
                failed = any(child.tag in ("failure", "error", "skipped") for child in case)
                results[name[len("test_causal_lm_parity[") : -1]] = not failed
        return results


def statuses(junit_xml: Path | None) -> list[tuple[str, str, str]]:
    import mobius_text

    sys.path.insert(0, str(TESTS))
    from text_parity_cases import all_cases

    cases_by_type: dict[str, list[str]] = defaultdict(list)
    for case, (model_type, *_rest) in all_cases().items():
        cases_by_type[model_type].append(case)
    registered = mobius_text.model_types()
    passed = parity_results(junit_xml)

    rows = []
    for model_type, hf_class in causal_lm_types().items():
        cases = cases_by_type.get(model_type, [])
        if model_type in registered:
            ok = bool(cases) and all(passed.get(c, False) for c in cases)
            status = f"verified ({len(cases)} cases)" if ok else "registered, parity FAILING"
        elif model_type in OUT_OF_SCOPE:
            status = f"out of scope: {OUT_OF_SCOPE[model_type]}"
        else:
            status = "not yet"
        rows.append((model_type, hf_class, status))
    return rows


def write_verified(keys: list[str], transformers_version: str) -> None:
    """Write ``verified.json``: the verified model types, shipped in the wheel for the registry."""
    data = {
        "generated_by": "scripts/support_table.py",
        "transformers": transformers_version,
        "verified": sorted(keys),
    }
    VERIFIED.write_text(json.dumps(data, indent=1) + "\n")


def verified_from_table() -> tuple[list[str], str]:
    """The verified types and transformers version that SUPPORT.md records (no parity run)."""
    text = OUTPUT.read_text()
    version = re.search(r"against transformers ([^\s:]+):", text)
    keys = re.findall(r"^\| `([^`]+)` \| `[^`]*` \| verified ", text, flags=re.MULTILINE)
    return keys, version[1] if version else "unknown"


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
        keys, version = verified_from_table()
        write_verified(keys, version)
        print(f"wrote {VERIFIED}: {len(keys)} verified types from {OUTPUT.name}")
        return
    rows = statuses(args.no_run)
    import transformers

    verified = sum(status.startswith("verified") for _, _, status in rows)
    lines = [
        "# mobius-text: causal-LM support",
        "",
        f"Generated by `scripts/support_table.py` against transformers {transformers.__version__}:",
        f"{verified} of {len(rows)} causal-LM model types are verified by synthetic parity",
        "(fp32, max abs logit difference ≤ 1e-4 on prefill and 8 cached decode steps,",
        "identical greedy tokens, batch 1 and left-padded batch 2).",
        "",
        "| model_type | transformers class | status |",
        "|---|---|---|",
        *(f"| `{t}` | `{c}` | {s} |" for t, c, s in rows),
        "",
    ]
    OUTPUT.write_text("\n".join(lines))
    names = ", ".join(f"`{t}`" for t, _, status in rows if status.startswith("verified"))
    readme = README.read_text()
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    summary = f"\n{verified} model types verified by parity (see SUPPORT.md): {names}.\n"
    README.write_text(readme[:start] + summary + readme[end:])
    write_verified([t for t, _, s in rows if s.startswith("verified")], transformers.__version__)
    print(
        f"wrote {OUTPUT}, {VERIFIED.name} and the README list: {verified} verified of {len(rows)}"
    )
    if any("FAILING" in s for _, _, s in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
