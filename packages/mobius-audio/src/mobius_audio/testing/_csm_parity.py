"""CSM parity: the conversational-speech graphs (:mod:`mobius_audio.tasks_csm`) against PyTorch.

On the same inputs as transformers' ``CsmForConditionalGeneration``: the backbone
prefills a left-padded batch of text prompts, then takes ``steps`` frames of seeded
random codes one at a time through its cache (``logits`` and ``last_hidden_state`` at
real positions); the depth decoder runs one frame, ``[0, code0]`` with a seeded
backbone state, then each code through its cache (``depth_logits``); Mimi encodes a
seeded clip (``audio_codes``: 0 when equal, inf otherwise) and decodes a batch of
seeded codes (``audio_values``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CLIP_SAMPLES = 170


@dataclass
class CsmParity:
    """The max abs difference of each compared output."""

    diffs: dict[str, float] = field(default_factory=dict)


def _diff(ours: np.ndarray, theirs) -> float:
    return float(np.abs(ours - theirs.numpy()).max())


def left_padded(prompts: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Left-padded ids, their mask and transformers' position ids (padding at 1)."""
    longest = max(map(len, prompts))
    ids = np.zeros((len(prompts), longest), np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(prompts):
        ids[i, longest - len(row) :], mask[i, longest - len(row) :] = row, 1
    return ids, mask, np.where(mask == 1, mask.cumsum(-1) - 1, 1)


def compare_backbone(torch_model, csm, prompts: list[list[int]], steps: int, rng) -> dict:
    """``logits`` and ``last_hidden_state`` over the prefill and ``steps`` cached frames."""
    import torch

    from mobius_audio.csm_generate import carry_cache, run_named

    ids, mask, positions = left_padded(prompts)
    batch, books = len(ids), csm.num_codebooks
    frames = np.stack([csm.text_rows(row) for row in ids])
    feeds = csm.empty_cache(csm.backbone, batch)
    torch_inputs, cache = dict(input_ids=torch.tensor(ids)), None
    worst = {"logits": 0.0, "last_hidden_state": 0.0}
    for _ in range(steps + 1):
        feeds.update(input_ids=frames, attention_mask=mask, position_ids=positions)
        ours = run_named(csm.backbone, feeds)
        carry_cache(feeds, ours)
        with torch.no_grad():
            out = torch_model(
                **torch_inputs, attention_mask=torch.tensor(mask), cache=cache, use_cache=True,
                position_ids=torch.tensor(positions), output_hidden_states=True,
            )  # fmt: skip
        cache = out.cache
        real = mask[:, -ours["logits"].shape[1] :].astype(bool)  # padded queries are never read
        theirs = {"logits": out.logits, "last_hidden_state": out.hidden_states[-1]}
        for name, value in theirs.items():
            worst[name] = max(worst[name], _diff(ours[name][real], value[real]))
        codes = rng.integers(0, csm.codebook_size, (batch, 1, books))
        torch_inputs = dict(input_ids=torch.tensor(codes))
        frames = np.concatenate([codes, np.full((batch, 1, 1), -1)], axis=2)
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
        positions = positions[:, -1:] + 1
    if feeds["past_key_values.0.key"].shape != tuple(cache.layers[0].keys.shape):
        worst["present.0.key"] = np.inf
    return worst


def compare_depth_decoder(torch_model, csm, batch: int, rng) -> dict:
    """``depth_logits`` of one frame: ``[0, code0]`` with a backbone state, then each code."""
    import torch

    from mobius_audio.csm_generate import carry_cache, run_named

    hidden = csm.backbone.get_outputs()[1].shape[-1]  # last_hidden_state [.., hidden]
    state = rng.standard_normal((batch, hidden)).astype(np.float32)
    codes = rng.integers(0, csm.codebook_size, (batch, csm.num_codebooks))
    feeds = {**csm.empty_cache(csm.depth, batch), "backbone_last_hidden_state": state}
    first = np.stack([np.zeros(batch, np.int64), codes[:, 0]], 1)
    steps = [first] + [codes[:, i : i + 1] for i in range(1, csm.num_codebooks - 1)]
    cache, worst = None, 0.0
    for step in steps:
        ours = run_named(csm.depth, {**feeds, "input_ids": step})
        carry_cache(feeds, ours)
        with torch.no_grad():
            out = torch_model.depth_decoder(
                input_ids=torch.tensor(step), cache=cache, use_cache=True, logits_to_keep=1,
                backbone_last_hidden_state=torch.tensor(state) if cache is None else None,
            )  # fmt: skip
        cache = out.cache
        worst = max(worst, _diff(ours["logits"][:, -1], out.logits[:, -1]))
    return {"depth_logits": worst}


def compare_codec(torch_model, csm, rng) -> dict:
    """Mimi's ``audio_codes`` of a clip (0 when equal) and ``audio_values`` of a batch of codes."""
    import torch

    clip = (rng.standard_normal(CLIP_SAMPLES) * 0.3).astype(np.float32)[None, None]
    (codes,) = csm.encoder.run(["audio_codes"], {"input_values": clip})
    codes_diff = np.inf
    with torch.no_grad():
        expected = torch_model.codec_model.encode(torch.tensor(clip)).audio_codes.numpy()
    if codes.shape == expected.shape:
        codes_diff = float(np.abs(codes - expected).max())
    codes = rng.integers(0, csm.codebook_size, (2, csm.num_codebooks, 7))
    (ours,) = csm.codec.run(["audio_values"], {"audio_codes": codes})
    with torch.no_grad():
        theirs = torch_model.codec_model.decode(torch.tensor(codes)).audio_values
    values = _diff(ours, theirs) if ours.shape == tuple(theirs.shape) else np.inf
    return {"audio_codes": codes_diff, "audio_values": values}


def compare_csm(torch_model, csm, prompts: list[list[int]], steps: int = 3, seed: int = 0):
    """Every comparison above, on a :class:`~mobius_audio.csm_generate.CsmGenerator`'s sessions."""
    rng = np.random.default_rng(seed)
    parity = CsmParity()
    parity.diffs.update(compare_backbone(torch_model, csm, prompts, steps, rng))
    parity.diffs.update(compare_depth_decoder(torch_model, csm, len(prompts), rng))
    parity.diffs.update(compare_codec(torch_model, csm, rng))
    return parity
