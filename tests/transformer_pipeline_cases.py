"""Tiny random SD3, PixArt and DiT pipelines for the end-to-end tests: every parameter perturbed, no hub.

As :mod:`pipeline_cases`: each maker saves a diffusers pipeline (float32, eval) with
``save_pretrained`` into ``directory`` and returns it. :func:`write_legacy_transformer_config`
rewrites a saved transformer as the hub's PixArt and DiT repos hold it: a
``Transformer2DModel`` config (the checkpoint keys are the same).
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline_cases import (
    _clip_text_encoder,
    _perturbed,
    _tiny_vae,
    tiny_clip_tokenizer,
    tiny_t5,
    tiny_word_tokenizer,
)

#: DiT's null class is row 1000 of the label table: diffusers' DiTPipeline names it so.
DIT_CLASSES = 1000
DIT_LABELS = {"0": "tench, Tinca tinca", "1": "goldfish, Carassius auratus", "2": "white shark"}


def make_sd3_pipeline(directory: Path):
    """A tiny ``StableDiffusion3Pipeline`` saved into ``directory``.

    CLIP-L (12 wide) and CLIP-G (16 wide), both with 8-wide projections (pooled 16),
    T5 (32 wide = joint_attention_dim, so the CLIP states are zero-padded by 4), an
    SD3.5-style transformer (RMS QK norm, dual attention in block 0), a VAE with a
    shift factor; flow matching with dynamic shifting.
    """
    import torch
    from diffusers import (
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )

    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer(directory.parent / "clip-tokenizer")
    tokenizer_2 = tiny_clip_tokenizer(directory.parent / "clip-tokenizer-2", pad_token="a</w>")
    tokenizer_3 = tiny_word_tokenizer()
    text_encoder = _clip_text_encoder(len(tokenizer), 12, projection_dim=8)
    text_encoder_2 = _clip_text_encoder(len(tokenizer_2), 16, projection_dim=8)
    text_encoder_3 = tiny_t5(len(tokenizer_3), 32)
    transformer = SD3Transformer2DModel(
        sample_size=16,
        patch_size=2,
        in_channels=4,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=32,
        caption_projection_dim=16,
        pooled_projection_dim=16,
        out_channels=4,
        pos_embed_max_size=16,
        qk_norm="rms_norm",
        dual_attention_layers=(0,),
    )
    vae = _tiny_vae(
        sample_size=32,
        scaling_factor=0.7,
        shift_factor=0.05,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    _perturbed(text_encoder, text_encoder_2, text_encoder_3, transformer, vae)
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.16
    )
    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        text_encoder_3=text_encoder_3,
        tokenizer_3=tokenizer_3,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe


def make_pixart_pipeline(directory: Path, pipeline_class: str, sample_size: int):
    """A tiny PixArt-α or -Σ pipeline (``pipeline_class``) saved into ``directory``.

    ``sample_size`` 128 makes the transformer size-conditioned (diffusers' default for
    it, PixArt-α 1024); the output has a learned sigma (8 channels for 4). α steps with
    DDIM, Σ with DPM-Solver++ (2nd order), the PixArt repos' scheduler.
    """
    import diffusers
    import torch
    from diffusers import DDIMScheduler, DPMSolverMultistepScheduler, PixArtTransformer2DModel

    torch.manual_seed(0)
    tokenizer = tiny_word_tokenizer()
    text_encoder = tiny_t5(len(tokenizer), 16)
    transformer = PixArtTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=12,  # 24 wide: the size embeddings take a third each
        in_channels=4,
        out_channels=8,
        num_layers=2,
        cross_attention_dim=24,
        sample_size=sample_size,
        patch_size=2,
        caption_channels=16,
        norm_elementwise_affine=False,
    )
    vae = _tiny_vae(sample_size=32, scaling_factor=0.45)
    _perturbed(text_encoder, transformer, vae)
    betas = dict(beta_start=0.0001, beta_end=0.02, beta_schedule="linear")
    if pipeline_class == "PixArtSigmaPipeline":
        scheduler = DPMSolverMultistepScheduler(**betas, algorithm_type="dpmsolver++")
    else:
        scheduler = DDIMScheduler(**betas, clip_sample=False)
    pipe = getattr(diffusers, pipeline_class)(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        transformer=transformer,
        scheduler=scheduler,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe


def make_dit_pipeline(directory: Path):
    """A tiny ``DiTPipeline`` (1000 classes, learned sigma, three named labels, DDIM) saved into ``directory``."""
    import torch
    from diffusers import DDIMScheduler, DiTPipeline, DiTTransformer2DModel

    torch.manual_seed(0)
    transformer = DiTTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=4,
        out_channels=8,
        num_layers=2,
        sample_size=8,
        patch_size=2,
        num_embeds_ada_norm=DIT_CLASSES,
    )
    vae = _tiny_vae(sample_size=16, scaling_factor=0.3)
    _perturbed(transformer, vae)
    scheduler = DDIMScheduler(
        beta_start=0.0001, beta_end=0.02, beta_schedule="linear", clip_sample=False
    )
    pipe = DiTPipeline(
        transformer=transformer, vae=vae, scheduler=scheduler, id2label=dict(DIT_LABELS)
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    # save_pretrained drops id2label; the hub's model_index.json holds it (from_pretrained reads it)
    index = json.loads((directory / "model_index.json").read_text())
    (directory / "model_index.json").write_text(json.dumps(dict(index, id2label=DIT_LABELS)))
    return pipe


def write_legacy_transformer_config(pipeline_dir: Path, norm_type: str, **fields) -> dict:
    """Rewrite ``transformer/`` of a saved pipeline as the hub holds PixArt and DiT: a ``Transformer2DModel``.

    The config is what diffusers' ``Transformer2DModel`` itself saves for the same
    fields (its legacy keys included), with ``norm_type``; ``model_index.json`` names
    the class as the hub's do. Returns the config written.
    """
    from diffusers import Transformer2DModel

    component = pipeline_dir / "transformer"
    current = json.loads((component / "config.json").read_text())
    legacy = Transformer2DModel.extract_init_dict(current)[0]
    legacy.update(norm_type=norm_type, **fields)
    config = {"_class_name": "Transformer2DModel", **Transformer2DModel(**legacy).config}
    config = {k: v for k, v in config.items() if k != "_use_default_values"}
    (component / "config.json").write_text(json.dumps(config, indent=2))
    index = json.loads((pipeline_dir / "model_index.json").read_text())
    index["transformer"] = ["diffusers", "Transformer2DModel"]
    (pipeline_dir / "model_index.json").write_text(json.dumps(index, indent=2))
    return config
