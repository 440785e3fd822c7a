"""The tiny Phi-4-multimodal case the parity and generate tests share.

transformers' ``Phi4MultimodalImageProcessor`` exists only on the torchvision backend,
which is not installed: :class:`NumpyPhi4ImageProcessor` puts mobius' torch-free one
(:mod:`mobius_vision.processing.phi4_multimodal`) in its place inside the real
``Phi4MultimodalProcessor``, which still expands the placeholders and tokenizes and
computes the audio features with transformers' own ``Phi4MultimodalFeatureExtractor``
(16 mel bins here). The resizes it does are checked against PyTorch's in
``test_phi4mm_generate.py``.

The tower's crops are 64 pixels in patches of 2 (32 a side, 16 after pooling): the
processor's token count assumes the real model's 16x16 pooled grid. The audio encoder
is two conformer blocks 16 wide; a 1 s clip makes 98 frames, 13 audio tokens.

transformers names the audio inputs ``audio_input_features``, ``audio_attention_mask``
(given for two clips or more) and ``audio_embed_sizes``, and picks the projection by
the presence of images; the graphs take them as ``input_features``,
``feature_attention_mask``, ``audio_sizes`` and ``audio_projection_mode``.
:func:`graph_inputs` renames a processor's outputs so, and :func:`reference_prefill`
gives the PyTorch model its own names back.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from transformers import (
    BatchFeature,
    Phi4MultimodalConfig,
    Phi4MultimodalFeatureExtractor,
    Phi4MultimodalProcessor,
)
from transformers.image_processing_utils import BaseImageProcessor

from mobius.testing import tiny_tokenizer
from mobius_vision.processing._image import ImageSettings
from mobius_vision.processing.phi4_multimodal import Phi4MultimodalProcessor as Mine

IMAGE_TOKEN_ID, AUDIO_TOKEN_ID = 3, 4
TOKENS = {
    "image_token": ("<|image|>", IMAGE_TOKEN_ID),
    "audio_token": ("<|audio|>", AUDIO_TOKEN_ID),
}
IMG, AUD = TOKENS["image_token"][0], TOKENS["audio_token"][0]
CROP, PATCH, MAX_CROPS, MEL_BINS = 64, 2, 4, 16
PROMPTS = (
    f"<|user|>{IMG} w5 w7 w9<|end|><|assistant|>",
    f"<|user|>w3 {IMG} w2<|end|><|assistant|>w4",
)
#: a 2x1 grid with its bottom rows padded, a 1x2 one with its right columns padded
IMAGE_SIZES = ((40, 100), (100, 45))
#: images and audio: the vision-speech projections
SEEING_PROMPTS = (
    f"<|user|>{IMG} w5 {AUD} w7 w9<|end|><|assistant|>",
    f"<|user|>w3 {AUD} w2 {IMG}<|end|><|assistant|>w4",
)
#: audio alone: the speech projections
HEARING_PROMPTS = (
    f"<|user|>{AUD} w5 w7 w9<|end|><|assistant|>",
    f"<|user|>w3 {AUD} w2<|end|><|assistant|>w4",
)
#: 1 s and 0.44 s (the shorter padded, its tail frames zeroed by the extractor)
CLIP_LENGTHS = (16000, 7000)


def phi4mm_config() -> Phi4MultimodalConfig:
    return Phi4MultimodalConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        original_max_position_embeddings=4096,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
        },
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        vision_config=dict(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,  # feature_layer -2 reads the first
            num_attention_heads=2,
            image_size=CROP,
            crop_size=CROP,
            patch_size=PATCH,
            image_token_id=IMAGE_TOKEN_ID,
        ),
        audio_config=dict(
            hidden_size=16,
            intermediate_size=24,
            num_blocks=2,
            num_attention_heads=2,
            ext_pw_out_channel=16,
            depthwise_separable_out_channel=16,
            nemo_conv_channels=8,
            input_size=MEL_BINS,
            bias_max_distance=20,
            audio_token_id=AUDIO_TOKEN_ID,
        ),
    )


class NumpyPhi4ImageProcessor(BaseImageProcessor):
    """``Phi4MultimodalImageProcessor``'s outputs from mobius' numpy processor (module docstring)."""

    model_input_names = ["image_pixel_values", "image_sizes", "image_attention_mask"]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.size = {"height": CROP, "width": CROP}
        self.patch_size, self.dynamic_hd = PATCH, MAX_CROPS
        self.image_mean = self.image_std = [0.5, 0.5, 0.5]
        self.rescale_factor = 1 / 255

    def numpy_processor(self) -> Mine:
        settings = ImageSettings.from_dict(self.to_dict())
        return Mine(SimpleNamespace(image_token=IMG), settings, None)

    def __call__(self, images, **kwargs) -> BatchFeature:
        mine = self.numpy_processor()
        flat = [i for group in images for i in group] if isinstance(images[0], list) else images
        done = [mine.preprocess(image) for image in mine.arrays(flat)]
        inputs = mine.stack(done)
        return BatchFeature(
            data=dict(inputs, num_img_tokens=[d[3] for d in done]),
            tensor_type=kwargs.get("return_tensors"),
        )


def phi4mm_processor(config) -> Phi4MultimodalProcessor:
    tokenizer = tiny_tokenizer(config.vocab_size, dict(TOKENS.values()))
    tokenizer._set_model_specific_special_tokens({k: t for k, (t, _) in TOKENS.items()})
    return Phi4MultimodalProcessor(
        image_processor=NumpyPhi4ImageProcessor(),
        audio_processor=Phi4MultimodalFeatureExtractor(feature_size=MEL_BINS),
        tokenizer=tokenizer,
    )


#: transformers' names of the audio inputs -> the graphs' names
GRAPH_NAMES = {
    "audio_input_features": "input_features",
    "audio_attention_mask": "feature_attention_mask",
    "audio_embed_sizes": "audio_sizes",
}


def graph_inputs(batch) -> dict:
    """A ``Phi4MultimodalProcessor`` output under the graphs' names (module docstring)."""
    inputs = {GRAPH_NAMES.get(name, name): value for name, value in dict(batch).items()}
    if "input_features" in inputs:
        features = inputs["input_features"]
        if "feature_attention_mask" not in inputs:  # one clip: all its frames are real
            inputs["feature_attention_mask"] = np.ones(features.shape[:2], bool)
        seeing = "image_pixel_values" in inputs
        inputs["audio_projection_mode"] = np.asarray([1 if seeing else 0], np.int64)
    return inputs


def with_graph_names(processor):
    """``processor`` called as the shared kit calls it, its outputs under the graphs' names
    (no images, or no audio, passed as none)."""

    def call(*, images=None, audio=None, **kwargs):
        return graph_inputs(processor(images=images or None, audio=audio or None, **kwargs))

    return call


def reference_prefill(model):
    """``model``'s prefill fed the graphs' audio inputs under transformers' names; the
    projection mode is checked against the images, from which transformers picks it."""
    import torch

    transformers_names = {graph: hf for hf, graph in GRAPH_NAMES.items()}

    def forward(**feeds):
        mode = feeds.pop("audio_projection_mode", None)
        if mode is not None:
            assert bool(mode.item() % 2) == ("image_pixel_values" in feeds), mode
        feeds = {transformers_names.get(name, name): value for name, value in feeds.items()}
        with torch.no_grad():
            return model(**feeds)

    return forward
