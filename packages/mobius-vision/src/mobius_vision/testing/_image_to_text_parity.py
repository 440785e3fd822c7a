"""Image-to-text parity: encoder states, decoder prefill and cached decode steps, against PyTorch.

Core's seq2seq kit (:mod:`mobius.testing._seq2seq_parity`) with pixels for a
source: the same random model, result and cache handling, the encoder fed
``pixel_values`` and the decoder no source mask (:mod:`mobius_vision.tasks.image_to_text`).
"""

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


def as_past(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The ``present.*`` outputs renamed to the ``past_key_values.*`` inputs they feed."""
    return {
        n.replace("present.", "past_key_values.", 1): v
        for n, v in outputs.items()
        if n.startswith("present.")
    }


class OnnxImageToText(OnnxSeq2Seq):
    """The two graphs of an image-to-text package in ONNX Runtime."""

    @staticmethod
    def _run(session, feeds) -> dict[str, np.ndarray]:
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(None, feeds), strict=True))

    def encode(self, source: dict[str, np.ndarray]):
        """``(last_hidden_state, {past name: cross cache})`` of the encoder's ``source`` feeds."""
        out = self._run(self.encoder, source)
        return out["last_hidden_state"], as_past(out)

    def decode(self, input_ids, source: dict[str, np.ndarray], cross, cache):
        """``(logits, next cache)``; a decoder that masks the source gets ``attention_mask``."""
        feeds = {"input_ids": input_ids, **cross, **cache}
        if "attention_mask" in source:
            feeds["encoder_attention_mask"] = source["attention_mask"]
        out = self._run(self.decoder, feeds)
        return out["logits"], as_past(out)


def random_pixel_source(config, batch: int, seed: int) -> dict[str, np.ndarray]:
    """``pixel_values`` [batch, channels, height, width]: float32 noise of the encoder's size."""
    encoder = config.encoder
    size = encoder.image_size
    height, width = (size, size) if isinstance(size, int) else size
    rng = np.random.default_rng(seed)
    shape = (batch, encoder.num_channels, height, width)
    return {"pixel_values": rng.standard_normal(shape).astype(np.float32)}


def random_patch_source(config, batch: int, seed: int) -> dict[str, np.ndarray]:
    """Pix2Struct's ``flattened_patches`` and ``attention_mask``: a 3x4 grid of patches
    (row and column ids from 1, as the processor numbers them), the rows after the first
    with one row of patches fewer and zero padding after it."""
    vision = config.vision_config
    rows, columns, width = 3, 4, vision.patch_embed_hidden_size
    rng = np.random.default_rng(seed)
    patches = np.zeros((batch, rows * columns, 2 + width), np.float32)
    mask = np.zeros((batch, rows * columns), np.int64)
    for b in range(batch):
        kept = rows if b == 0 else rows - 1
        grid = np.array([(r + 1, c + 1) for r in range(kept) for c in range(columns)])
        patches[b, : len(grid), :2] = grid
        patches[b, : len(grid), 2:] = rng.standard_normal((len(grid), width))
        mask[b, : len(grid)] = 1
    return {"flattened_patches": patches, "attention_mask": mask}


#: The encoder feeds of a random source, by the transformers config's model_type.
RANDOM_SOURCES = {
    "vision-encoder-decoder": random_pixel_source,
    "pix2struct": random_patch_source,
}


def compare_image_to_text(
    torch_model, onnx_model: OnnxImageToText, batch: int, decode_steps: int, seed: int
) -> Seq2SeqParity:
    """Encode a batch of random sources (:data:`RANDOM_SOURCES`), prefill two decoder tokens,
    then greedy steps through both caches."""
    import torch

    config = torch_model.config
    source = RANDOM_SOURCES[config.model_type](config, batch, seed)
    torch_source = {name: torch.from_numpy(value) for name, value in source.items()}
    hidden, cross = onnx_model.encode(source)
    with torch.no_grad():
        reference = torch_model.encoder(**torch_source)
    real = source.get("attention_mask", np.ones(hidden.shape[:2])).astype(bool)
    diff = np.abs(hidden - reference.last_hidden_state.numpy())[real]
    encoder_diff = float(diff.max())
    mask = {k: v for k, v in torch_source.items() if k == "attention_mask"}

    decoder_ids = np.full((batch, 2), config.decoder_start_token_id, np.int64)
    decoder_ids[:, 1] = np.arange(batch) + 5  # a second prefill token, different per row
    result = decode_greedy_through_both(
        torch_decoder_step(torch_model, reference, **mask),
        onnx_model.decoder_step(source, cross, batch),
        decoder_ids,
        decode_steps,
    )
    result.encoder_diff = encoder_diff

    # The loop's greedy continuation equals transformers' generate from the same two tokens,
    # up to each row's end of sequence (where generate stops the row: no min_new_tokens,
    # which would suppress the end token and so change the stream).
    with torch.no_grad():
        generated = torch_model.generate(
            **torch_source, decoder_input_ids=torch.from_numpy(decoder_ids),
            do_sample=False, max_new_tokens=decode_steps + 1,
        )  # fmt: skip
    ends = torch_model.generation_config.eos_token_id
    ends = set(ends if isinstance(ends, list) else [] if ends is None else [ends])
    ours = [until_end(row, ends) for row in result.greedy_rows().tolist()]
    theirs = generated[:, 2:].tolist()
    result.generate_match = all(
        row[: len(mine)] == mine for row, mine in zip(theirs, ours, strict=True)
    )
    return result


def until_end(tokens: list[int], ends: set[int]) -> list[int]:
    """``tokens`` up to and including the first end-of-sequence token."""
    for i, token in enumerate(tokens):
        if token in ends:
            return tokens[: i + 1]
    return tokens


def make_random_image_to_text(hf_config, seed: int = 0):
    """A float32 image-to-text model (``VisionEncoderDecoderModel``, Pix2Struct) from
    ``hf_config``, every parameter perturbed."""
    return make_random_seq2seq(hf_config, seed, auto_class="AutoModelForImageTextToText")


def check_image_to_text_parity(
    hf_config,
    workdir: Path,
    *,
    batch: int = 2,
    decode_steps: int = 8,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
) -> list[Seq2SeqParity]:
    """Build a perturbed tiny image-to-text model with the CLI; check both graphs against PyTorch.

    A batch of random images is encoded; the decoder prefills two tokens, then takes
    ``decode_steps`` greedy steps through its cache; the streams must equal
    transformers' ``generate``.
    """
    workdir = Path(workdir)
    torch_model = make_random_image_to_text(hf_config, seed)
    torch_model.save_pretrained(workdir / "hf")
    results = []
    for ep in eps:
        out = build_with_cli(workdir / "hf", workdir / f"onnx-{ep}", "--ep", ep)
        result = compare_image_to_text(torch_model, OnnxImageToText(out), batch, decode_steps, seed)
        result.ep = ep
        result.assert_close(atol)
        results.append(result)
    return results
