"""Cosmos3 Omni (the Reasoner of NVIDIA's Cosmos3): Qwen3-VL under another ``model_type``.

transformers' ``Cosmos3OmniForConditionalGeneration`` is Qwen3-VL's class unchanged
(``qwen3_vl_vision`` tower, ``qwen3_vl_text`` decoder, DeepStack, M-RoPE). The unified
Cosmos3 checkpoints also carry the Generator (diffusion) expert, the sound and action
towers and their cross-modal projections: the Reasoner reads none of them, so a build
ignores them by the patterns transformers drops on load.

Those checkpoints also keep the decoder flat (``layers.*``, ``embed_tokens.*``,
``norm.*``, with Diffusers' attention names ``to_q``... ``norm_q``) and the tower flat
(``blocks.*``, ``merger.*``...); a build maps both to Qwen3-VL's tree, as transformers'
conversion mapping does. Checkpoints in Qwen3-VL's nested layout need no mapping.
"""

from __future__ import annotations

from mobius_vision.models.qwen3_vl import Qwen3VLForConditionalGeneration

#: The flat layout's prefixes, and where Qwen3-VL's tree has them.
FLAT_PREFIXES = {
    **{p: f"language_model.model.{p}" for p in ("layers.", "embed_tokens.", "norm.")},
    **{
        p: f"vision_tower.{p}"
        for p in ("blocks.", "merger.", "patch_embed.", "pos_embed.", "deepstack_merger_list.")
    },
}
#: Diffusers' attention names in the flat layout, and Qwen3's.
ATTENTION_NAMES = {
    ".self_attn.to_q.": ".self_attn.q_proj.",
    ".self_attn.to_k.": ".self_attn.k_proj.",
    ".self_attn.to_v.": ".self_attn.v_proj.",
    ".self_attn.to_out.": ".self_attn.o_proj.",
    ".self_attn.norm_q.": ".self_attn.q_norm.",
    ".self_attn.norm_k.": ".self_attn.k_norm.",
}

#: The unified checkpoint's tensors the Reasoner does not read (names after the renames).
UNIFIED_CHECKPOINT_EXTRAS = (
    # the Generator's mixture-of-transformers expert and cross-modal projections
    "*.add_q_proj.*",
    "*.add_k_proj.*",
    "*.add_v_proj.*",
    "*.to_add_out.*",
    "*.norm_added_q.*",
    "*.norm_added_k.*",
    "*moe_gen*",
    "proj_out.*",
    "proj_in.*",
    "time_embedder.*",
    # the sound and action towers
    "audio_proj_out.*",
    "audio_proj_in.*",
    "audio_modality_embed",
    "action_proj_out.*",
    "action_proj_in.*",
    "action_modality_embed",
)


def _attention_renamed(name: str) -> str:
    for old, new in ATTENTION_NAMES.items():
        name = name.replace(old, new)
    return name


class Cosmos3OmniForConditionalGeneration(Qwen3VLForConditionalGeneration):
    """Qwen3-VL's composition over the flat layout too; the unified checkpoint's other
    towers ignored."""

    renames = {**Qwen3VLForConditionalGeneration.renames, **FLAT_PREFIXES}

    def sanitize(self, weights: dict) -> dict:
        return super().sanitize({_attention_renamed(k): v for k, v in weights.items()})

    @property
    def ignored(self) -> tuple[str, ...]:
        return (*super().ignored, *UNIFIED_CHECKPOINT_EXTRAS)


MODEL_TYPES = {"cosmos3_omni": Cosmos3OmniForConditionalGeneration}
