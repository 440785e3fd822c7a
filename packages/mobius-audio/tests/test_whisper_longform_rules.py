"""Whisper's timestamp rules and window splitting against transformers' own, on random cases.

:func:`mobius_audio.longform.timestamp_rules` must mask exactly what transformers'
``WhisperTimeStampLogitsProcessor`` masks, and :func:`~mobius_audio.longform.split_window`
must cut a window's tokens into the segments (times to the last bit) and move ``seek``
by the frames that ``WhisperGenerationMixin._retrieve_segment`` gives, for random
token streams of text and timestamps: pairs, lone stamps, single endings, none.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from mobius_audio.longform import note_unimplemented, split_window, timestamp_rules

VOCAB, EOS, NO_TIMESTAMPS = 120, 50, 59
BEGIN = NO_TIMESTAMPS + 1  # <|0.00|>


def random_tokens(rng: np.random.Generator, length: int) -> list[int]:
    """Text and timestamp tokens, timestamps often in pairs."""
    tokens: list[int] = []
    while len(tokens) < length:
        if rng.random() < 0.4:
            stamp = int(rng.integers(BEGIN, VOCAB))
            tokens += [stamp] * int(rng.integers(1, 3))
        else:
            tokens.append(int(rng.integers(0, EOS)))
    return tokens[:length]


def test_split_window_matches_transformers():
    import torch
    from transformers.models.whisper.generation_whisper import WhisperGenerationMixin

    rng = np.random.default_rng(0)
    prompt = torch.tensor([[51, 52, 55]])
    for case in range(400):
        tokens = random_tokens(rng, int(rng.integers(0, 12)))
        if case % 3 == 0 and tokens:  # end on text then one stamp: a single ending
            tokens[-1:] = [int(rng.integers(0, EOS)), int(rng.integers(BEGIN, VOCAB))]
        seek, frames = int(rng.integers(0, 9000)), int(rng.integers(1, 3001))
        expected, advance = WhisperGenerationMixin._retrieve_segment(
            seek_sequence=torch.tensor(tokens, dtype=torch.long),
            seek_outputs=[None],
            time_offset=torch.tensor([seek], dtype=torch.float64) * 0.02 / 2,
            timestamp_begin=BEGIN,
            seek_num_frames=torch.tensor([frames]),
            time_precision=0.02,
            time_precision_features=0.01,
            input_stride=2,
            prev_idx=0,
            idx=0,
            return_token_timestamps=False,
            decoder_input_ids=prompt,
        )
        segments, moved = split_window(
            tokens, timestamp_begin=BEGIN, seek=seek, window_frames=frames
        )
        assert [(s.start, s.end, s.tokens) for s in segments] == [
            (float(e["start"]), float(e["end"]), e["tokens"].tolist()) for e in expected
        ], tokens
        assert moved == int(advance), tokens


@pytest.mark.parametrize("max_initial", [None, 3])
def test_timestamp_rules_match_transformers(max_initial):
    import torch
    from transformers import GenerationConfig
    from transformers.generation.logits_process import WhisperTimeStampLogitsProcessor

    config = GenerationConfig(
        eos_token_id=EOS,
        no_timestamps_token_id=NO_TIMESTAMPS,
        max_initial_timestamp_index=max_initial,
    )
    prompt = [51, 52, 55]
    reference = WhisperTimeStampLogitsProcessor(config, begin_index=len(prompt))
    rng = np.random.default_rng(1)
    for case in range(300):
        generated = random_tokens(rng, int(rng.integers(0, 8)))
        # Random logits, sometimes with the timestamps lifted so that their mass wins.
        logits = rng.normal(size=VOCAB).astype(np.float32)
        if case % 2:
            logits[BEGIN:] += 2.5
        expected = reference(torch.tensor([prompt + generated]), torch.from_numpy(logits[None]))[0]
        rules = timestamp_rules(
            list(generated),
            timestamp_begin=BEGIN,
            no_timestamps_id=NO_TIMESTAMPS,
            eos_id=EOS,
            max_initial_index=max_initial,
        )
        got = rules(len(generated), False, logits.copy())
        np.testing.assert_array_equal(got, expected.numpy(), err_msg=str(generated))


def test_unimplemented_settings_get_a_note(caplog):
    with caplog.at_level(logging.WARNING, logger="mobius"):
        note_unimplemented({"condition_on_prev_tokens": True, "temperature": [0.0, 0.2]})
        note_unimplemented({"condition_on_prev_tokens": False, "logprob_threshold": None})
    assert [r.getMessage() for r in caplog.records] == [
        "the generation config sets condition_on_prev_tokens, temperature fallback, which "
        "mobius does not implement: decoding without"
    ]
