"""``mobius build --validate`` for ``streaming-speech-to-text`` packages (Kyutai STT; contract:
:mod:`mobius.validate`).

The sample is two clips of seeded noise (:data:`SAMPLE_SECONDS`) at the codec's rate,
padded by the package's extractor in numpy (:mod:`mobius_audio.kyutai_features`).
With torch, the source as transformers reads it (float32) checks: the audio
encoder's codes of the batch equal its Mimi ``encode``; the LM's logits over the
first clip's streams (its start position, then transformers' greedy tokens over the
clip's codes, as many positions as the sliding window holds) against its forward;
the runner's greedy tokens for the first clip against its ``generate``. ``tokens_agree``
is both equalities. Without torch the sample runs through the graphs alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.validate import ValidationReport, load_reference, smoke_report

#: The sample clips' lengths in seconds.
SAMPLE_SECONDS = (0.5, 0.3)
SEED = 0
TASK = "streaming-speech-to-text"


def validate_streaming_stt(package_dir: Path, source: Path, record: dict, reference: bool):
    """Codes, LM logits and greedy tokens of the sample against transformers."""
    from mobius_audio.kyutai_stt import KyutaiSpeechToText
    from mobius_audio.testing._codec_parity import random_clips

    stt = KyutaiSpeechToText(package_dir)
    rate = stt.features.sampling_rate
    clips = random_clips(tuple(int(s * rate) for s in SAMPLE_SECONDS), SEED)
    batch = stt.features(clips)["input_values"]
    codes = stt.encode(batch)
    tokens = stt.generate_ids(clips[0])
    checked = (
        f"{len(clips)} clips of seeded noise ({' and '.join(f'{s:g} s' for s in SAMPLE_SECONDS)}): "
        "the codes, the LM's logits and the first clip's greedy tokens"
    )
    if not reference:
        return smoke_report(TASK, checked, {"audio_codes": codes, "tokens": np.array(tokens)})
    import torch

    model = load_reference("KyutaiSpeechToTextForConditionalGeneration", source)
    first = stt.features(clips[:1])["input_values"]
    with torch.no_grad():
        expected_codes = model.codec_model.encode(torch.from_numpy(batch)).audio_codes.numpy()
        expected = model.generate(input_values=torch.from_numpy(first), do_sample=False)
    expected_tokens = expected[0, 1:].tolist()
    # The streams transformers' generate fed: start position, then its tokens over the codes.
    first_codes = stt.encode(first)[0]
    window = model.config.sliding_window or len(expected_tokens)
    positions = max(1, min(len(expected_tokens), window))
    text = [stt.bos, *expected_tokens[: positions - 1]]
    audio = [np.full(first_codes.shape[0], stt.audio_bos)]
    audio += [first_codes[:, p] for p in range(positions - 1)]
    ids = np.concatenate([np.array(text)[:, None], np.stack(audio)], axis=1)[None]
    logits = stt.decoder.run(["logits"], {
        "input_ids": ids.astype(np.int64),
        "attention_mask": np.ones((1, positions), np.int64),
        "position_ids": np.arange(positions)[None],
        **stt.empty_cache(1),
    })[0]  # fmt: skip
    with torch.no_grad():
        expected_logits = model(input_ids=torch.from_numpy(ids.astype(np.int64))).logits.numpy()
    report = ValidationReport(TASK, f"transformers {type(model).__name__}", checked)
    report.diffs = {"logits": float(np.abs(logits - expected_logits).max())}
    same_codes = codes.shape == expected_codes.shape and bool((codes == expected_codes).all())
    report.tokens_agree = same_codes and tokens == expected_tokens
    return report
