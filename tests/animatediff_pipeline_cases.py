"""A tiny random ``AnimateDiffPipeline``, made as diffusers' own tests make one, saved for a build.

An SD-style ``UNet2DConditionModel`` and a ``MotionAdapter`` go into the pipeline, which
turns them into a ``UNetMotionModel`` ``unet`` (the adapter's motion modules copied in);
every parameter of the unet, the adapter, the CLIP text encoder and the VAE is then
perturbed, each with a seed of its own, so the saved ``motion_adapter`` no longer equals
the unet's modules: the pipeline runs the unet's, and so must a build that leaves the
adapter out.
"""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import _clip_text_encoder, _perturbed, _tiny_vae, tiny_clip_tokenizer

#: AnimateDiff's hub scheduler (guoyww/animatediff's examples): DDIM on linear betas.
HUB_SCHEDULER = dict(
    beta_start=0.00085,
    beta_end=0.012,
    beta_schedule="linear",
    clip_sample=False,
    timestep_spacing="linspace",
    steps_offset=1,
)


def make_animatediff_pipeline(directory: Path):
    """A tiny ``AnimateDiffPipeline`` (CLIP 16 wide, a two-level UNet with motion modules in
    every block and the mid-block, a VAE that halves once) saved into ``directory``."""
    import torch
    from diffusers import AnimateDiffPipeline, DDIMScheduler, MotionAdapter, UNet2DConditionModel

    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer(directory.parent / "clip-tokenizer")
    text_encoder = _clip_text_encoder(len(tokenizer), 16)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=(8, 16),
        layers_per_block=1,
        cross_attention_dim=16,
        attention_head_dim=2,
        norm_num_groups=4,
    )
    adapter = MotionAdapter(
        block_out_channels=(8, 16),
        motion_layers_per_block=1,
        motion_norm_num_groups=4,
        motion_num_attention_heads=2,
        motion_max_seq_length=8,
        use_motion_mid_block=True,
    )
    pipe = AnimateDiffPipeline(
        vae=_tiny_vae(sample_size=16, scaling_factor=0.5),
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        motion_adapter=adapter,
        scheduler=DDIMScheduler(**HUB_SCHEDULER),
    )
    _perturbed(pipe.text_encoder, pipe.unet, pipe.vae, pipe.motion_adapter)
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
