"""Kosmos-2's inputs: one image in front of the prompt, placed by ``image_embeds_position_mask``.

The image goes through CLIP's pipeline (224 x 224 in the hub's checkpoint). The prompt
(stripped) becomes ``<image>`` + ``latent_query_num`` x ``<image>`` + ``</image>`` then
the text, after the BOS; tokenized, the inner placeholders take the ids
``<unk> + 1`` onwards (ordinary vocabulary ids: it is the mask, 1 at those positions,
that tells the model where the image's features go). The processor puts the image
there itself, so a prompt holds no placeholder. ``<grounding>``, ``<phrase>``...
and the ``<patch_index_NNNN>`` tokens are tokens of the prompt and of the output, as
transformers' processor adds them to the tokenizer.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._image import integer
from mobius_vision.processing.llava import CLIP_DEFAULTS

#: The tag tokens transformers' Kosmos2Processor adds to the tokenizer, in its order.
TAG_TOKENS = (
    "</doc>",
    "<image>",
    "</image>",
    "</chunk>",
    "</line>",
    "<phrase>",
    "</phrase>",
    "<object>",
    "</object>",
    "</delimiter_of_multi_objects/>",
    "<grounding>",
)


class Kosmos2Processor(ImageTextProcessor):
    """Kosmos2Processor: the image tokens before the prompt, and where they are."""

    image_defaults = CLIP_DEFAULTS
    image_token = "<image>"
    end_image_token = "</image>"

    def __init__(self, tokenizer, image, settings) -> None:
        super().__init__(tokenizer, image, settings)
        self._add_tag_tokens()

    def _add_tag_tokens(self) -> None:
        """The tags and patch-index tokens, where the package's tokenizer lacks them."""
        from tokenizers import AddedToken

        count = integer(self.settings.processor, "num_patch_index_tokens", 1024, 0, 1 << 16)
        tokens = [*TAG_TOKENS, *(f"<patch_index_{i:04d}>" for i in range(count))]
        vocab = self.tokenizer.get_vocab()
        missing = [t for t in tokens if t not in vocab]
        if missing:
            added = [AddedToken(t, lstrip=True, rstrip=False, normalized=False) for t in missing]
            self.tokenizer.add_tokens(added)

    @property
    def first_position(self) -> int:
        """The table row of the first token: after the padding row (``pad_token_id``)."""
        pad = self.config_value("pad_token_id", 1, section="text_config")
        if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
            raise MobiusError(f"text_config.pad_token_id must be an int >= 0, got {pad!r}")
        return pad + 1

    @property
    def num_image_tokens(self) -> int:
        return integer(self.settings.config, "latent_query_num", 64, 1, 1 << 12)

    def with_placeholders(self, prompt: str, count: int) -> str:
        return prompt  # the processor puts the image in front itself

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        if len(images) > 1:
            raise MobiusError(f"{self.settings.model_type} takes one image per prompt")
        if images and self.image_token in text:
            raise MobiusError(
                f"{self.settings.model_type} puts the image before the prompt itself: "
                f"leave {self.image_token} out of it"
            )
        text = text.strip()
        count = self.num_image_tokens
        if images:
            span = " ".join([self.image_token] * (count + 1) + [self.end_image_token])
            text = f"{span} {text}"
        with_bos = self.add_special_tokens
        if with_bos:
            text = f"{self.tokenizer.bos_token}{text}"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if not images:
            ids = np.asarray([ids], np.int64)
            return {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        start = int(with_bos) + 1  # after the BOS and the opening <image>
        unk = self.tokenizer.unk_token_id
        if unk is None:
            raise MobiusError("the tokenizer has no <unk> token: Kosmos-2's image ids follow it")
        first = unk + 1
        ids[start : start + count] = range(first, first + count)
        mask = np.zeros((1, len(ids)), np.int64)
        mask[0, start : start + count] = 1
        ids = np.asarray([ids], np.int64)
        return {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "image_embeds_position_mask": mask,
            "pixel_values": np.stack([self.image.standard(i) for i in self.arrays(images)]),
        }
