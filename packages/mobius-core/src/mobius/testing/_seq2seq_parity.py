"""Encoder–decoder parity: the encoder, decoder prefill and cached decode steps, against PyTorch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mobius.testing._encoder_parity import right_padded_batch
from mobius.testing._parity import PARITY_ATOL, build_with_cli, perturb_parameters
from mobius.testing._parity_log import record_parity


def make_random_seq2seq(hf_config, seed: int = 0, auto_class: str = "AutoModelForSeq2SeqLM"):
    """A float32 transformers seq2seq LM from ``hf_config``, every parameter perturbed, in eval mode.

    ``auto_class`` names the transformers auto class (``"AutoModelForSpeechSeq2Seq"``).
    """
    import torch
    import transformers

    torch.manual_seed(seed)
    model = getattr(transformers, auto_class).from_config(
        hf_config, dtype=torch.float32, attn_implementation="eager"
    )
    perturb_parameters(model, seed)
    return model.eval()


class OnnxSeq2Seq:
    """The two graphs of a seq2seq package in ONNX Runtime, with the cache contract of Seq2SeqTask."""

    def __init__(self, package: Path) -> None:
        import onnxruntime as ort

        providers = ["CPUExecutionProvider"]
        self.encoder = ort.InferenceSession(
            str(package / "encoder" / "model.onnx"), providers=providers
        )
        self.decoder = ort.InferenceSession(
            str(package / "decoder" / "model.onnx"), providers=providers
        )
        self.self_inputs = [i for i in self.decoder.get_inputs() if ".decoder." in i.name]

    def encode(self, input_ids, attention_mask):
        """``(last_hidden_state, {past name: cross cache})``."""
        names = [o.name for o in self.encoder.get_outputs()]
        out = dict(
            zip(
                names,
                self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask}),
                strict=True,
            )
        )
        cross = {
            n.replace("present.", "past_key_values.", 1): v
            for n, v in out.items()
            if n.startswith("present.")
        }
        return out["last_hidden_state"], cross

    def empty_cache(self, batch: int) -> dict[str, np.ndarray]:
        return {
            i.name: np.zeros((batch, i.shape[1], 0, i.shape[3]), np.float32)
            for i in self.self_inputs
        }

    def decode(self, input_ids, encoder_mask, cross, cache):
        """``(logits, next cache)``."""
        names = [o.name for o in self.decoder.get_outputs()]
        feeds = {"input_ids": input_ids, "encoder_attention_mask": encoder_mask, **cross, **cache}
        out = dict(zip(names, self.decoder.run(None, feeds), strict=True))
        cache = {
            n.replace("present.", "past_key_values.", 1): v
            for n, v in out.items()
            if n.startswith("present.")
        }
        return out["logits"], cache

    def decoder_step(self, source, cross, batch: int):
        """``step(input_ids) -> logits``: :meth:`decode` from an empty cache that it carries.

        ``source`` is what :meth:`decode` takes beside the ids (the source mask here).
        """
        cache = self.empty_cache(batch)

        def step(input_ids):
            nonlocal cache
            logits, cache = self.decode(input_ids, source, cross, cache)
            return logits

        return step


def torch_decoder_step(torch_model, encoder_outputs, **source):
    """``step(input_ids) -> logits``: transformers' decoder over ``encoder_outputs`` with a cache
    that it carries, sized as it fills; ``source`` holds extra forward arguments (the mask)."""
    import torch
    from transformers import DynamicCache, EncoderDecoderCache

    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())

    def step(input_ids):
        nonlocal cache
        with torch.no_grad():
            out = torch_model(
                encoder_outputs=encoder_outputs,
                decoder_input_ids=torch.from_numpy(input_ids),
                cache=cache,
                use_cache=True,
                **source,
            )
        cache = out.cache if hasattr(out, "cache") else out.past_key_values
        return out.logits.numpy()

    return step


@dataclass
class Seq2SeqParity:
    """Max abs differences: encoder states, decoder prefill, each decode step; both greedy streams."""

    ep: str
    encoder_diff: float = 0.0
    prefill_diff: float = 0.0
    decode_diffs: list[float] = field(default_factory=list)
    torch_tokens: list[list[int]] = field(default_factory=list)
    onnx_tokens: list[list[int]] = field(default_factory=list)
    generate_match: bool = True

    def greedy_rows(self) -> np.ndarray:
        """PyTorch's greedy tokens [batch, steps]: row by row, as generate returns them."""
        return np.asarray(self.torch_tokens, np.int64).T

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        assert self.onnx_tokens == self.torch_tokens, f"--ep {self.ep}: greedy tokens differ"
        assert self.generate_match, f"--ep {self.ep}: greedy tokens differ from generate()"
        worst = max(self.encoder_diff, self.prefill_diff, *self.decode_diffs)
        assert worst <= atol, (
            f"--ep {self.ep}: encoder {self.encoder_diff:.3g}, prefill {self.prefill_diff:.3g}, "
            f"decode {[f'{d:.3g}' for d in self.decode_diffs]} > {atol:g}"
        )


def decode_greedy_through_both(torch_step, onnx_step, first_ids, steps: int) -> Seq2SeqParity:
    """Prefill ``first_ids`` [batch, n] in both decoders, then ``steps`` greedy steps.

    Both are fed PyTorch's greedy token, so one early mismatch does not hide the
    later steps' differences. The result holds the prefill's and each step's max abs
    logits difference and both token streams (set ``ep`` and ``encoder_diff`` after).
    ``torch_step`` and ``onnx_step`` map ``input_ids`` to logits and keep their own
    caches (:func:`torch_decoder_step`, :meth:`OnnxSeq2Seq.decoder_step`).
    """
    result = Seq2SeqParity(ep="")
    decoder_ids = first_ids
    for step in range(steps + 1):
        torch_logits = torch_step(decoder_ids)
        logits = onnx_step(decoder_ids)
        diff = float(np.abs(logits - torch_logits).max())
        if step == 0:
            result.prefill_diff = diff
        else:
            result.decode_diffs.append(diff)
        torch_next = torch_logits[:, -1].argmax(-1)
        result.torch_tokens.append(torch_next.tolist())
        result.onnx_tokens.append(logits[:, -1].argmax(-1).tolist())
        decoder_ids = torch_next[:, None].astype(np.int64)
    return result


def compare_seq2seq(
    torch_model,
    onnx_model: OnnxSeq2Seq,
    lengths,
    decode_steps: int,
    seed: int,
    generate: bool = True,
    prefill: int = 2,
):
    """Encode a padded batch, prefill decoder tokens, then greedy steps through both caches."""
    import torch

    config = torch_model.config
    input_ids, mask, _ = right_padded_batch(lengths, config.vocab_size, 0, seed)
    hidden, cross = onnx_model.encode(input_ids, mask)
    encoder = torch_model.get_encoder()
    with torch.no_grad():
        reference = encoder(
            input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(mask)
        )
    real = mask.astype(bool)
    encoder_diff = float(np.abs(hidden - reference.last_hidden_state.numpy())[real].max())

    start = config.decoder_start_token_id
    batch = len(lengths)
    decoder_ids = np.full((batch, prefill), start, np.int64)
    decoder_ids[:, 1:] = (np.arange(batch) + 5)[:, None]  # prefill tokens after the start, per row
    result = decode_greedy_through_both(
        torch_decoder_step(torch_model, reference, attention_mask=torch.from_numpy(mask)),
        onnx_model.decoder_step(mask, cross, batch),
        decoder_ids,
        decode_steps,
    )
    result.encoder_diff = encoder_diff
    if not generate:
        return result
    # The loop's own greedy continuation equals transformers' generate from the start token.
    with torch.no_grad():
        generated = torch_model.generate(
            input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(mask),
            decoder_input_ids=torch.from_numpy(decoder_ids), do_sample=False,
            max_new_tokens=decode_steps + 1, min_new_tokens=decode_steps + 1,
        )  # fmt: skip
    result.generate_match = generated[:, prefill:].tolist() == result.greedy_rows().tolist()
    return result


def check_seq2seq_parity(
    hf_config,
    workdir: Path,
    *,
    lengths: tuple[int, ...] = (7, 4),
    decode_steps: int = 8,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
    generate: bool = True,
    prefill: int = 2,
) -> list[Seq2SeqParity]:
    """Build a perturbed tiny seq2seq model with the CLI and check both graphs against PyTorch.

    A batch of two sources (the shorter padded at the end) is encoded; the decoder
    prefills ``prefill`` tokens (two), then takes ``decode_steps`` greedy steps through its
    cache; the streams must equal transformers' ``generate`` (``generate=False`` skips
    that for configs generate cannot run: it sizes T5's cache by the encoder's depth).
    ``prefill=1`` starts from the start token alone, for references whose cached path
    drops the causal mask (FSMT's).
    """
    workdir = Path(workdir)
    torch_model = make_random_seq2seq(hf_config, seed)
    torch_model.save_pretrained(workdir / "hf")
    results = []
    for ep in eps:
        out = build_with_cli(workdir / "hf", workdir / f"onnx-{ep}", "--ep", ep)
        result = compare_seq2seq(
            torch_model, OnnxSeq2Seq(out), list(lengths), decode_steps, seed, generate, prefill
        )
        result.ep = ep
        result.assert_close(atol)
        results.append(result)
    return results
