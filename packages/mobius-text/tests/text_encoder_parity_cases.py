"""Parity cases of decoders built as text encoders (``text-encoder``), and how each is saved.

``CASES``: case -> (model_type, config overrides over ``TINY``, {"model_class": the
registry key verified, "saved": the transformers class saved (a causal LM or a VL
wrapper is built as model_class with ``--model-type``), "options": the build's flags,
"states": the ``hidden_states.{i}`` outputs they must give}). A wrapper's overrides
give its ``text_config`` whole.
"""

from __future__ import annotations

from encoder_parity_cases import TINY as ENCODER_TINY
from transformers import AutoConfig

from mobius.testing import perturb_parameters

# The encoders' tiny sizes, with grouped KV heads of 8 channels (GroupQueryAttention's minimum).
TINY = dict(ENCODER_TINY, num_key_value_heads=2, head_dim=8)

# Multimodal RoPE: on text every section has the same position.
MROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]}
QWEN2_5_VL_VISION = dict(
    depth=1,
    hidden_size=16,
    intermediate_size=24,
    num_heads=2,
    out_hidden_size=TINY["hidden_size"],
    patch_size=4,
    spatial_merge_size=2,
    temporal_patch_size=2,
    window_size=16,
    fullatt_block_indexes=[0],
)

MISTRAL3_VISION = dict(
    model_type="pixtral",
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=1,
    num_attention_heads=2,
    head_dim=8,
    patch_size=4,
    image_size=16,
)


def case(model_type, overrides, model_class, hidden_states, states, saved=None, options=()):
    """A case: ``--hidden-states hidden_states`` must give the outputs ``hidden_states.{i}``
    for ``i`` in ``states`` (the tiny models have 2 layers: 3 states)."""
    spec = dict(
        model_class=model_class,
        options=[*options, "--hidden-states", hidden_states],
        states=states,
    )
    return model_type, overrides, dict(spec, saved=saved or model_class)


def mistral3_case(*options):
    """A Mistral 3 (Pixtral vision tower, projector, an untied head) saved whole and built as
    ``Mistral3TextModel``; a window of 3 tokens exercised."""
    text = dict(TINY, model_type="mistral", sliding_window=3, tie_word_embeddings=False)
    overrides = dict(text_config=text, vision_config=MISTRAL3_VISION, image_token_index=1)
    return case(
        "mistral3",
        dict(overrides, tie_word_embeddings=False),
        "Mistral3TextModel",
        "0,1,-1",
        (0, 1, 2),
        saved="Mistral3ForConditionalGeneration",
        options=["--model-type", "Mistral3TextModel", *options],
    )


CASES = {
    "llama": case("llama", {}, "LlamaModel", "all", (0, 1, 2)),
    "llama_causal_lm": case(
        "llama",
        {"tie_word_embeddings": False},
        "LlamaModel",
        "0,-2",
        (0, 1),
        saved="LlamaForCausalLM",
        options=["--model-type", "LlamaModel"],
    ),
    # Qwen-Image's text encoder: the whole VL checkpoint, its text model built alone.
    "qwen2_5_vl_text": case(
        "qwen2_5_vl",
        {
            "text_config": dict(TINY, rope_parameters=MROPE),
            "vision_config": QWEN2_5_VL_VISION,
            "image_token_id": 1,
            "video_token_id": 2,
            "vision_start_token_id": 3,
        },
        "Qwen2_5_VLTextModel",
        "-1",
        (2,),
        saved="Qwen2_5_VLForConditionalGeneration",
        options=["--model-type", "Qwen2_5_VLTextModel"],
    ),
    # Flux.2's text encoder: the whole Mistral 3 checkpoint, its language model built alone.
    "mistral3_text": mistral3_case(),
    "mistral3_text_ep_cpu": mistral3_case("--ep", "cpu"),
    "qwen2": case("qwen2", {}, "Qwen2Model", "-1", (2,)),
    # e5-mistral's bare model: a window of 3 tokens exercised.
    "mistral": case("mistral", {"sliding_window": 3}, "MistralModel", "-2", (1,)),
    "qwen3": case("qwen3", {}, "Qwen3Model", "-2", (1,)),
    "qwen3_ep_cpu": case("qwen3", {}, "Qwen3Model", "-2", (1,), options=["--ep", "cpu"]),
    # A window of 3 tokens on every other layer, and soft-capped scores, exercised.
    "gemma2": case(
        "gemma2", {"sliding_window": 3, "attn_logit_softcapping": 5.0}, "Gemma2Model", "-2", (1,)
    ),
    "glm": case("glm", {}, "GlmModel", "0,-2", (0, 1)),
}


def first_causal_configs() -> dict[str, dict]:
    """Each causal-LM model_type's first parity case's config, whole (over the causal TINY)."""
    from text_parity_cases import TINY as CAUSAL_TINY
    from text_parity_cases import all_cases as causal_cases

    first: dict[str, dict] = {}
    for _, (model_type, overrides, *options) in sorted(causal_cases().items()):
        if not (options and options[0].get("model_class")):  # the type's own class
            first.setdefault(model_type, {**CAUSAL_TINY, **overrides})
    return first


# The padding sides a bare class is compared on where not both ("sides" of a case).
PADDING_SIDES = {
    # transformers' CpmAntModel takes no attention_mask: it counts the ids that are not 0 and
    # takes them to be the last positions (CPM-Ant's tokenizer pads left), so right-padded
    # rows have their tokens masked out there.
    "CpmAntModel": ("left",),
}


def causal_backbone_cases() -> dict[str, tuple]:
    """A case per bare class built through its causal LM (``models/causal_backbones.py``),
    saved bare, on its family's first causal-LM parity config: the last state only."""
    from mobius_text.models.causal_backbones import EMBEDDERS

    configs = first_causal_configs()
    spec = dict(options=[], states=(), whole=True)
    return {
        key: (
            model_type,
            configs[model_type],
            dict(spec, model_class=key, saved=key, sides=PADDING_SIDES.get(key, ("right", "left"))),
        )
        for key, model_type in EMBEDDERS.items()
    }


def all_cases() -> dict[str, tuple]:
    return {**CASES, **causal_backbone_cases()}


def save_random_model(
    model_type: str, overrides: dict, model_class: str, path, seed: int = 0, whole: bool = False
):
    """A tiny transformers ``model_class`` with every parameter perturbed, saved to ``path``;
    ``overrides`` over ``TINY``, or the whole config where ``whole``."""
    import torch
    import transformers

    whole = whole or "text_config" in overrides  # a wrapper's config: its parts given whole
    hf_config = AutoConfig.for_model(model_type, **(overrides if whole else {**TINY, **overrides}))
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)._from_config(
        hf_config, dtype=torch.float32, attn_implementation="eager"
    )
    perturb_parameters(model, seed)
    model.eval().save_pretrained(path)
    return model
