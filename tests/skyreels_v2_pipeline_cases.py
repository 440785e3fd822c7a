"""A tiny random ``SkyReelsV2Pipeline`` saved for a build, every parameter perturbed: Wan's
tokenizer, UMT5 text encoder and VAE (:mod:`wan_i2v_pipeline_cases`), a 2-layer
``SkyReelsV2Transformer3DModel`` and the UniPC flow-sigma scheduler SkyReels' T2V runs with."""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import _perturbed
from wan_i2v_pipeline_cases import _components

#: UniPC as diffusers' SkyReels-V2 T2V example sets it (``flow_shift`` 8 for T2V).
SCHEDULER = dict(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=8.0)


def make_skyreels_v2_pipeline(directory: Path):
    """The pipeline, saved into ``directory``; latents are ``[batch, 4, frames, H/4, W/4]``."""
    import torch
    from diffusers import SkyReelsV2Pipeline, SkyReelsV2Transformer3DModel, UniPCMultistepScheduler

    torch.manual_seed(0)
    tokenizer, text_encoder, vae = _components()
    transformer = SkyReelsV2Transformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=4,
        out_channels=4,
        text_dim=16,
        freq_dim=16,
        ffn_dim=32,
        num_layers=2,
        rope_max_seq_len=32,
    )
    _perturbed(text_encoder, transformer, vae)
    pipe = SkyReelsV2Pipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        transformer=transformer,
        vae=vae,
        scheduler=UniPCMultistepScheduler(**SCHEDULER),
    )
    pipe.save_pretrained(directory)
    return pipe
