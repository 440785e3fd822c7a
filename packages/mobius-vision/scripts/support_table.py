"""Write SUPPORT.md: every vision model_type transformers ships, and its status.

The status comes from the registry (what mobius-vision registers) and from a
fresh run of the parity tests: a type is *verified* only when it is registered
and every parity case of it passes. The verified types also go into
``src/mobius_vision/verified.json``, which the registry reads.

    uv run python packages/mobius-vision/scripts/support_table.py [--no-run RESULTS.xml]
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections import defaultdict
from pathlib import Path

from mobius.testing._support import add_test, parity_results, support_markdown, write_verified

PACKAGE_DIR = Path(__file__).resolve().parents[1]
TESTS = PACKAGE_DIR / "tests"
OUTPUT = PACKAGE_DIR / "SUPPORT.md"
README = PACKAGE_DIR / "README.md"
BEGIN, END = "<!-- verified-models:begin -->", "<!-- verified-models:end -->"
VERIFIED = PACKAGE_DIR / "src" / "mobius_vision" / "verified.json"

OUT_OF_SCOPE = {
    "perceiver": "a multimodal latent model",
    "imagegpt": "a pixel-token causal model",
    "shieldgemma2": "a Gemma 3 vision–language classifier",
    "timm_wrapper": "wraps timm code, not a transformers architecture",
    "evolla": "protein-to-text: a protein sequence encoder, not images",
    "pi0": "a robot action model (a flow-matching action expert), not text generation",
}


#: (task, parity test file, test function, case table, heading, what the parity covers)
KITS = (
    (
        "image-classification",
        "test_vision_parity.py",
        "test_vision_parity",
        "vision_parity_cases:all_cases",
        "Vision encoders and image classifiers",
        "fp32, max abs difference ≤ 1e-4 on last_hidden_state, pooler_output and class logits, "
        "a batch of two random images, --ep default and cpu",
    ),
    (
        "zero-shot-image-classification",
        "test_zero_shot_parity.py",
        "test_zero_shot_parity",
        "test_zero_shot_parity:ZERO_SHOT_CASES",
        "Zero-shot image–text models",
        "fp32, max abs difference ≤ 1e-4 on logits_per_image, logits_per_text, text_embeds and "
        "image_embeds, texts of different lengths and two random images, --ep default and cpu",
    ),
    (
        "vision-language",
        "test_vl_parity.py",
        "test_vision_language_parity",
        "vl_parity_cases:all_cases",
        "Vision–language models",
        "fp32, max abs difference ≤ 1e-4 on the prefill logits of two left-padded prompts with "
        "one random image each through the family's real processor and on 8 greedy decode steps "
        "through the cache, equal greedy tokens, --form split and single, --ep default and cpu",
    ),
    (
        "cross-attention-vision-language",
        "test_mllama_parity.py",
        "test_mllama_parity",
        "test_mllama_parity:CASES",
        "Cross-attention vision–language models",
        "fp32, max abs difference ≤ 1e-4 on the prefill logits of two left-padded prompts with "
        "one random image each through the real processor (tanh gates opened) and on 8 greedy "
        "decode steps through the cache, equal greedy tokens, --ep default and cpu",
    ),
    (
        "image-to-text",
        "test_image_to_text_parity.py",
        "test_image_to_text_parity",
        "test_image_to_text_parity:CASES",
        "Image-to-text encoder–decoders",
        "fp32, max abs difference ≤ 1e-4 on the encoder states, the decoder's first pass and 8 "
        "greedy decode steps through the cache, greedy tokens equal to transformers' generate, "
        "--ep default and cpu",
    ),
)

KITS += (
    (
        "audio-vision-language",
        "test_omni_parity.py",
        "test_audio_vision_language_parity",
        "omni_parity_cases:CASES",
        "Models that see and hear",
        "fp32, max abs difference ≤ 1e-4 on the prefill logits of two left-padded prompts, each "
        "with a random image and a random audio clip, through the family's real processor, and "
        "on 8 greedy decode steps through the cache, equal greedy tokens, --form split and "
        "single, --ep default and cpu; the text output (the Omni models: their thinker)",
    ),
)

KITS += (
    (
        "image-text-encoder",
        "test_qwen2_5_vl_text_encoder_parity.py",
        "test_qwen2_5_vl_image_text_encoder_parity",
        "test_qwen2_5_vl_text_encoder_parity:CASES",
        "Image-text encoders (a diffusion pipeline's text encoder that reads images)",
        "fp32, max abs difference ≤ 1e-4 on last_hidden_state and the selected hidden_states "
        "at the real tokens of two prompts with images of two sizes, padded on the right and "
        "on the left, --ep default and cpu",
    ),
)

#: The dense-prediction contracts (issue 25): each kit's cases name a model_type, and an
#: architecture class as ``model_class`` where mobius registers the head under it (BEiT's
#: segmentation head beside its classifier).
KITS += (
    (
        "object-detection",
        "test_detection_parity.py",
        "test_detection_parity",
        "detection_parity_cases:all_cases",
        "Object detection",
        "fp32, max abs difference ≤ 1e-4 on logits and pred_boxes, a batch of two different "
        "random images (the second padded: pixel_mask compared), --ep default and cpu",
    ),
    (
        "zero-shot-object-detection",
        "test_zero_shot_detection_parity.py",
        "test_zero_shot_detection_parity",
        "zero_shot_detection_parity_cases:all_cases",
        "Zero-shot object detection",
        "fp32, max difference ≤ 1e-4 on text_embeds, logits, pred_boxes, class_embeds and "
        "image_embeds (OWLv2: objectness_logits), relative to the output's scale where it is "
        "above 1 (the logits), three query texts of different lengths and two different random "
        "images, --ep default and cpu",
    ),
    (
        "semantic-segmentation",
        "test_segmentation_parity.py",
        "test_semantic_segmentation_parity",
        "segmentation_parity_cases:all_cases",
        "Semantic segmentation",
        "fp32, max abs difference ≤ 1e-4 on the logits, a batch of two different random "
        "images, --ep default and cpu",
    ),
    (
        "universal-segmentation",
        "test_universal_segmentation_parity.py",
        "test_universal_segmentation_parity",
        "universal_segmentation_parity_cases:CASES",
        "Universal segmentation",
        "fp32, max difference ≤ 1e-4 on class_queries_logits and masks_queries_logits, "
        "relative to the output's scale where it is above 1, a batch of two different random "
        "images, --ep default and cpu",
    ),
    (
        "mask-generation",
        "test_sam_parity.py",
        "test_mask_generation_parity",
        "sam_parity_cases:all_cases",
        "Promptable mask generation (Segment Anything)",
        "fp32, max abs difference ≤ 1e-4 on the image embeddings, pred_masks and iou_scores "
        "(SAM 2: object_score_logits), two different random images with point, point-and-box, "
        "box and point-and-mask prompts, --ep default and cpu; the image predictor only",
    ),
    (
        "depth-estimation",
        "test_depth_parity.py",
        "test_depth_parity",
        "depth_parity_cases:all_cases",
        "Depth estimation",
        "fp32, max abs difference ≤ 1e-4 of the depth's scale on predicted_depth (and Depth "
        "Pro's field_of_view), a batch of two different random images, --ep default and cpu",
    ),
    (
        "text-prompted-segmentation",
        "test_text_prompted_segmentation_parity.py",
        "test_text_prompted_segmentation_parity",
        "text_prompted_segmentation_parity_cases:all_cases",
        "Text-prompted segmentation",
        "fp32, max difference ≤ 1e-4 on conditional_embeddings and logits, relative to the "
        "output's scale where it is above 1, two different random images each against two "
        "prompts, --ep default and cpu",
    ),
)

#: Registered types whose parity test cannot run in this environment, and why: listed as
#: registered but not verified (their tests skip, naming the missing library).
NOT_RUNNABLE_HERE: dict[str, str] = {}

#: Types not built yet, and what building them needs: SUPPORT.md says so beside "not yet".
NOT_YET = {
    # Dense prediction (issue 25).
    "sam2_video": "the video memory path (memory attention and encoder) is not built; "
    "sam2 builds the image predictor",
    "edgetam": "its RepViT encoder and perceiver memory are not written yet",
    "edgetam_video": "the video memory path is not built",
    "detr": "the panoptic head (bounding-box attention, FPN mask head) is not written yet; "
    "DETR's detection is verified",
    # Image classification and zero-shot.
    "dinat": "its neighbourhood attention runs in the natten library, which has no ONNX form",
    "hiera": "its masked-unit hierarchical encoder is not written yet",
    "pp_lcnet": "its PP-LCNet convolution stack is not written yet",
    "segformer": "its Mix Transformer encoder is not written yet (it comes with segmentation)",
    "align": "an EfficientNet image tower beside a BERT text tower: not written yet",
    "altclip": "its XLM-RoBERTa text tower with a projection is not written yet",
    "blip": "BLIP's image–text matching heads are not written yet",
    "chinese_clip": "its BERT-style text tower is not written yet",
    "metaclip_2": "its multilingual text tower is not written yet",
    "tipsv2": "its own image and text towers are not written yet",
    "videoprism": "a video encoder (factorised space–time attention): no video contract yet",
    # Image-text-to-text.
    "apertus1p5": "images and audio enter as discrete tokens from VQ tokenizers: no image-tokenizer "
    "contract yet",
    "chameleon": "images enter as VQ-VAE token ids: no image-tokenizer contract yet",
    "emu3": "images enter as token ids from a 3D-convolution VQ-VAE: no image-tokenizer contract "
    "yet",
    "qianfan_ocr": "its InternVL-style tower (RMSNorm, layer scale) and projector over Qwen3: "
    "not written yet",
    "unlimited_ocr": "its image processor is a torchvision class only (no PIL backend to check "
    "a copy against), and its decoder's sliding window over decoded tokens (prompt always "
    "kept) needs its own cache and mask",
    "diffusion_gemma": "it decodes by block diffusion, not token by token: needs its own "
    "generation contract",
    "dots3_note": "vision and audio encoders into an MoE decoder with a sparse-attention indexer: "
    "not written yet",
    "fast_vlm": "its vision tower is a timm model (FastViTHD): timm is not installed for the "
    "parity tests",
    "perception_lm": "its vision tower is a timm model (Perception Encoder): timm is not "
    "installed for the parity tests",
    "hy_v4_vl": "an MoE decoder with hyper-connections and a sparse-attention indexer: not "
    "written yet",
    "idefics": "tanh-gated cross-attention layers beside the self-attention ones, with an "
    "image_attention_mask: needs the cross-attention contract generalised beyond Mllama, and "
    "a Perceiver resampler",
    "inkling2": "its decoder (sliding and full attention with short convolutions and relative "
    "position bias) is not written yet",
    "inkling2_loop": "its looped decoder with message attention is not written yet",
    "inkling_mm_model": "its vision, audio and text parts are not written yet",
    "kosmos-2.5": "its Pix2Struct-style tower and decoder are not wired to the VL contract yet",
    "minimax_m3_vl": "a sparse-attention MoE decoder with its own cache layout: not written yet",
    "muse_glimmer": "its vision tower and decoder (centred RMSNorm, normed embeddings) are not "
    "written yet",
    "muse_spark": "its vision and audio towers and MoE decoder are not written yet",
    "nemotron_h_omni": "its RADIO vision tower is not written yet",
    "pp_formulanet": "a SAM-style encoder into an mBART-style decoder: not written yet",
    "qwen4_exp": "its decoder (gated DeltaNet, an attention indexer, n-gram and per-layer "
    "embeddings) is not written yet",
    "step3p7": "needs a step3p5 decoder (288 routed experts and a shared one, head-gated "
    "attention, sliding layers with their own head count, per-layer partial RoPE) and its "
    "axial-RoPE tower; its image processor is torchvision-only",
    "t5gemma2": "an encoder–decoder over images and text: not written yet",
    "udop": "a T5 encoder–decoder over image patches and OCR layout boxes: no layout contract yet",
    "glm5_next": "its decoder (Kimi-Delta linear attention, DSA indexed attention, hyper-"
    "connections, a clamped-SwiGLU MoE) is not written yet",
    "mistral_large4": "its decoder (sparse indexed attention with learned rotary and position "
    "scales, RoPE-free layers of other head sizes, key/value caches shared across layers) is "
    "not written yet",
    "ernie4_5_vl_moe": "its decoder routes image and text tokens to separate experts with "
    "ERNIE's 3-D rotary positions, and transformers has no causal LM to check it alone",
    "git": "a prefix-LM: image tokens prepended into the cache without ids, attending both "
    "ways, text positions restarting: needs a contract of its own, and a post-LN BERT-style "
    "causal decoder with a cache",
    "florence2": "its DaViT tower is not written yet, and its encoder reads image features "
    "joined to the prompt (the image-to-text contract's encoder takes pixels only)",
}

#: Types transformers files under image-text-to-text that take no images, which another
#: package builds and verifies.
BUILT_ELSEWHERE = {
    "mistral4": "mobius-text builds and verifies it: a text-only decoder (Mistral Small 4's, "
    "whose checkpoints are `mistral3` with this decoder, verified here)",
}

#: What a verified type's build leaves out, said beside "verified".
PARTLY = {
    "molmo2": "images; video not yet",
    "qwen2_5_omni": "the thinker (text out); the talker and token2wav speech output not yet",
    "qwen3_omni_moe": "the thinker (text out); the talker and code2wav speech output not yet",
    "granite_docling": "the coarse connector route; the fine route not yet",
    "video_llama_3": "images; video not yet",
    "kimi_k25": "images; video not yet",
    "lfm3_vl": "images; video not yet",
}

#: Parity tests beside a kit's own function: task -> (file, test function, case table).
#: SigLIP 2's vision tower takes square images where PyTorch takes NaFlex patches;
#: RT-DETR's ResNet-vd is checked as the backbone it is (transformers has no model of it alone).
#: Phi-4-multimodal's cases (images, audio, both) run through the audio kit under the
#: graphs' input names; Gemma 4's, Gemma 4 unified's and Gemma 3n's cases have files
#: of their own.
EXTRA_PARITY = {
    "image-classification": (
        ("test_zero_shot_parity.py", "test_siglip2_vision_parity",
         "test_zero_shot_parity:NAFLEX_VISION_CASES"),
        ("test_deformable_backbones.py", "test_backbone_parity",
         "test_deformable_backbones:CASES"),
        ("test_swin_any_size.py", "test_backbone_parity", "test_swin_any_size:CASES"),
    ),
    "audio-vision-language": (
        ("test_phi4mm_parity.py", "test_phi4_multimodal_parity", "test_phi4mm_parity:CASES"),
        ("test_gemma4_unified_parity.py", "test_audio_vision_language_parity",
         "omni_parity_cases_gemma4_unified:CASES"),
        ("test_gemma4_parity.py", "test_audio_vision_language_parity",
         "omni_parity_cases_gemma4:CASES"),
        ("test_gemma3n_parity.py", "test_audio_vision_language_parity",
         "omni_parity_cases_gemma3n:CASES"),
    ),
}  # fmt: skip


def transformers_types() -> dict[str, dict[str, str]]:
    """Task -> {model_type: transformers class} of every type transformers ships natively."""
    from transformers.models.auto import modeling_auto as auto

    def first(name):
        return name if isinstance(name, str) else name[0]

    zero_shot = dict(auto.MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES)
    classify = {
        k: v for k, v in auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES.items()
        if k not in zero_shot
    }  # fmt: skip
    tables = {
        "image-classification": classify,
        "zero-shot-image-classification": zero_shot,
        "vision-language": dict(auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES),
        "object-detection": dict(auto.MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES),
        "zero-shot-object-detection": dict(auto.MODEL_FOR_ZERO_SHOT_OBJECT_DETECTION_MAPPING_NAMES),
        "semantic-segmentation": dict(auto.MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES),
        "universal-segmentation": dict(auto.MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES),
        "mask-generation": dict(auto.MODEL_FOR_MASK_GENERATION_MAPPING_NAMES),
        "depth-estimation": dict(auto.MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES),
    }
    return {task: {k: first(v) for k, v in t.items()} for task, t in tables.items()}


def _cases(spec: str) -> dict:
    module_name, _, attr = spec.partition(":")
    found = getattr(importlib.import_module(module_name), attr)
    return found() if callable(found) else found


def _case_keys(case: tuple | dict) -> set[str]:
    """The registry keys a case verifies: the architecture class it builds where mobius
    registers that class as a key (``model_class`` in its options: BEiT's segmentation
    head), else its model_type."""
    import mobius_vision

    if isinstance(case, dict):  # a backbone case: the config's fields, model_type among them
        return {case["model_type"]}
    model_type, *rest = case
    classes = {o.get("model_class") for o in rest if isinstance(o, dict)}
    return (classes & set(mobius_vision.model_types())) or {model_type}


def statuses(junit_xml: Path | None) -> dict[str, list[tuple[str, str, str]]]:
    """Task -> rows ``(model_type, transformers class, status)``."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES as MULTIMODAL_LM_NAMES,
    )
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    import mobius_vision

    sys.path.insert(0, str(TESTS))
    registered = {k: cls.task for k, cls in mobius_vision.model_types().items()}
    files = [kit[1] for kit in KITS] + [e[0] for extra in EXTRA_PARITY.values() for e in extra]
    passed = parity_results([TESTS / name for name in dict.fromkeys(files)], junit_xml)
    shipped = transformers_types()
    for task, *_ in KITS:  # a contract of mobius's own: its types move out of the HF tables
        if task not in shipped:
            shipped[task] = {
                key: types.pop(key)
                for key, built_as in registered.items()
                for types in shipped.values()
                if built_as == task and key in types
            }
    classes = {name for types in shipped.values() for name in types.values()}
    for key, task in registered.items():  # towers no task table lists (CLIP's vision tower)
        if key not in classes and not any(key in types for types in shipped.values()):
            name = MULTIMODAL_LM_NAMES.get(key) or MODEL_MAPPING_NAMES.get(key, "?")
            shipped[task][key] = name if isinstance(name, str) else name[0]
    tables = {}
    for task, _file, test, spec, _heading, _covers in KITS:
        cases_by_type: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for case_test, case_spec in (
            (test, spec),
            *((t, c) for _, t, c in EXTRA_PARITY.get(task, ())),
        ):
            for case, fields in _cases(case_spec).items():
                for key in _case_keys(fields):
                    cases_by_type[key].append((case_test, case))
        rows = []
        for model_type, hf_class in sorted(shipped[task].items()):
            # a head mobius registers under its architecture class (BeitForSemanticSegmentation)
            key = hf_class if registered.get(hf_class) == task else model_type
            cases = cases_by_type.get(key, [])
            built_as = registered.get(key)
            if built_as == task and model_type in NOT_RUNNABLE_HERE:
                status = f"registered, not verified: {NOT_RUNNABLE_HERE[model_type]}"
            elif built_as == task:
                ok = bool(cases) and all(passed[t].get(c, False) for t, c in cases)
                status = f"verified ({len(cases)} cases)" if ok else "registered, parity FAILING"
                if ok and model_type in PARTLY:
                    status += f": {PARTLY[model_type]}"
            elif built_as is not None and model_type not in shipped.get(built_as, {}):
                heading = next(kit[4] for kit in KITS if kit[0] == built_as)
                status = f"built as {built_as}: see {heading}"
            elif model_type in BUILT_ELSEWHERE:
                status = f"text only: {BUILT_ELSEWHERE[model_type]}"
            elif model_type in OUT_OF_SCOPE:
                status = f"out of scope: {OUT_OF_SCOPE[model_type]}"
            elif model_type in NOT_YET:
                status = f"not yet: {NOT_YET[model_type]}"
            else:
                status = "not yet"
            rows.append((model_type, hf_class, status))
        tables[task] = rows
    return tables


def parity_tests() -> dict[str, str]:
    """Registry key -> the parity tests holding its cases (``tests/FILE::FUNCTION``); nothing runs."""
    sys.path.insert(0, str(TESTS))
    tests: dict[str, str] = {}
    for task, file, test, spec, _heading, _covers in KITS:
        for case_file, case_test, case_spec in ((file, test, spec), *EXTRA_PARITY.get(task, ())):
            for fields in _cases(case_spec).values():
                for key in _case_keys(fields):
                    add_test(tests, key, case_file, case_test)
    return tests


def _with_image_text_to_text_summary(text: str, verified: list[str]) -> str:
    """``text`` with a line counting transformers' image-text-to-text types verified in any
    section (its table spans the vision–language, cross-attention, image-to-text and omni
    contracts)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    shipped = set(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)
    line = (
        f"Of transformers' {len(shipped)} image-text-to-text types, "
        f"{len(shipped & set(verified))} are verified (across the sections below)."
    )
    head, _, rest = text.partition("\n## ")
    return f"{head}{line}\n\n## {rest}"


def _write_readme_lists(sections) -> None:
    """The README's verified lists (between its markers), one line per section."""
    lines = [""]
    for heading, _covers, rows in sections:
        names = [f"`{key}`" for key, _, status in rows if status.startswith("verified")]
        lines.append(f"{heading} ({len(names)}): {', '.join(names)}.\n")
    readme = README.read_text()
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    README.write_text(readme[:start] + "\n".join(lines) + readme[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-run",
        type=Path,
        metavar="RESULTS.xml",
        help="read parity results from this JUnit XML instead of running the tests",
    )
    tables = statuses(parser.parse_args().no_run)
    import transformers

    sections = [
        (heading, covers, tables[task]) for task, _file, _test, _spec, heading, covers in KITS
    ]
    text, verified = support_markdown("mobius-vision", transformers.__version__, sections)
    OUTPUT.write_text(_with_image_text_to_text_summary(text, verified))
    _write_readme_lists(sections)
    write_verified(VERIFIED, verified, transformers.__version__, tests=parity_tests())
    print(f"wrote {OUTPUT} and {VERIFIED.name}: {len(verified)} verified")
    if any("FAILING" in row[2] for rows in tables.values() for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
