"""Torch-free processors of the vision–language families: what ``mobius generate --image`` feeds.

Interface (stable; each family module follows it):

- a class per family, subclassing :class:`ImageTextProcessor` (:mod:`._base`):
  ``from_package(package_dir, tokenizer=None) -> processor`` reads the package's
  settings (``config.json``, ``preprocessor_config.json``, the HF processor's settings
  the build kept, :mod:`._settings`) and its tokenizer; ``processor(text, images) ->
  dict[str, np.ndarray]`` returns what the transformers processor returns with
  ``return_tensors="np"`` for one prompt (``input_ids``, ``attention_mask``, float32
  ``pixel_values``, ``image_sizes``, ``token_type_ids``...), ``text`` holding
  ``processor.image_token`` once per image; ``rope_positions(inputs)`` gives
  ``(positions [3, 1, seq], deltas [1, 1])`` for M-RoPE families, None otherwise;
  tokenize with ``processor.tokenize`` (it honours ``add_special_tokens``, which the
  runner clears when a chat template wrote the BOS); ``first_position`` (default 0) is
  where the family's positions start; ``with_placeholders(prompt, n)`` is what the
  runner makes of a prompt without placeholders (default: ``image_token`` per image
  and a newline before it);
- the shared image operations are in :mod:`._image` (``open_image``, ``to_chw``,
  ``resize``, ``center_crop``, ``pad``, ``rescale``, ``normalize``, ``ImageSettings``);
- :data:`PROCESSORS` maps a ``model_type`` to its class as ``"module:Class"`` (modules
  of this package, imported on use); :func:`processor_for` picks one for a package.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from mobius.errors import MobiusError
from mobius_vision.processing._base import ImageTextProcessor
from mobius_vision.processing._settings import HF_PROCESSOR_FILE, keep_processor_config

__all__ = [
    "HF_PROCESSOR_FILE",
    "PROCESSORS",
    "ImageTextProcessor",
    "keep_processor_config",
    "processor_class",
    "processor_for",
]

PROCESSORS: dict[str, str] = {
    "llava": "llava:LlavaProcessor",
    "vipllava": "llava:LlavaProcessor",
    "video_llava": "llava:VideoLlavaProcessor",
    "paligemma": "paligemma:PaliGemmaProcessor",
    "gemma3": "gemma3:Gemma3Processor",
    "gemma4": "gemma4:Gemma4Processor",
    "gemma4_unified": "gemma4_unified:Gemma4UnifiedProcessor",
    "gemma3n": "gemma3n:Gemma3nProcessor",
    "llava_next": "llava_next:LlavaNextProcessor",
    "llava_next_video": "llava_next:LlavaNextProcessor",
    "llava_onevision": "llava_onevision:LlavaOnevisionProcessor",
    "aya_vision": "aya_vision:AyaVisionProcessor",
    "cohere2_vision": "cohere2_vision:Cohere2VisionProcessor",
    "internvl": "internvl:InternVLProcessor",
    "deepseek_vl": "deepseek_vl:DeepseekVLProcessor",
    "janus": "janus:JanusProcessor",
    "deepseek_vl_hybrid": "deepseek_vl_hybrid:DeepseekVLHybridProcessor",
    "deepseek_ocr2": "deepseek_ocr2:DeepseekOcr2Processor",
    "kimi_k25": "kimi_k25:KimiK25Processor",
    "phi4_multimodal": "phi4_multimodal:Phi4MultimodalProcessor",
    # --- part B families (qwen_vl.py, idefics3.py, pixtral.py, fuyu.py, mllama.py): add here ---
    "qwen2_vl": "qwen_vl:QwenVLProcessor",
    "qwen2_5_vl": "qwen_vl:QwenVLProcessor",
    "qwen3_vl": "qwen_vl:QwenVLProcessor",
    "qwen3_vl_moe": "qwen_vl:QwenVLProcessor",
    "qwen3_5": "qwen_vl:QwenVLProcessor",
    "qwen3_5_moe": "qwen_vl:QwenVLProcessor",
    "exaone4_5": "exaone4_5:Exaone4_5Processor",
    "qwen2_5_omni": "qwen2_5_omni:Qwen2_5OmniProcessor",
    "qwen2_5_omni_thinker": "qwen2_5_omni:Qwen2_5OmniProcessor",
    "qwen3_omni_moe": "qwen2_5_omni:Qwen3OmniMoeProcessor",
    "qwen3_omni_moe_thinker": "qwen2_5_omni:Qwen3OmniMoeProcessor",
    "cosmos3_omni": "qwen_vl:QwenVLProcessor",
    "cohere_compass": "cohere_compass:CohereCompassProcessor",
    "cosmos3_edge": "cosmos3_edge:Cosmos3EdgeProcessor",
    "hyperclovax_vision_v2": "hyperclovax_vision_v2:HyperCLOVAXVisionV2Processor",
    "video_llama_3": "video_llama_3:VideoLlama3Processor",
    "paddleocr_vl": "paddleocr_vl:PaddleOCRVLProcessor",
    "glm4v": "glm4v:Glm4vProcessor",
    "glm4v_moe": "glm4v:Glm4vProcessor",
    "glm46v": "glm4v:Glm4vProcessor",
    "glmga": "glmga:GlmgaProcessor",
    "glm_ocr": "glm4v:Glm4vProcessor",
    "got_ocr2": "got_ocr2:GotOcr2Processor",
    "pp_chart2table": "pp_chart2table:PPChart2TableProcessor",
    "idefics2": "idefics2:Idefics2Processor",
    "idefics3": "idefics3:Idefics3Processor",
    "smolvlm": "idefics3:SmolVLMProcessor",
    "mistral3": "pixtral:PixtralProcessor",
    "lighton_ocr": "lighton_ocr:LightOnOcrProcessor",
    "fuyu": "fuyu:FuyuProcessor",
    "mllama": "mllama:MllamaProcessor",
    "llama4": "llama4:Llama4Processor",
    "blip-2": "blip_2:Blip2Processor",
    "instructblip": "blip_2:InstructBlipProcessor",
    "ovis2": "ovis2:Ovis2Processor",
    "minicpmv4_6": "minicpm:MiniCPMProcessor",
    "minicpm_ocr": "minicpm:MiniCPMProcessor",
    "minicpmv4_7": "minicpmv4_7:MiniCPMV4_7Processor",
    "instructblipvideo": "instructblipvideo:InstructBlipVideoProcessor",
    "aria": "aria:AriaProcessor",
    "granite_docling": "granite_docling:GraniteDoclingProcessor",
    "lfm3_vl": "lfm3_vl:Lfm3VlProcessor",
    "granite4_vision": "granite4_vision:Granite4VisionProcessor",
    "kosmos-2": "kosmos2:Kosmos2Processor",
    "hunyuan_vl": "hunyuan_vl:HunYuanVLProcessor",
    "molmo2": "molmo2:Molmo2Processor",
}


def processor_class(model_type: str) -> type[ImageTextProcessor]:
    """The processor class of ``model_type``; a MobiusError naming the family if none yet."""
    target = PROCESSORS.get(model_type)
    if target is None:
        raise MobiusError(
            f"mobius has no image processor for {model_type or 'this'} packages yet: "
            "run them with text prompts only (no --image)"
        )
    module, name = target.split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def processor_for(package_dir: str | Path, model_type: str, tokenizer=None) -> ImageTextProcessor:
    """The processor of the package at ``package_dir``, a ``model_type`` package."""
    return processor_class(model_type).from_package(Path(package_dir), tokenizer)
