"""Transducer parity (Parakeet RNN-T / TDT): the three graphs and greedy tokens against PyTorch.

On a batch of clips padded together by the package's numpy feature extractor:

- encoder: ``encoder_hidden_states`` over each clip's real frames against transformers'
  ``get_audio_features(...).pooler_output``; ``encoder_lengths`` must equal its
  reduced mask's sums (a mismatch is reported as an infinite difference);
- decoder: :data:`DECODER_STEPS` steps of the prediction network from a zero state, the
  state carried on both sides (the decoder start token, then seeded random tokens),
  against ``decoder.embedding`` / ``lstm`` / ``decoder_projector``: output and state;
- joint: every step's decoder output against a different encoder frame per row, against
  ``joint``: token (and TDT duration) logits;
- tokens: each clip alone through transformers' greedy ``generate`` and the runner's
  decoding of the batch (:class:`mobius_audio.transducer.Transducer`): equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

DECODER_STEPS = 4


@dataclass
class TransducerParity:
    diffs: dict[str, float] = field(default_factory=dict)
    tokens: list[list[int]] = field(default_factory=list)  # the runner's, per clip
    expected_tokens: list[list[int]] = field(default_factory=list)  # transformers'


def _max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def reference_tokens(torch_model, transducer, clips) -> list[list[int]]:
    """transformers' greedy ``generate`` on each clip alone, without the start token."""
    import torch

    config, model_config = torch_model.generation_config, torch_model.config
    if config.decoder_start_token_id is None:  # as the runner starts: from the blank
        config.decoder_start_token_id = model_config.blank_token_id
    durations = len(getattr(model_config, "durations", ()))
    if durations and not config.suppress_tokens:
        # TDT: generate picks the next token over the token and duration logits together;
        # the hub's generation configs suppress the duration ids, as here.
        vocab = model_config.vocab_size
        config.suppress_tokens = list(range(vocab, vocab + durations))
    tokens = []
    for clip in clips:
        feeds = transducer.features([clip])
        with torch.no_grad():
            out = torch_model.generate(
                input_features=torch.from_numpy(feeds["input_features"]),
                attention_mask=torch.from_numpy(feeds["attention_mask"]),
                do_sample=False,
            )
        tokens.append(out.sequences[0, 1:].tolist())
    return tokens


def compare_transducer(torch_model, transducer, clips, seed: int = 0) -> TransducerParity:
    """Every graph of ``transducer`` (an open :class:`~mobius_audio.transducer.Transducer`)
    against ``torch_model`` (``ParakeetForRNNT`` / ``ParakeetForTDT``) on ``clips``."""
    import torch

    result = TransducerParity()
    feeds = transducer.features(clips)
    states, lengths = transducer.sessions["encoder"].run(None, feeds)
    with torch.no_grad():
        reference = torch_model.get_audio_features(
            input_features=torch.from_numpy(feeds["input_features"]),
            attention_mask=torch.from_numpy(feeds["attention_mask"]),
            output_attention_mask=True,
        )
    expected_lengths = reference.attention_mask.sum(-1).numpy()
    pooled = reference.pooler_output.numpy()
    result.diffs["encoder_hidden_states"] = max(
        _max_diff(states[row, :n], pooled[row, :n]) for row, n in enumerate(expected_lengths)
    )
    if not np.array_equal(lengths, expected_lengths):
        result.diffs["encoder_lengths"] = np.inf

    settings, batch = transducer.settings, len(clips)
    rng = np.random.default_rng(seed)
    layers = torch_model.config.num_decoder_layers
    hidden = np.zeros((layers, batch, torch_model.config.decoder_hidden_size), np.float32)
    cell, torch_state = hidden.copy(), None
    ids = np.full(batch, settings.start_token_id, np.int64)
    decoder, diffs = torch_model.decoder, {}
    for step in range(DECODER_STEPS):
        output, hidden, cell = transducer.step_decoder(ids, hidden, cell)
        with torch.no_grad():
            embedded = decoder.embedding(torch.from_numpy(ids)[:, None])
            lstm_out, torch_state = decoder.lstm(embedded, torch_state)
            expected = decoder.decoder_projector(lstm_out)[:, 0]
        for name, ours, theirs in (
            ("decoder_hidden_states", output, expected),
            ("present_hidden_state", hidden, torch_state[0]),
            ("present_cell_state", cell, torch_state[1]),
        ):
            diffs[name] = max(diffs.get(name, 0.0), _max_diff(ours, theirs.numpy()))
        frames = np.minimum(step, lengths - 1)
        encoder_frame = states[np.arange(batch), frames]
        logits = transducer.sessions["joint"].run(
            None, {"encoder_hidden_states": encoder_frame, "decoder_hidden_states": output}
        )
        with torch.no_grad():
            joint = torch_model.joint(
                decoder_hidden_states=expected,
                encoder_hidden_states=torch.from_numpy(pooled[np.arange(batch), frames]),
            ).numpy()
        vocab = settings.vocab_size
        diffs["token_logits"] = max(
            diffs.get("token_logits", 0.0), _max_diff(logits[0], joint[:, :vocab])
        )
        if settings.durations:
            diffs["duration_logits"] = max(
                diffs.get("duration_logits", 0.0), _max_diff(logits[1], joint[:, vocab:])
            )
        ids = rng.integers(0, vocab, batch).astype(np.int64)
    result.diffs.update(diffs)

    result.tokens = transducer.transcribe_ids(clips)
    result.expected_tokens = reference_tokens(torch_model, transducer, clips)
    return result
