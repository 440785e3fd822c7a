"""A diffusers component's ``config.json`` as the config object a family's ``from_hf`` reads."""

from __future__ import annotations

from typing import Any

from mobius.source import SIZE_LIMITS

# The limits of the sizes a component's config.json gives, past which it is corrupt: core's
# (:data:`mobius.source.SIZE_LIMITS`) and the fields diffusers names its own way. A layer or
# block count sizes the graph (each is built), a width or a length the tensors and tables.
# (smallest, largest): a width, a head count or a length of 0 divides by zero.
_DEPTH = (0, 1 << 12)  # layers or blocks: core's num_hidden_layers limit
_HEADS = (1, 1 << 14)
_EXPERTS = (0, 1 << 14)  # mixture-of-experts sizes, 0 in a model without experts
_WIDTH = (1, 1 << 20)  # channels and embedding widths: core's hidden_size limit
_EXTRA = (0, 1 << 20)  # widths of optional extra inputs, 0 when there are none
_LENGTH = (1, 1 << 16)  # sample sizes, sequence lengths, patches, kernels, groups
_COUNT = (1, 1 << 24)  # codebook or class-embedding entries: core's vocab_size limit
_FIELDS = {
    _DEPTH: (
        "layers_per_block",
        "transformer_layers_per_block",
        "reverse_transformer_layers_per_block",
        "transformer_layers_per_mid_block",
        "temporal_transformer_layers_per_block",
        "reverse_temporal_transformer_layers_per_block",
        "temporal_transformer_layers_per_mid_block",
        "mid_block_layers",
        "num_single_layers",
        "num_single_dit_layers",
        "num_mmdit_layers",
        "n_layers",
        "n_refiner_layers",
        "num_refiner_layers",
        "num_res_blocks",
        "num_encoder_blocks",
        "num_decoder_blocks",
        "encoder_layers_per_block",
        "decoder_layers_per_block",
        "down_num_layers_per_block",
        "up_num_layers_per_block",
        "down_blocks_repeat_mappers",
        "up_blocks_repeat_mappers",
        "block_repeat",
        "bottleneck_blocks",
        "approximator_layers",
        "vace_layers",
        "dual_attention_layers",
        "llama_layers",
        "depth",
        "levels",
    ),
    _HEADS: (
        "attention_head_dim",
        "cross_attention_head_dim",
        "num_cross_attention_heads",
        "motion_num_attention_heads",
        "addition_embed_type_num_heads",
        "n_heads",
        "n_kv_heads",
        "num_kv_heads",
        "heads",
    ),
    _EXPERTS: ("num_routed_experts", "num_activated_experts"),
    _WIDTH: (
        "in_channels",
        "out_channels",
        "latent_channels",
        "block_out_channels",
        "encoder_block_out_channels",
        "decoder_block_out_channels",
        "conditioning_channels",
        "conditioning_embedding_channels",
        "conditioning_embedding_out_channels",
        "input_channels",
        "channels",
        "bn_channels",
        "caption_channels",
        "caption_projection_dim",
        "cross_attention_dim",
        "cross_attention_dim_t5",
        "joint_attention_dim",
        "pooled_projection_dim",
        "encoder_hid_dim",
        "projection_class_embeddings_input_dim",
        "addition_time_embed_dim",
        "time_embed_dim",
        "time_embedding_dim",
        "time_cond_proj_dim",
        "timestep_guidance_channels",
        "timestep_ratio_embedding_dim",
        "clip_text_pooled_in_channels",
        "clip_text_in_channels",
        "clip_image_in_channels",
        "effnet_in_channels",
        "pixel_mapper_in_channels",
        "conditioning_dim",
        "condition_dim",
        "text_dim",
        "text_emb_dim",
        "text_embed_dim",
        "cap_feat_dim",
        "siglip_feat_dim",
        "image_embed_dim",
        "embedding_dim",
        "embed_dim",
        "inner_dim",
        "dim",
        "ffn_dim",
        "ff_inner",
        "mlp_hidden_dim",
        "approximator_hidden_dim",
        "approximator_num_channels",
        "adaln_dim",
        "resampler_dim",
        "id_embed_dim",
        "id_inner",
        "freq_dim",
        "z_dim",
        "base_dim",
        "dim_mult",
        "vq_embed_dim",
        "vace_in_channels",
        "axes_dim_rope",
        "axes_dims_rope",
        "axes_dims",
        "rope_axes_dim",
        "multiple_of",
    ),
    _LENGTH: (
        "sample_size",
        "sample_height",
        "sample_width",
        "sample_frames",
        "num_frames",
        "max_resolution",
        "pos_embed_max_size",
        "max_sequence_length",
        "max_text_seq_length",
        "motion_max_seq_length",
        "rope_max_seq_len",
        "axes_lens",
        "text_len",
        "text_len_t5",
        "clip_seq",
        "num_tokens",
        "patch_size",
        "patch_size_t",
        "all_patch_size",
        "all_f_patch_size",
        "kernel_size",
        "conv_in_kernel",
        "conv_out_kernel",
        "norm_num_groups",
        "attn_norm_num_groups",
        "groups",
        "num_frame_per_block",
    ),
    _EXTRA: ("extra_conditioning_channels", "extra_condition_channels", "additional_embeddings"),
    _COUNT: ("num_vq_embeddings", "num_embeds_ada_norm", "num_embeddings", "num_class_embeds"),
}
#: Every size field of a component config and its largest value (checked before a build).
COMPONENT_SIZE_LIMITS = {
    **SIZE_LIMITS,
    **{name: limit for limit, names in _FIELDS.items() for name in names},
}

#: Per-level list fields a class marks "none" with -1 (Stable Cascade: no attention at that
#: level); they read as null, which core's size checks skip.
NONE_MARKERS = {"StableCascadeUNet": ("num_attention_heads",)}


class ComponentConfig:
    """A diffusers component's ``config.json`` read as attributes (``config.block_out_channels``).

    diffusers saves every constructor argument of a component, so a family's config
    dataclass reads the fields it needs and refuses what it does not build. The
    component's class (``_class_name``) is its ``model_type``: the registry key.
    Lists stay lists; a missing field reads as ``AttributeError`` (use ``getattr``
    with the diffusers default for fields older configs lack).
    """

    #: The sizes core's :func:`~mobius.source.check_sizes` checks before a build.
    size_limits = COMPONENT_SIZE_LIMITS

    def __init__(self, fields: dict[str, Any]) -> None:
        self.__dict__.update(fields)
        self.model_type = fields["_class_name"]
        for name in NONE_MARKERS.get(self.model_type, ()):
            values = fields.get(name)
            if isinstance(values, list):  # core checks sizes: -1 is no size but "none"
                setattr(self, name, [None if v == -1 else v for v in values])

    def to_dict(self) -> dict[str, Any]:
        """Every field, ``model_type`` included."""
        return dict(self.__dict__)

    def __repr__(self) -> str:
        return f"ComponentConfig({self.model_type})"
