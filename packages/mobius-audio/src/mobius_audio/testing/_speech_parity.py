"""Speech-to-text parity: the real feature extractor's features (and mask), both graphs, against PyTorch."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.testing import (
    PARITY_ATOL,
    OnnxSeq2Seq,
    Seq2SeqParity,
    build_with_cli,
    decode_greedy_through_both,
    make_random_seq2seq,
    torch_decoder_step,
)


class OnnxSpeechToText(OnnxSeq2Seq):
    """The two graphs of a speech-to-text package (:class:`mobius_audio.tasks.SpeechToTextTask`)."""

    def __init__(self, package: Path) -> None:
        super().__init__(package)
        self.encoder_names = [i.name for i in self.encoder.get_inputs()]
        self.masked = "encoder_attention_mask" in {i.name for i in self.decoder.get_inputs()}

    def encode(self, inputs):
        """``(last_hidden_state, {past name: cross cache}, encoder_attention_mask or None)``.

        ``inputs`` holds the extractor's outputs; the graph takes those it names.
        """
        names = [o.name for o in self.encoder.get_outputs()]
        values = self.encoder.run(None, {n: inputs[n] for n in self.encoder_names})
        out = dict(zip(names, values, strict=True))
        cross = {
            n.replace("present.", "past_key_values.", 1): v
            for n, v in out.items()
            if n.startswith("present.")
        }
        return out["last_hidden_state"], cross, out.get("encoder_attention_mask")

    def decode(self, input_ids, encoder_mask, cross, cache):
        """``(logits, next cache)``; ``encoder_mask`` is fed where the decoder takes it."""
        names = [o.name for o in self.decoder.get_outputs()]
        feeds = {"input_ids": input_ids, **cross, **cache}
        if self.masked:
            feeds["encoder_attention_mask"] = encoder_mask
        out = dict(zip(names, self.decoder.run(None, feeds), strict=True))
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


def reference_encoder_mask(torch_model, hidden, attention_mask):
    """transformers' encoder mask ``[batch, encoder_sequence]``: the subsampled ``attention_mask``."""

    mask = getattr(hidden, "attention_mask", None)  # Moonshine's encoder returns it
    pooled = getattr(torch_model, "_compute_sub_sample_lengths_from_attention_mask", None)
    if pooled is not None:  # SeamlessM4T: the adapter's lengths, computed in the model's forward
        steps = np.arange(hidden.last_hidden_state.shape[1])
        return (steps[None, :] < pooled(attention_mask).numpy()[:, None]).astype(np.int64)
    if mask is None:  # Speech2Text reduces it in the model's forward, SpeechT5 in its prenet
        length = hidden.last_hidden_state.shape[1]
        reducer = getattr(torch_model.get_encoder(), "prenet", None)
        reducer = torch_model.model if reducer is None else reducer
        mask = reducer._get_feature_vector_attention_mask(length, attention_mask)
    return mask.numpy().astype(np.int64)


def compare_speech_to_text(
    torch_model, onnx_model: OnnxSpeechToText, inputs, prompt, decode_steps: int, generate: bool
) -> Seq2SeqParity:
    """Encode a batch, prefill ``prompt`` on every row, then greedy steps through both caches.

    ``inputs`` are the extractor's arrays: the source and, for a model that masks
    padding, ``attention_mask``; then the encoder's reduced mask must equal
    transformers' and the decoder reads it at every step.
    """
    import torch
    from transformers import GenerationMixin

    hidden, cross, encoder_mask = onnx_model.encode(inputs)
    torch_inputs = {n: torch.from_numpy(v) for n, v in inputs.items()}
    with torch.no_grad():
        reference = torch_model.get_encoder()(**torch_inputs)
    encoder_diff = float(np.abs(hidden - reference.last_hidden_state.numpy()).max())
    if onnx_model.masked:
        expected = reference_encoder_mask(torch_model, reference, torch_inputs["attention_mask"])
        assert encoder_mask.shape == expected.shape and (encoder_mask == expected).all(), (
            f"encoder_attention_mask {encoder_mask.tolist()} != transformers' {expected.tolist()}"
        )
        assert not expected.all(), "the batch has no padding: the mask would go untested"

    batch = hidden.shape[0]
    decoder_ids = np.tile(np.asarray(prompt, np.int64), (batch, 1))
    source_mask = {k: v for k, v in torch_inputs.items() if k == "attention_mask"}
    result = decode_greedy_through_both(
        torch_decoder_step(torch_model, reference, **source_mask),
        onnx_model.decoder_step(encoder_mask, cross, batch),
        decoder_ids,
        decode_steps,
    )
    result.encoder_diff = encoder_diff

    if generate:
        # Whisper's generate builds the same prompt from the generation config and returns
        # the new tokens; the generic generate starts from decoder_input_ids and returns them too.
        options = {}
        standard = type(torch_model).generate is GenerationMixin.generate
        if standard:
            options["decoder_input_ids"] = torch.from_numpy(decoder_ids)
        with torch.no_grad():
            generated = torch_model.generate(
                **torch_inputs, do_sample=False, max_new_tokens=decode_steps + 1, **options
            ).tolist()
        new = [row[len(prompt) :] for row in generated] if standard else generated
        loop = result.greedy_rows().tolist()
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

    A batch of random waveforms of ``seconds`` (different lengths) goes through
    ``feature_extractor``'s numpy path (saved beside the model). A model that masks
    padding (its decoder takes ``encoder_attention_mask``) gets the batch padded to
    its longest clip with the extractor's ``attention_mask``, and its encoder's reduced
    mask must equal transformers'; Whisper gets its padded window. The decoder
    prefills ``prompt`` (Whisper's start, language, task and no-timestamps tokens;
    the decoder start token elsewhere) then takes ``decode_steps`` greedy steps.
    ``prepare(model)`` may set the model's generation config so that transformers'
    ``generate`` starts from the same prompt; its new tokens must equal the loop's.
    """
    from mobius_audio.generate import extract_inputs

    workdir = Path(workdir)
    torch_model = make_random_seq2seq(hf_config, seed, auto_class="AutoModelForSpeechSeq2Seq")
    if prepare is not None:
        prepare(torch_model)
    torch_model.save_pretrained(workdir / "hf")
    feature_extractor.save_pretrained(workdir / "hf")
    rate = feature_extractor.sampling_rate
    waves = random_audio(seconds, rate, seed)
    results = []
    for ep in eps:
        out = build_with_cli(workdir / "hf", workdir / f"onnx-{ep}", "--ep", ep)
        onnx_model = OnnxSpeechToText(out)
        name = torch_model.main_input_name
        inputs = extract_inputs(feature_extractor, waves, rate, name, mask=onnx_model.masked)
        result = compare_speech_to_text(
            torch_model, onnx_model, inputs, list(prompt), decode_steps, generate
        )
        result.ep = ep
        result.assert_close(atol)
        results.append(result)
    return results


def save_whisper_bpe_tokenizer(directory, vocab: dict[str, int], special: list[str]) -> None:
    """A byte-level BPE tokenizer without merges (``vocab``: pieces and ``special`` tokens,
    ``<|endoftext|>`` first) that onnxruntime-extensions reads as Whisper's.

    Extensions read no word-level ``tokenizer.json``; ``tokenizer_class`` is
    ``WhisperTokenizer``, a class they know.
    """
    import json
    from pathlib import Path

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(vocab, []))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    end = special[0]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=end, eos_token=end, pad_token=end
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(special[1:])})
    tokenizer.save_pretrained(directory)
    path = Path(directory) / "tokenizer_config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps(dict(config, tokenizer_class="WhisperTokenizer")))
