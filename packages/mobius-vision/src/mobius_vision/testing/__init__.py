"""mobius-vision's parity kits (need torch and transformers: test-only).

Built on core's kit (:mod:`mobius.testing`): a tiny HF model is made from a
config, every parameter perturbed with seeded noise, saved with
``save_pretrained``, built through the same path as ``mobius build``, and
compared in ONNX Runtime against PyTorch at fp32.

- vision encoders (``image-classification``): :func:`check_vision_parity`;
- dual encoders (``zero-shot-image-classification``): :func:`check_zero_shot_parity`;
- vision–language models, split and single forms: :func:`check_vision_language_parity`;
- cross-attention vision–language models (Mllama): :func:`check_cross_attention_vl_parity`;
- models that see and hear (``audio-vision-language``, Qwen2.5-Omni):
  :func:`check_audio_vision_language_parity`;
- image-to-text encoder–decoders (TrOCR): :func:`check_image_to_text_parity`;
- promptable mask generation (SAM): :func:`check_mask_generation_parity`;
- depth estimation (Depth Anything, DPT, GLPN): :func:`check_depth_parity`;
- semantic segmentation (SegFormer, UperNet): :func:`check_semantic_segmentation_parity`,
  and the dense backbones under the heads: :func:`check_backbone_parity`;
- universal segmentation (MaskFormer): :func:`check_universal_segmentation_parity`.
"""

from mobius_vision.testing._cross_vl_parity import (
    OnnxCrossAttentionVL,
    check_cross_attention_vl_parity,
)
from mobius_vision.testing._depth_parity import (
    DepthParity,
    check_depth_parity,
    compare_depth,
    make_random_depth_model,
)
from mobius_vision.testing._detection_parity import (
    check_detection_parity,
    compare_detection,
    detection_inputs,
    make_random_detector,
)
from mobius_vision.testing._image_to_text_parity import (
    OnnxImageToText,
    check_image_to_text_parity,
    make_random_image_to_text,
)
from mobius_vision.testing._omni_parity import (
    check_audio_vision_language_parity,
    random_clips,
)
from mobius_vision.testing._sam_parity import (
    MaskGenerationParity,
    check_mask_generation_parity,
    make_random_sam,
)
from mobius_vision.testing._segmentation_parity import (
    BackboneProbe,
    check_backbone_parity,
    check_semantic_segmentation_parity,
    make_random_segmenter,
)
from mobius_vision.testing._universal_segmentation_parity import (
    check_universal_segmentation_parity,
)
from mobius_vision.testing._vision_parity import (
    VisionParity,
    check_vision_parity,
    compare_vision,
    make_random_vision_model,
    random_pixels,
)
from mobius_vision.testing._vl_parity import (
    check_vision_language_parity,
    make_random_vl_model,
    random_images,
)
from mobius_vision.testing._zero_shot_parity import (
    ZeroShotParity,
    check_zero_shot_parity,
    make_random_dual_encoder,
    naflex_inputs,
)
from mobius_vision.vl_model import OnnxVisionLanguage  # the runner's driver, re-exported

__all__ = [
    "DepthParity",
    "OnnxCrossAttentionVL",
    "OnnxImageToText",
    "MaskGenerationParity",
    "OnnxVisionLanguage",
    "VisionParity",
    "ZeroShotParity",
    "BackboneProbe",
    "check_audio_vision_language_parity",
    "check_backbone_parity",
    "check_cross_attention_vl_parity",
    "check_depth_parity",
    "check_detection_parity",
    "check_image_to_text_parity",
    "check_mask_generation_parity",
    "check_semantic_segmentation_parity",
    "check_universal_segmentation_parity",
    "check_vision_language_parity",
    "check_vision_parity",
    "check_zero_shot_parity",
    "compare_depth",
    "compare_detection",
    "compare_vision",
    "detection_inputs",
    "make_random_depth_model",
    "make_random_detector",
    "make_random_dual_encoder",
    "make_random_image_to_text",
    "make_random_sam",
    "make_random_segmenter",
    "make_random_vision_model",
    "make_random_vl_model",
    "naflex_inputs",
    "random_clips",
    "random_images",
    "random_pixels",
]
