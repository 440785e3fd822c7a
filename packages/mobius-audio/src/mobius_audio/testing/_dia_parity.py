"""Dia parity: the text-to-dialogue graphs (:mod:`mobius_audio.tasks_dia`) against PyTorch.

A batch of texts (right-padded bytes) goes through the encoder; then the decoder
prefills ``prefill`` frames of seeded random codes and takes ``steps`` more one
frame at a time through both caches. Compared with transformers'
``DiaForConditionalGeneration`` on the same inputs: the encoder's
``last_hidden_state`` (real positions), every step's ``logits`` and the last
self-attention cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class DiaParity:
    """The max abs difference of each compared output."""

    diffs: dict[str, float] = field(default_factory=dict)


def compare_dia(
    torch_model, encoder, decoder, ids: np.ndarray, mask: np.ndarray, prefill: int = 4,
    steps: int = 4, seed: int = 0,
) -> DiaParity:  # fmt: skip
    """Run ONNX Runtime ``encoder`` / ``decoder`` sessions and ``torch_model`` on the same batch."""
    import torch
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    from mobius_audio.dia_generate import carry_cache, first_decoder_feeds, run_named

    outputs = run_named(encoder, {"input_ids": ids, "attention_mask": mask})
    with torch.no_grad():
        states = torch_model.model.encoder(torch.tensor(ids), attention_mask=torch.tensor(mask))[0]
    real = mask.astype(bool)  # padded positions are never read (masked as keys)
    parity = DiaParity()
    parity.diffs["last_hidden_state"] = _diff(outputs["last_hidden_state"][real], states[real])

    decoder_config = torch_model.config.decoder_config
    feeds = first_decoder_feeds(decoder, outputs, mask)
    shape = (ids.shape[0], prefill + steps, decoder_config.num_channels)
    codes = np.random.default_rng(seed).integers(0, decoder_config.eos_token_id, shape)
    chunks = [codes[:, :prefill]] + [codes[:, t : t + 1] for t in range(prefill, shape[1])]
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    logits = 0.0
    for chunk in chunks:
        result = run_named(decoder, {**feeds, "input_ids": chunk})
        with torch.no_grad():
            out = torch_model(
                encoder_outputs=(states,), attention_mask=torch.tensor(mask),
                decoder_input_ids=torch.tensor(chunk), cache=cache, use_cache=True,
            )  # fmt: skip
        cache = out.cache
        channels, vocab = result["logits"].shape[2:]
        # transformers lays logits out [batch * channels, frames, vocab].
        expected = out.logits.reshape(len(ids), channels, -1, vocab).transpose(1, 2)
        logits = max(logits, _diff(result["logits"], expected))
        carry_cache(feeds, result)
    parity.diffs["logits"] = logits
    layer = cache.self_attention_cache.layers[0]
    present = feeds["past_key_values.0.decoder.key"]
    same_shape = present.shape == tuple(layer.keys.shape)
    parity.diffs["present.0.decoder.key"] = _diff(present, layer.keys) if same_shape else np.inf
    return parity


def _diff(ours: np.ndarray, theirs) -> float:
    return float(np.abs(ours - theirs.numpy()).max())
