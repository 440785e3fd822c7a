"""Sampling filters, the decode loop and streaming detokenisation of :mod:`mobius.generate` (numpy only)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from mobius.generate import (
    GenerationStats,
    RuntimeMissingError,
    TextGenerator,
    TextStream,
    begin_suppress_tokens,
    decode_loop,
    force_token,
    sample_next_token,
    suppress_tokens,
    top_k_filter,
    top_p_filter,
)

LOGITS = np.array([1.0, 3.0, 2.0, 0.5, 3.0, -1.0], dtype=np.float32)


def kept(filtered: np.ndarray) -> list[int]:
    return np.flatnonzero(np.isfinite(filtered)).tolist()


def test_top_k_keeps_the_k_largest_and_ties():
    assert kept(top_k_filter(LOGITS, 3)) == [1, 2, 4]
    assert kept(top_k_filter(LOGITS, 2)) == [1, 4]
    assert kept(top_k_filter(LOGITS, 1)) == [1, 4]  # a tie with the k-th value stays
    assert kept(top_k_filter(LOGITS, 0)) == list(range(6))
    assert kept(top_k_filter(LOGITS, None)) == list(range(6))
    assert kept(top_k_filter(LOGITS, 100)) == list(range(6))
    np.testing.assert_array_equal(top_k_filter(LOGITS, 3)[[1, 2, 4]], LOGITS[[1, 2, 4]])


def test_top_p_keeps_the_nucleus():
    logits = np.log(np.array([0.5, 0.05, 0.3, 0.15], dtype=np.float32))
    assert kept(top_p_filter(logits, 0.5)) == [0]  # 0.5 reached by the first token
    assert kept(top_p_filter(logits, 0.6)) == [0, 2]
    assert kept(top_p_filter(logits, 0.8)) == [0, 2]  # 0.5 + 0.3 reaches 0.8
    assert kept(top_p_filter(logits, 0.81)) == [0, 2, 3]
    assert kept(top_p_filter(logits, 0.01)) == [0]  # the likeliest token always survives
    assert kept(top_p_filter(logits, 1.0)) == [0, 1, 2, 3]


def test_greedy_is_argmax_and_temperature_zero_is_greedy():
    logits = np.array([0.1, 2.0, 1.9])
    assert sample_next_token(logits) == 1
    rng = np.random.default_rng(0)
    assert all(
        sample_next_token(logits, rng, do_sample=True, temperature=0) == 1 for _ in range(20)
    )


def test_sampling_is_seeded_and_follows_the_filters():
    logits = np.zeros(50, dtype=np.float32)

    def draws(seed, **options):
        rng = np.random.default_rng(seed)
        return [sample_next_token(logits, rng, do_sample=True, **options) for _ in range(40)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)
    ranked = np.arange(50, dtype=np.float32)  # token 49 likeliest
    rng = np.random.default_rng(0)
    picks = {sample_next_token(ranked, rng, do_sample=True, top_k=3) for _ in range(200)}
    assert picks == {47, 48, 49}


def test_temperature_sharpens_and_flattens():
    logits = np.array([0.0, 1.0], dtype=np.float32)

    def share_of_best(temperature):
        rng = np.random.default_rng(0)
        picks = [
            sample_next_token(logits, rng, do_sample=True, temperature=temperature)
            for _ in range(4000)
        ]
        return np.mean(picks)

    expected = 1 / (1 + np.exp(-1.0))  # softmax([0, 1])[1] = 0.731
    assert abs(share_of_best(1.0) - expected) < 0.03
    assert share_of_best(0.1) > 0.99
    assert abs(share_of_best(100.0) - 0.5) < 0.03
    with pytest.raises(ValueError, match="temperature"):
        sample_next_token(logits, do_sample=True, temperature=-1)


def utf8_decode(ids: list[int]) -> str:
    """A byte-level 'tokenizer': each id is one byte."""
    return bytes(ids).decode("utf-8", errors="replace")


def test_stream_never_splits_a_character():
    text = "héllo, 東京 👋!"
    stream = TextStream(utf8_decode)
    pieces = [stream.push(byte) for byte in text.encode()]
    pieces.append(stream.flush())
    assert "".join(pieces) == text
    assert all("\ufffd" not in piece for piece in pieces)
    assert pieces[:2] == ["h", ""]  # "é" is two bytes: nothing shows until both came


def test_stream_flushes_an_incomplete_character_at_the_end():
    stream = TextStream(utf8_decode)
    assert stream.push(ord("a")) == "a"
    assert stream.push("東".encode()[0]) == ""
    assert stream.flush() == "\ufffd"


def test_stats_report_the_decode_rate():
    stats = GenerationStats(
        prompt_tokens=5, new_tokens=11, time_to_first_token_s=0.2, decode_time_s=0.5
    )
    assert stats.decode_tokens_per_s == pytest.approx(20.0)
    assert "20.0 tokens/s" in stats.summary() and "200 ms" in stats.summary()
    assert "n/a" in GenerationStats(new_tokens=1).summary()


def test_missing_onnxruntime_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "model.onnx").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import now raises ImportError
    with pytest.raises(RuntimeMissingError, match=r"pip install mobius-core\[run\]"):
        TextGenerator(tmp_path)


def _counting_step(vocab: int = 6):
    """A fake model: logits favour ``(last id + 1) % vocab``; records what it was fed."""
    fed = []

    def step(ids):
        fed.append(list(ids))
        logits = np.zeros(vocab, np.float32)
        logits[(ids[-1] + 1) % vocab] = 5.0
        return logits

    return step, fed


def test_decode_loop_feeds_the_prompt_then_each_token_and_stops_at_eos():
    step, fed = _counting_step()
    stats = GenerationStats()
    tokens = list(decode_loop(step, [0], stats=stats, max_new_tokens=10, eos_token_ids=[4]))
    assert tokens == [1, 2, 3] and fed == [[0], [1], [2], [3]]
    assert stats.stop_reason == "eos" and stats.new_tokens == 4


def test_decode_loop_caps_at_the_room_left():
    step, _ = _counting_step()
    stats = GenerationStats()
    assert list(decode_loop(step, [0], stats=stats, max_new_tokens=10, room=2)) == [1, 2]
    assert stats.stop_reason == "context_length"


def test_processors_suppress_and_force_without_drawing():
    step, _ = _counting_step()
    processors = [
        suppress_tokens([3]),
        begin_suppress_tokens(1),
        force_token(5, at="last"),
    ]
    stats = GenerationStats()
    tokens = list(decode_loop(step, [0], stats=stats, max_new_tokens=3, processors=processors))
    # step 0: 1 is suppressed first, so the argmax is the first of the zeros (0);
    # step 1: after 0 comes 1; step 2: forced to 5
    assert tokens == [0, 1, 5]

    # A forced token draws no random number: what follows it is sampled as if the
    # loop had started after it.
    def flat(ids):
        return np.roll(np.linspace(0.0, 1.0, 6, dtype=np.float32), ids[-1])

    sampled = dict(stats=GenerationStats(), do_sample=True, seed=0)
    forced = list(
        decode_loop(flat, [0], max_new_tokens=9, processors=[force_token(2, at="first")], **sampled)
    )
    assert forced[0] == 2
    assert forced[1:] == list(decode_loop(flat, [2], max_new_tokens=8, **sampled))
    assert len(set(forced)) > 2, "a degenerate draw: the test would prove little"


def test_text_runners_refuse_an_output_file(tmp_path):
    """Text goes to stdout: ``--output`` (a file runners of images and audio write) is refused
    by core's runner and by every runner that streams through ``stream_to_stdout``."""
    from mobius.errors import MobiusError
    from mobius.generate import run_text_cli, stream_to_stdout

    class Streamer:  # what stream_to_stdout reads before it generates
        package_dir = tmp_path

        def sampling_defaults(self):
            raise AssertionError("refused before the package is asked anything")

    options = {"output_file": "out.wav"}
    with pytest.raises(MobiusError, match="--output is for packages that write a file"):
        stream_to_stdout(Streamer(), "hi", options)
    with pytest.raises(MobiusError, match=f"{tmp_path} generates text"):
        run_text_cli(tmp_path, "hi", options)


def test_text_runner_refuses_guidance(tmp_path):
    """``--guidance-scale`` (core's, for guided image, music and speech generators) is refused
    for a text package rather than ignored."""
    from mobius.errors import MobiusError
    from mobius.generate import run_text_cli

    with pytest.raises(MobiusError, match="--guidance-scale applies to guided generators"):
        run_text_cli(tmp_path, "hi", {"guidance_scale": 3.0})
