"""``mobius build --validate`` for ``conversational-speech`` packages (CSM; the contract: :mod:`mobius.validate`).

The sample is :data:`SAMPLE_TURNS` through the package's tokenizer, as the runner
prompts. With torch, transformers' ``CsmForConditionalGeneration`` (``from_pretrained``,
float32) reads the same batch: the backbone's prefill and cached frames, one depth
decoder frame and Mimi's encode and decode
(:func:`mobius_audio.testing._csm_parity.compare_csm`). Without torch the sample goes
through the backbone, one depth step and the codec decoder alone (a smoke run).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.validate import ValidationReport, load_reference, smoke_report

SAMPLE_TURNS = ("[0]Hello from Sesame.", "[1]Hi!")


def validate_conversational_speech(package_dir: Path, source: Path, record: dict, reference: bool):
    """The sample's logits, states and audio against transformers' (or a smoke run)."""
    from mobius_audio.csm_generate import CsmGenerator, run_named

    csm = CsmGenerator(package_dir)
    prompts = [csm.prompt_ids(turn) for turn in SAMPLE_TURNS]
    checked = f"{len(prompts)} prompts, 3 cached frames, one depth-decoder frame, Mimi both ways"
    if not reference:
        from mobius_audio.testing._csm_parity import left_padded

        ids, mask, positions = left_padded(prompts)
        feeds = csm.empty_cache(csm.backbone, len(ids))
        rows = np.stack([csm.text_rows(row) for row in ids])
        feeds.update(input_ids=rows, attention_mask=mask, position_ids=positions)
        outputs = run_named(csm.backbone, feeds)
        state = outputs["last_hidden_state"][:, -1]
        step = {**csm.empty_cache(csm.depth, len(ids)), "backbone_last_hidden_state": state}
        step["input_ids"] = np.zeros((len(ids), 2), np.int64)
        depth = run_named(csm.depth, step)["logits"]
        codes = np.zeros((1, csm.num_codebooks, 2), np.int64)
        audio = csm.codec.run(["audio_values"], {"audio_codes": codes})[0]
        return smoke_report(
            "conversational-speech", checked, {**outputs, "depth_logits": depth, "audio": audio}
        )
    from mobius_audio.testing._csm_parity import compare_csm

    torch_model = load_reference("CsmForConditionalGeneration", source)
    report = ValidationReport(
        "conversational-speech", f"transformers {type(torch_model).__name__}", checked
    )
    report.diffs = compare_csm(torch_model, csm, prompts).diffs
    return report
