"""What each graph of a diffusion component stands for: the diffusers call it replaces.

``DIFFUSERS_CALLS[class_name](model, graph_path, torch_inputs) -> {output name: tensor}``,
one per registered class; the parity tests and ``mobius build --validate``
(:mod:`mobius_diffusion.validate`) compare each graph with it.
"""

from __future__ import annotations

from collections.abc import Callable


def _vae(model, graph: str, inputs: dict) -> dict:
    if graph == "encoder/model":
        return {"latent_parameters": model.encode(inputs["sample"]).latent_dist.parameters}
    return {"sample": model.decode(inputs["latent_sample"]).sample}


def _wan_vae(model, graph: str, inputs: dict) -> dict:
    """Wan's (and Qwen-Image's) VAE; ``decoder_step/model`` fed no past frames (the first step)
    and two latent frames or more: diffusers' ``decode`` of them, and as ``present_frames.{i}``
    its ``feat_cache`` after the last frame (before that, some hold one frame or ``"Rep"``)."""
    if graph != "decoder_step/model":
        return _vae(model, graph, inputs)
    latents = inputs["latent_sample"]
    if latents.shape[2] < 2 or any(
        value.shape[2] for name, value in inputs.items() if name.startswith("past_frames.")
    ):
        raise ValueError(
            "the decoder step's reference is a first step of two latent frames or more"
        )
    sample = model.decode(latents).sample
    model.clear_cache()
    z = model.post_quant_conv(latents)
    for k in range(z.shape[2]):
        model._conv_idx = [0]
        frame = z[:, :, k : k + 1]
        model.decoder(
            frame, feat_cache=model._feat_map, feat_idx=model._conv_idx, first_chunk=k == 0
        )
    used = model._feat_map[: model._conv_idx[0]]  # it counts slots for 1x1x1 convs too
    present = {f"present_frames.{i}": cache for i, cache in enumerate(used)}
    model.clear_cache()
    return {"sample": sample, **present}


def _flux2_vae(model, graph: str, inputs: dict) -> dict:
    """AutoencoderKL's graphs, and ``bn/model``: the statistics the Flux.2 pipelines read."""
    if graph == "bn/model":
        return {"running_mean": model.bn.running_mean, "running_var": model.bn.running_var}
    return _vae(model, graph, inputs)


def _deterministic_vae(model, graph: str, inputs: dict) -> dict:
    """An autoencoder with no latent distribution (``AutoencoderDC``)."""
    if graph == "encoder/model":
        return {"latent": model.encode(inputs["sample"]).latent}
    return {"sample": model.decode(inputs["latent_sample"]).sample}


def _vq_vae(model, graph: str, inputs: dict) -> dict:
    """``VQModel``: the latents before quantisation; decoded unquantised, as the pipelines call it."""
    if graph == "encoder/model":
        return {"latent": model.encode(inputs["sample"]).latents}
    return {"sample": model.decode(inputs["latent_sample"], force_not_quantize=True).sample}


def _tiny_vae(model, graph: str, inputs: dict) -> dict:
    """``AutoencoderTiny``: the encoder's latents themselves (no distribution)."""
    if graph == "encoder/model":
        return {"latent": model.encode(inputs["sample"]).latents}
    return {"sample": model.decode(inputs["latent_sample"]).sample}


def _unet_2d(model, graph: str, inputs: dict) -> dict:
    """``UNet2DModel``: the sample, the timestep and (class-conditional) the labels."""
    return {"out_sample": model(**inputs).sample}


def _unet(model, graph: str, inputs: dict) -> dict:
    """Kandinsky 2.2's UNet takes ``image_embeds`` (in ``added_cond_kwargs``) and no text; one
    with IP-Adapter attention (:func:`load_ip_adapter_attention`) the projected image tokens."""
    added = {k: inputs[k] for k in ("text_embeds", "time_ids", "image_embeds") if k in inputs}
    if "ip_adapter_image_embeds" in inputs:  # one adapter, one image: [batch, 1, tokens, dim]
        added["image_embeds"] = [inputs["ip_adapter_image_embeds"][:, None]]
        for processor in model.attn_processors.values():
            if hasattr(processor, "to_k_ip"):  # diffusers' set_ip_adapter_scale
                processor.scale = [float(inputs["ip_adapter_scale"])]
    sample = inputs["sample"], inputs["timestep"], inputs.get("encoder_hidden_states")
    out = model(
        *sample,
        timestep_cond=inputs.get("timestep_cond"),
        added_cond_kwargs=added or None,
        **_unet_residuals(inputs),
    )
    return {"out_sample": out.sample}


def load_ip_adapter_attention(model, tensors: dict) -> None:
    """diffusers' ``load_ip_adapter`` on a UNet from an IP-Adapter checkpoint's ``tensors``
    (torch, original names), the image projection then made the identity: the UNet takes
    the projected image tokens, as mobius's graph built with ``--ip-adapter`` does."""
    import torch
    from diffusers.models.embeddings import MultiIPAdapterImageProjection

    state = {"image_proj": {}, "ip_adapter": {}}
    for name, tensor in tensors.items():
        half, _, rest = name.partition(".")
        state[half][rest] = tensor
    model._load_ip_adapter_weights([state], low_cpu_mem_usage=False)
    model.encoder_hid_proj = MultiIPAdapterImageProjection([torch.nn.Identity()])
    loras = model._load_ip_adapter_loras([state])
    if loras:  # FaceID's LoRA, through peft as the pipeline's load_ip_adapter applies it
        from diffusers.loaders import StableDiffusionLoraLoaderMixin as Loader

        lora, alphas = Loader.lora_state_dict(loras[0])
        Loader.load_lora_into_unet(lora, alphas, unet=model, adapter_name="faceid_0")
        model.set_adapters(["faceid_0"], weights=[1.0])


def _unet_residuals(inputs: dict) -> dict:
    """A ControlNet's residuals or a T2I-Adapter's features (``--unet-residuals``) as diffusers'
    UNet takes them: lists in index order (it pops the features, the mid block's last)."""

    def numbered(prefix: str) -> list:
        count = sum(name.startswith(f"{prefix}.") for name in inputs)
        return [inputs[f"{prefix}.{i}"] for i in range(count)]

    if "mid_block_additional_residual" in inputs:
        return dict(
            down_block_additional_residuals=numbered("down_block_additional_residuals"),
            mid_block_additional_residual=inputs["mid_block_additional_residual"],
        )
    features = numbered("down_intrablock_additional_residuals")
    return dict(down_intrablock_additional_residuals=features) if features else {}


def _unet_motion(model, graph: str, inputs: dict) -> dict:
    """AnimateDiff's UNet: diffusers' pipelines repeat each text row for every frame first."""
    frames = inputs["sample"].shape[2]
    states = inputs["encoder_hidden_states"].repeat_interleave(frames, dim=0)
    added = {k: inputs[k] for k in ("text_embeds", "time_ids") if k in inputs}
    out = model(
        inputs["sample"],
        inputs["timestep"],
        states,
        timestep_cond=inputs.get("timestep_cond"),
        added_cond_kwargs=added or None,
    )
    return {"out_sample": out.sample}


def _svd_unet(model, graph: str, inputs: dict) -> dict:
    keys = ("sample", "timestep", "encoder_hidden_states", "added_time_ids")
    return {"out_sample": model(*(inputs[k] for k in keys)).sample}


def _temporal_vae(model, graph: str, inputs: dict) -> dict:
    """SVD's VAE over videos ``[b, c, f, h, w]``: diffusers' takes frames as images ``[b * f,
    c, h, w]`` and decodes ``num_frames`` of them together."""
    if graph == "encoder/model":
        sample = inputs["sample"]
        b, c, f, h, w = sample.shape
        frames = sample.permute(0, 2, 1, 3, 4).reshape(b * f, c, h, w)
        moments = model.encode(frames).latent_dist.parameters
        return {"latent_parameters": moments.reshape(b, f, *moments.shape[1:]).transpose(1, 2)}
    latent = inputs["latent_sample"]
    b, c, f, h, w = latent.shape
    frames = latent.permute(0, 2, 1, 3, 4).reshape(b * f, c, h, w)
    decoded = model.decode(frames, num_frames=f).sample
    return {"sample": decoded.reshape(b, f, *decoded.shape[1:]).transpose(1, 2)}


def _controlnet(model, graph: str, inputs: dict) -> dict:
    added = {k: inputs[k] for k in ("text_embeds", "time_ids") if k in inputs}
    down, mid = model(
        inputs["sample"],
        inputs["timestep"],
        inputs["encoder_hidden_states"],
        inputs["controlnet_cond"],
        conditioning_scale=float(inputs["conditioning_scale"]),
        added_cond_kwargs=added or None,
        return_dict=False,
    )
    return {
        **{f"down_block_res_samples.{i}": d for i, d in enumerate(down)},
        "mid_block_res_sample": mid,
    }


def _transformer_controlnet(model, graph: str, inputs: dict) -> dict:
    """SD3, Flux, Qwen-Image and Sana ControlNets: the graph's inputs by their names (the scale a
    number, Qwen-Image's ``img_shapes`` as for its transformer); each list of block samples
    (``controlnet_block_samples``, Flux's ``controlnet_single_block_samples``) numbered."""
    inputs = dict(inputs, conditioning_scale=float(inputs["conditioning_scale"]))
    if "img_shapes" in inputs:
        shapes = [tuple(int(v) for v in row) for row in inputs.pop("img_shapes").tolist()]
        inputs["img_shapes"] = [shapes] * inputs["hidden_states"].shape[0]
    out = model(**inputs)
    return {
        f"{name}.{i}": sample
        for name, samples in out.items()
        for i, sample in enumerate(samples or ())
    }


def _transformer(model, graph: str, inputs: dict) -> dict:
    """SD3, Flux, DiT and Wan take the graph's inputs by their names."""
    return {"out_hidden_states": model(**inputs).sample}


def _skyreels_v2(model, graph: str, inputs: dict) -> dict:
    """Per-frame timesteps ``[batch, frames]`` are diffusion forcing. diffusers adds the fps
    term right there only for one row (its pipelines' batch), so such rows run one by one."""
    import torch

    inputs, forcing = dict(inputs), inputs["timestep"].ndim == 2
    if not (forcing and "fps" in inputs):
        fps = inputs.pop("fps").tolist() if "fps" in inputs else None
        out = model(**inputs, fps=fps, enable_diffusion_forcing=forcing).sample
        return {"out_hidden_states": out}
    batch = inputs["hidden_states"].shape[0]
    rows = [{k: v.chunk(batch)[i] for k, v in inputs.items()} for i in range(batch)]
    outs = [
        model(**dict(row, fps=row["fps"].tolist()), enable_diffusion_forcing=True).sample
        for row in rows
    ]
    return {"out_hidden_states": torch.cat(outs)}


def _pixart(model, graph: str, inputs: dict) -> dict:
    inputs = dict(inputs)
    added = {k: inputs.pop(k) for k in ("resolution", "aspect_ratio") if k in inputs}
    return {"out_hidden_states": model(**inputs, added_cond_kwargs=added or None).sample}


def _qwen_image(model, graph: str, inputs: dict) -> dict:
    """``img_shapes`` goes in as diffusers takes it: per batch row, a list of (f, h, w)."""
    inputs = dict(inputs)
    shapes = [tuple(int(v) for v in row) for row in inputs.pop("img_shapes").tolist()]
    rows = [shapes] * inputs["hidden_states"].shape[0]
    return {"out_hidden_states": model(**inputs, img_shapes=rows).sample}


def _z_image(model, graph: str, inputs: dict) -> dict:
    """diffusers takes lists, as the Z-Image pipeline passes them: each latent as one frame
    ``[C, 1, H, W]``, each caption's masked-in tokens."""
    import torch

    mask = inputs["encoder_attention_mask"].bool()
    latents = list(inputs["hidden_states"].unsqueeze(2).unbind(0))
    captions = [s[m] for s, m in zip(inputs["encoder_hidden_states"], mask, strict=True)]
    patch = model.config.all_patch_size[0]  # the pipeline passes 2, the hub's one size
    out = model(latents, inputs["timestep"], captions, patch_size=patch, return_dict=False)[0]
    return {"out_hidden_states": torch.stack(out).squeeze(2)}


def _cogvideox(model, graph: str, inputs: dict) -> dict:
    rotary = None
    if "image_rotary_cos" in inputs:
        rotary = (inputs["image_rotary_cos"], inputs["image_rotary_sin"])
    out = model(
        hidden_states=inputs["hidden_states"],
        encoder_hidden_states=inputs["encoder_hidden_states"],
        timestep=inputs["timestep"],
        ofs=inputs.get("ofs"),
        image_rotary_emb=rotary,
    )
    return {"out_hidden_states": out.sample}


def _hunyuan_dit(model, graph: str, inputs: dict) -> dict:
    """``image_rotary_emb`` as the HunyuanDiT pipeline makes it for the latent's grid."""
    from diffusers.models.embeddings import get_2d_rotary_pos_embed
    from diffusers.pipelines.hunyuandit.pipeline_hunyuandit import (
        get_resize_crop_region_for_grid,
    )

    patch = model.config.patch_size
    grid = tuple(int(n) // patch for n in inputs["hidden_states"].shape[-2:])
    crops = get_resize_crop_region_for_grid(grid, 512 // 8 // patch)
    rotary = get_2d_rotary_pos_embed(model.inner_dim // model.num_heads, crops, grid)
    return {"out_hidden_states": model(**inputs, image_rotary_emb=rotary).sample}


def _ltx(model, graph: str, inputs: dict) -> dict:
    """The token grid and the rotary scale go in as the LTX pipeline passes them: numbers."""
    inputs = dict(inputs)
    frames, height, width = (int(v) for v in inputs.pop("video_shape"))
    scale = tuple(float(v) for v in inputs.pop("rope_interpolation_scale"))
    out = model(
        **inputs, num_frames=frames, height=height, width=width, rope_interpolation_scale=scale
    )
    return {"out_hidden_states": out.sample}


def _hidream(model, graph: str, inputs: dict) -> dict:
    """diffusers names the timestep input ``timesteps``."""
    inputs = dict(inputs)
    timesteps = inputs.pop("timestep")
    return {"out_hidden_states": model(**inputs, timesteps=timesteps).sample}


def _prior(model, graph: str, inputs: dict) -> dict:
    if graph == "post_process/model":
        return {"image_embeds": model.post_process_latents(inputs["latents"])}
    return {"out_hidden_states": model(**inputs).predicted_image_embedding}


def _stable_cascade(model, graph: str, inputs: dict) -> dict:
    """Stable Cascade's UNet takes the graph's inputs by their names (no sca, crp or pixels)."""
    return {"out_sample": model(**inputs).sample}


def _kandinsky3(model, graph: str, inputs: dict) -> dict:
    """Kandinsky 3's UNet takes the graph's inputs by their names (the mask is required)."""
    return {"out_sample": model(**inputs).sample}


def _ltx_vae(model, graph: str, inputs: dict) -> dict:
    """The decoder's ``noise.{i}`` stand for diffusers' ``torch.randn`` draws, in order."""
    from unittest import mock

    if graph == "latents/model":
        return {"mean": model.latents_mean, "std": model.latents_std}
    if graph != "decoder/model":
        return _vae(model, graph, inputs)
    draws = [inputs[f"noise.{i}"] for i in range(sum(k.startswith("noise.") for k in inputs))]
    pending = iter(draws)

    def randn(shape, **kwargs):
        noise = next(pending)
        assert tuple(noise.shape) == tuple(shape), f"noise {tuple(noise.shape)} for {shape}"
        return noise.to(kwargs.get("dtype") or noise.dtype)

    with mock.patch("torch.randn", randn):
        sample = model.decode(inputs["latent_sample"], inputs.get("timestep")).sample
    assert next(pending, None) is None, "the decoder drew fewer noises than the graph takes"
    return {"sample": sample}


def _t2i_adapter(model, graph: str, inputs: dict) -> dict:
    return {f"features.{i}": f for i, f in enumerate(model(inputs["condition"]))}


def _image_projection(model, graph: str, inputs: dict) -> dict:
    if "id_embeds" not in inputs:
        return {"image_prompt_embeds": model(inputs["image_embeds"])}
    # FaceID Plus: the image's states set on the layer, as diffusers' docs do; its face tokens
    model.clip_embeds, model.shortcut = inputs["image_embeds"][:, None], False
    face = model.proj(inputs["id_embeds"]).reshape(-1, model.num_tokens, model.embed_dim)
    return {"image_prompt_embeds": model(inputs["id_embeds"]), "id_prompt_embeds": model.norm(face)}


#: Registered classes diffusers does not export at its top level: the module that holds each.
DIFFUSERS_MODULES = {
    "PaellaVQModel": "diffusers.pipelines.deprecated.wuerstchen.modeling_paella_vq_model",
}


def diffusers_class(class_name: str):
    """diffusers' class of a registered key (``diffusers.<name>``, or :data:`DIFFUSERS_MODULES`)."""
    import importlib

    import diffusers

    module = DIFFUSERS_MODULES.get(class_name)
    return getattr(importlib.import_module(module) if module else diffusers, class_name)


#: Each registered class: the diffusers call a graph stands for,
#: ``call(model, graph_path, torch_inputs) -> {output name: tensor}``.
DIFFUSERS_CALLS: dict[str, Callable] = {
    "AutoencoderKL": _vae,
    "AutoencoderKLCogVideoX": _vae,
    "AutoencoderKLFlux2": _flux2_vae,
    "AutoencoderKLWan": _wan_vae,
    "AutoencoderKLQwenImage": _wan_vae,
    "AutoencoderKLLTXVideo": _ltx_vae,
    "AutoencoderKLHunyuanVideo": _vae,
    "AutoencoderKLMochi": _vae,
    "AutoencoderDC": _deterministic_vae,
    "AutoencoderTiny": _tiny_vae,
    "AutoencoderKLTemporalDecoder": _temporal_vae,
    "VQModel": _vq_vae,
    "UNet2DConditionModel": _unet,
    "UNet2DModel": _unet_2d,
    "UNetSpatioTemporalConditionModel": _svd_unet,
    "UNetMotionModel": _unet_motion,
    "ControlNetModel": _controlnet,
    "SD3ControlNetModel": _transformer_controlnet,
    "FluxControlNetModel": _transformer_controlnet,
    "QwenImageControlNetModel": _transformer_controlnet,
    "SanaControlNetModel": _transformer_controlnet,
    "SD3Transformer2DModel": _transformer,
    "FluxTransformer2DModel": _transformer,
    "Flux2Transformer2DModel": _transformer,
    "ChromaTransformer2DModel": _transformer,
    "AuraFlowTransformer2DModel": _transformer,
    "DiTTransformer2DModel": _transformer,
    "PixArtTransformer2DModel": _pixart,
    "SanaTransformer2DModel": _transformer,
    "Lumina2Transformer2DModel": _transformer,
    "ZImageTransformer2DModel": _z_image,
    "CogView4Transformer2DModel": _transformer,
    "CogView3PlusTransformer2DModel": _transformer,
    "HunyuanDiT2DModel": _hunyuan_dit,
    "HiDreamImageTransformer2DModel": _hidream,
    "CogVideoXTransformer3DModel": _cogvideox,
    "WanTransformer3DModel": _transformer,
    "WanVACETransformer3DModel": _transformer,
    "SkyReelsV2Transformer3DModel": _skyreels_v2,
    "MochiTransformer3DModel": _transformer,
    "HunyuanVideoTransformer3DModel": _transformer,
    "QwenImageTransformer2DModel": _qwen_image,
    "LTXVideoTransformer3DModel": _ltx,
    "PriorTransformer": _prior,
    "StableCascadeUNet": _stable_cascade,
    "Kandinsky3UNet": _kandinsky3,
    "PaellaVQModel": _vq_vae,
    "T2IAdapter": _t2i_adapter,
    "IPAdapterImageProjection": _image_projection,
}
