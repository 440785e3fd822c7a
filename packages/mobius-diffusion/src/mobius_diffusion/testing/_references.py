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


def _deterministic_vae(model, graph: str, inputs: dict) -> dict:
    """An autoencoder with no latent distribution (``AutoencoderDC``)."""
    if graph == "encoder/model":
        return {"latent": model.encode(inputs["sample"]).latent}
    return {"sample": model.decode(inputs["latent_sample"]).sample}


def _unet(model, graph: str, inputs: dict) -> dict:
    added = {k: inputs[k] for k in ("text_embeds", "time_ids") if k in inputs}
    sample = inputs["sample"], inputs["timestep"], inputs["encoder_hidden_states"]
    out = model(
        *sample,
        timestep_cond=inputs.get("timestep_cond"),
        added_cond_kwargs=added or None,
        **_unet_residuals(inputs),
    )
    return {"out_sample": out.sample}


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


def _transformer(model, graph: str, inputs: dict) -> dict:
    """SD3, Flux, DiT and Wan take the graph's inputs by their names."""
    return {"out_hidden_states": model(**inputs).sample}


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


def _t2i_adapter(model, graph: str, inputs: dict) -> dict:
    return {f"features.{i}": f for i, f in enumerate(model(inputs["condition"]))}


def _image_projection(model, graph: str, inputs: dict) -> dict:
    return {"image_prompt_embeds": model(inputs["image_embeds"])}


#: Each registered class: the diffusers call a graph stands for,
#: ``call(model, graph_path, torch_inputs) -> {output name: tensor}``.
DIFFUSERS_CALLS: dict[str, Callable] = {
    "AutoencoderKL": _vae,
    "AutoencoderKLCogVideoX": _vae,
    "AutoencoderKLWan": _vae,
    "AutoencoderKLQwenImage": _vae,
    "AutoencoderDC": _deterministic_vae,
    "UNet2DConditionModel": _unet,
    "ControlNetModel": _controlnet,
    "SD3Transformer2DModel": _transformer,
    "FluxTransformer2DModel": _transformer,
    "ChromaTransformer2DModel": _transformer,
    "AuraFlowTransformer2DModel": _transformer,
    "DiTTransformer2DModel": _transformer,
    "PixArtTransformer2DModel": _pixart,
    "SanaTransformer2DModel": _transformer,
    "Lumina2Transformer2DModel": _transformer,
    "CogView4Transformer2DModel": _transformer,
    "CogVideoXTransformer3DModel": _cogvideox,
    "WanTransformer3DModel": _transformer,
    "QwenImageTransformer2DModel": _qwen_image,
    "T2IAdapter": _t2i_adapter,
    "IPAdapterImageProjection": _image_projection,
}
