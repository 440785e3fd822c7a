"""InstructBLIP-Video over OPT: InstructBLIP's layout over four frames per video, each frame
read by the Q-Former with its video's instruction (padded: the prompts differ in length)."""

import numpy as np
from transformers import BatchFeature, InstructBlipVideoProcessor
from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import vl_config
from .blip_2 import NUM_QUERY_TOKENS, OPT, OPTIONS, QFORMER, VISION

VIDEO_TOKEN_ID = 3
#: transformers' processor puts 4 * num_query_tokens placeholders: it takes four frames.
FRAMES = 4


class FramesProcessor(BlipImageProcessorPil):
    """A video as its frames through BLIP's PIL image processor: what transformers' video
    processor computes up to its torch resize (it needs torchvision, not installed)."""

    def __call__(self, videos, return_tensors=None, **kwargs):
        base = super().__call__
        pixels = [base(frames, return_tensors="np")["pixel_values"] for frames in videos]
        return BatchFeature({"pixel_values": np.stack(pixels)}, tensor_type=return_tensors)


class FramesVideoProcessor(InstructBlipVideoProcessor):
    """InstructBlipVideoProcessor over :class:`FramesProcessor`."""

    @property
    def image_processor(self):
        """The frames' processor, where the generate tests' saver looks for it."""
        return self.video_processor

    def check_argument_for_proper_class(self, argument_name, argument):
        if argument_name == "video_processor" and isinstance(argument, FramesProcessor):
            return None
        return super().check_argument_for_proper_class(argument_name, argument)


def without_positions(model):
    """The prefill without ``position_ids``: transformers' forward would hand them to the
    Q-Former's embeddings too (as its ``generate`` does not); OPT counts the same positions
    from the attention mask."""
    return lambda position_ids, **feeds: model(**feeds)


def instructblipvideo_config():
    return vl_config(
        "instructblipvideo",
        dict(VISION, model_type="instructblipvideo_vision_model"),
        OPT,
        qformer_config=dict(QFORMER),
        num_query_tokens=NUM_QUERY_TOKENS,
        video_token_index=VIDEO_TOKEN_ID,
    )


def instructblipvideo_processor(config):
    size = config.vision_config.image_size
    return FramesVideoProcessor(
        video_processor=FramesProcessor(size={"height": size, "width": size}),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, {"<video>": VIDEO_TOKEN_ID}),
        qformer_tokenizer=tiny_tokenizer(config.qformer_config.vocab_size, {}),
        num_query_tokens=config.num_query_tokens,
    )


CASES = {
    "instructblipvideo-opt": (
        "instructblipvideo",
        instructblipvideo_config(),
        instructblipvideo_processor,
        # one video of four frames per prompt
        dict(OPTIONS, image_counts=(FRAMES, FRAMES), prefill_model=without_positions),
    ),
}
