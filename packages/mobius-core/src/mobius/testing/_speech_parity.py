"""Speech-to-text parity: log-mel features from the real feature extractor, both graphs, against PyTorch."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.testing._parity import PARITY_ATOL, build_with_cli
from mobius.testing._seq2seq_parity import OnnxSeq2Seq, Seq2SeqParity, make_random_seq2seq


class OnnxSpeechToText(OnnxSeq2Seq):
    """The two graphs of a speech-to-text package (:mod:`mobius.tasks._speech_to_text`)."""

    def encode(self, input_features):
        """``(last_hidden_state, {past name: cross cache})``."""
        names = [o.name for o in self.encoder.get_outputs()]
        values = self.encoder.run(None, {"input_features": input_features})
        out = dict(zip(names, values, strict=True))
        cross = {
            n.replace("present.", "past_key_values.", 1): v
            for n, v in out.items()
            if n.startswith("present.")
        }
        return out["last_hidden_state"], cross

    def decode(self, input_ids, cross, cache):
        """``(logits, next cache)``; there is no encoder mask."""
        names = [o.name for o in self.decoder.get_outputs()]
        out = dict(
            zip(
                names,
                self.decoder.run(None, {"input_ids": input_ids, **cross, **cache}),
                strict=True,
            )
        )
        cache = {
            n.replace("present.", "past_key_values.", 1): v
            for n, v in out.items()
            if n.startswith("present.")
        }
        return out["logits"], cache


def random_audio(seconds: tuple[float, ...], sampling_rate: int, seed: int) -> list[np.ndarray]:
    """One float32 waveform per length: a tone per row plus seeded noise, in [-1, 1]."""
    rng = np.random.default_rng(seed)
    waves = []
    for row, length in enumerate(seconds):
        t = np.arange(int(length * sampling_rate)) / sampling_rate
        tone = 0.5 * np.sin(2 * np.pi * (220.0 * (row + 1)) * t)
        waves.append((tone + 0.1 * rng.standard_normal(t.shape)).astype(np.float32))
    return waves


def numpy_features(feature_extractor, waves, sampling_rate: int) -> np.ndarray:
    """``input_features`` through the extractor's numpy path, as mobius computes them (no torch)."""
    from mobius._speech import extract_features

    return extract_features(feature_extractor, waves, sampling_rate)


def compare_speech_to_text(
    torch_model, onnx_model: OnnxSpeechToText, features, prompt, decode_steps: int, generate: bool
) -> Seq2SeqParity:
    """Encode a batch, prefill ``prompt`` on every row, then greedy steps through both caches."""
    import torch
    from transformers import DynamicCache, EncoderDecoderCache

    result = Seq2SeqParity(ep="")
    hidden, cross = onnx_model.encode(features)
    with torch.no_grad():
        reference = torch_model.get_encoder()(input_features=torch.from_numpy(features))
    result.encoder_diff = float(np.abs(hidden - reference.last_hidden_state.numpy()).max())

    batch = features.shape[0]
    decoder_ids = np.tile(np.asarray(prompt, np.int64), (batch, 1))
    cache = onnx_model.empty_cache(batch)
    torch_cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    all_ids = decoder_ids
    for step in range(decode_steps + 1):
        with torch.no_grad():
            out = torch_model(
                encoder_outputs=reference,
                decoder_input_ids=torch.from_numpy(decoder_ids),
                cache=torch_cache,
                use_cache=True,
            )
        torch_cache = out.cache if hasattr(out, "cache") else out.past_key_values
        torch_logits = out.logits.numpy()
        logits, cache = onnx_model.decode(decoder_ids, cross, cache)
        diff = float(np.abs(logits - torch_logits).max())
        if step == 0:
            result.prefill_diff = diff
        else:
            result.decode_diffs.append(diff)
        torch_next = torch_logits[:, -1].argmax(-1)
        result.torch_tokens.append(torch_next.tolist())
        result.onnx_tokens.append(logits[:, -1].argmax(-1).tolist())
        decoder_ids = torch_next[:, None].astype(np.int64)
        all_ids = np.concatenate([all_ids, decoder_ids], axis=1)

    if generate:
        # transformers' Whisper generate builds the same prompt from the generation config.
        with torch.no_grad():
            generated = torch_model.generate(
                input_features=torch.from_numpy(features), do_sample=False,
                max_new_tokens=decode_steps + 1,
            )  # fmt: skip
        new = generated.tolist()  # Whisper's generate returns the new tokens, not the prompt
        loop = all_ids[:, len(prompt) :].tolist()
        eos = set(_ids(torch_model.generation_config.eos_token_id))
        result.generate_match = [_until(r, eos) for r in new] == [_until(r, eos) for r in loop]
    return result


def _ids(value) -> list[int]:
    return [] if value is None else [value] if isinstance(value, int) else list(value)


def _until(tokens: list[int], eos: set[int]) -> list[int]:
    """``tokens`` up to and including the first end token (generate pads the rest)."""
    for i, token in enumerate(tokens):
        if token in eos:
            return tokens[: i + 1]
    return tokens


def check_speech_to_text_parity(
    hf_config,
    feature_extractor,
    workdir: Path,
    *,
    prompt: tuple[int, ...],
    seconds: tuple[float, ...] = (0.6, 1.0),
    decode_steps: int = 8,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
    generate: bool = True,
    prepare=None,
) -> list[Seq2SeqParity]:
    """Build a perturbed tiny speech seq2seq model with the CLI and check both graphs against PyTorch.

    A batch of random waveforms of ``seconds`` goes through ``feature_extractor``'s
    numpy path (saved beside the model); the decoder prefills ``prompt`` (Whisper's
    start, language, task and no-timestamps tokens) then takes ``decode_steps`` greedy
    steps. ``prepare(model)`` may set the model's generation config so that
    transformers' ``generate`` starts from the same prompt; its new tokens must equal
    the loop's.
    """
    workdir = Path(workdir)
    torch_model = make_random_seq2seq(hf_config, seed, auto_class="AutoModelForSpeechSeq2Seq")
    if prepare is not None:
        prepare(torch_model)
    torch_model.save_pretrained(workdir / "hf")
    feature_extractor.save_pretrained(workdir / "hf")
    rate = feature_extractor.sampling_rate
    features = numpy_features(feature_extractor, random_audio(seconds, rate, seed), rate)
    results = []
    for ep in eps:
        out = build_with_cli(workdir / "hf", workdir / f"onnx-{ep}", "--ep", ep)
        result = compare_speech_to_text(
            torch_model, OnnxSpeechToText(out), features, list(prompt), decode_steps, generate
        )
        result.ep = ep
        result.assert_close(atol)
        results.append(result)
    return results
