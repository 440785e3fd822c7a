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
    """``pixel_values`` [batch, channels, height, width]: float32 noise of the encoder's size
    (``config.encoder``, or BLIP's ``config.vision_config``)."""
    encoder = getattr(config, "encoder", None) or config.vision_config
    size = encoder.image_size
    height, width = (size, size) if isinstance(size, int) else size
    rng = np.random.default_rng(seed)
    shape = (batch, getattr(encoder, "num_channels", 3), height, width)  # BLIP's has none
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
    "blip": random_pixel_source,
}


def _end_ids(value) -> set[int]:
    return set(value if isinstance(value, list) else [] if value is None else [value])


class TorchImageToText:
    """transformers' side of the comparison, for a model with the seq2seq API
    (``VisionEncoderDecoderModel``, Pix2Struct): its encoder, its decoder through a cache, its
    ``generate``. A family with its own API subclasses it (:data:`TORCH_SIDES`)."""

    def __init__(self, model, source: dict) -> None:
        import torch

        self.model = model
        self.source = {name: torch.from_numpy(value) for name, value in source.items()}

    @property
    def start_token_id(self) -> int:
        return self.model.config.decoder_start_token_id

    @property
    def end_token_ids(self) -> set[int]:
        return _end_ids(self.model.generation_config.eos_token_id)

    def encode(self) -> np.ndarray:
        """The encoder's ``last_hidden_state``."""
        import torch

        with torch.no_grad():
            self.encoded = self.model.encoder(**self.source)
        return self.encoded.last_hidden_state.numpy()

    def decoder_step(self):
        """``step(input_ids) -> logits`` through the decoder's own cache (after :meth:`encode`)."""
        mask = {k: v for k, v in self.source.items() if k == "attention_mask"}
        return torch_decoder_step(self.model, self.encoded, **mask)

    def generate(self, decoder_ids: np.ndarray, new_tokens: int) -> list[list[int]]:
        """The greedy tokens ``generate`` adds after ``decoder_ids`` [batch, n], row by row."""
        import torch

        with torch.no_grad():
            generated = self.model.generate(
                **self.source, decoder_input_ids=torch.from_numpy(decoder_ids),
                do_sample=False, max_new_tokens=new_tokens,
            )  # fmt: skip
        return generated[:, decoder_ids.shape[1] :].tolist()


class TorchBlip(TorchImageToText):
    """BLIP captioning: its ``vision_model`` encodes; its ``text_decoder`` (a causal LM over the
    image's states) decodes from the text config's ``bos_token_id`` and stops at its
    ``sep_token_id``; its ``generate`` takes the prompt as the processor gives it, ``[CLS]
    words [SEP]``, and decodes from ``[DEC] words``."""

    @property
    def start_token_id(self) -> int:
        return self.model.config.text_config.bos_token_id

    @property
    def end_token_ids(self) -> set[int]:
        return {self.model.config.text_config.sep_token_id}

    def encode(self) -> np.ndarray:
        import torch

        with torch.no_grad():
            self.states = self.model.vision_model(**self.source).last_hidden_state
        return self.states.numpy()

    def decoder_step(self):
        import torch
        from transformers import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())

        def step(input_ids):
            with torch.no_grad():
                out = self.model.text_decoder(
                    input_ids=torch.from_numpy(input_ids), encoder_hidden_states=self.states,
                    cache=cache, use_cache=True,
                )  # fmt: skip
            return out.logits.numpy()

        return step

    def generate(self, decoder_ids: np.ndarray, new_tokens: int) -> list[list[int]]:
        import torch

        # [CLS] words [SEP]: generate swaps the first for [DEC] and drops the last
        ends = np.zeros((len(decoder_ids), 1), np.int64)
        prompt = np.concatenate([decoder_ids, ends], axis=1)
        with torch.no_grad():
            generated = self.model.generate(
                **self.source, input_ids=torch.from_numpy(prompt), do_sample=False,
                max_new_tokens=new_tokens,
            )  # fmt: skip
        return generated[:, decoder_ids.shape[1] :].tolist()


#: transformers' side by the config's model_type, where it is not :class:`TorchImageToText`.
TORCH_SIDES = {"blip": TorchBlip}


def compare_image_to_text(
    torch_model, onnx_model: OnnxImageToText, batch: int, decode_steps: int, seed: int
) -> Seq2SeqParity:
    """Encode a batch of random sources (:data:`RANDOM_SOURCES`), prefill two decoder tokens,
    then greedy steps through both caches."""
    config = torch_model.config
    source = RANDOM_SOURCES[config.model_type](config, batch, seed)
    reference = TORCH_SIDES.get(config.model_type, TorchImageToText)(torch_model, source)
    hidden, cross = onnx_model.encode(source)
    real = source.get("attention_mask", np.ones(hidden.shape[:2])).astype(bool)
    encoder_diff = float(np.abs(hidden - reference.encode())[real].max())

    decoder_ids = np.full((batch, 2), reference.start_token_id, np.int64)
    decoder_ids[:, 1] = np.arange(batch) + 5  # a second prefill token, different per row
    result = decode_greedy_through_both(
        reference.decoder_step(),
        onnx_model.decoder_step(source, cross, batch),
        decoder_ids,
        decode_steps,
    )
    result.encoder_diff = encoder_diff

    # The loop's greedy continuation equals transformers' generate from the same two tokens,
    # up to each row's end of sequence (where generate stops the row: no min_new_tokens,
    # which would suppress the end token and so change the stream).
    ours = [until_end(row, reference.end_token_ids) for row in result.greedy_rows().tolist()]
    theirs = reference.generate(decoder_ids, decode_steps + 1)
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
    """A float32 image-to-text model (``VisionEncoderDecoderModel``, Pix2Struct, BLIP) from
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
