"""The diffusion contracts: one graph per component role, its inputs declared by the component.

mobius-diffusion registers them (:func:`mobius_diffusion.plugin.register_slice`).

A diffusion component's inputs differ by family (SDXL's UNet takes added
conditioning, Flux's transformer takes position ids and guidance), so the module
declares each graph's inputs and outputs as :class:`GraphSpec`s from
``graph_specs()``, keyed by the graph's path in the package; the task checks the
paths and names against its contract and builds them. Inputs are float in the
build dtype unless a spec says otherwise; every output is in the build dtype.
Dynamic axes are named: ``batch``, ``height``/``width`` (pixels),
``latent_height``/``latent_width``, ``sequence`` (text tokens), ``frames``.

``vae`` (:class:`VAETask`), an autoencoder:
    ``encoder/model.onnx``: ``sample`` [batch, channels, height, width] ->
    ``latent_parameters`` [batch, 2 * latent_channels, latent_height, latent_width]
    (the mean and log-variance of the latent distribution, concatenated on the
    channels, before any scaling factor), or ``latent`` [batch, latent_channels,
    latent_height, latent_width] for an autoencoder with no distribution (the DC-AE,
    TAESD: the latent itself, before any scaling factor); ``decoder/model.onnx``: ``latent_sample``
    [batch, latent_channels, latent_height, latent_width] -> ``sample``. A video VAE
    adds a ``frames`` axis after the channels. Flux.2's adds ``bn/model.onnx``: no
    inputs -> ``running_mean``, ``running_var`` (its patchified latents' statistics).
    Wan's (and Qwen-Image's) VAE adds ``decoder_step/model``, one step of the frame-by-frame
    decode: ``latent_sample`` and ``past_frames.{i}`` -> ``sample`` and ``present_frames.{i}``.
    LTX-Video's decoder may add ``timestep`` [batch] and ``noise.{i}``; its VAE adds
    ``latents/model.onnx``: no inputs -> ``mean``, ``std`` (its ``latents_mean``/``_std``).

``denoising`` (:class:`DenoisingTask`), the UNet or transformer of a pipeline:
    ``model.onnx``: ``sample`` (UNet) or ``hidden_states`` (transformers), ``timestep``
    [batch] and the family's conditioning (``encoder_hidden_states``, ``text_embeds``,
    ``time_ids``, ``pooled_projections``, ``img_ids``, ``txt_ids``, ``guidance``...)
    -> ``out_sample`` (UNet) or ``out_hidden_states`` (transformers).

``controlnet`` (:class:`ControlNetTask`):
    ``model.onnx``: the denoiser's inputs plus ``controlnet_cond`` (and
    ``conditioning_scale``) -> the residuals the denoiser adds: a UNet's
    ``down_block_res_samples.{i}`` and ``mid_block_res_sample``; a transformer's
    ``controlnet_block_samples.{i}`` (one per ControlNet block, image tokens) and
    Flux's ``controlnet_single_block_samples.{i}``.

``adapter`` (:class:`AdapterTask`): a T2I-Adapter (``condition`` image ->
    ``features.{i}``, one per UNet resolution) or an IP-Adapter image projection
    (``image_embeds`` -> ``image_prompt_embeds``; FaceID Plus also ``id_embeds`` ->
    ``id_prompt_embeds``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import onnx_ir as ir

from mobius.errors import ConfigError
from mobius.tasks import IR_VERSION, ModelTask, set_output


@dataclass
class GraphSpec:
    """One graph of a component: its inputs, outputs and the call that builds it.

    ``inputs`` maps a name to ``(dtype, shape)`` (``None``: the build dtype);
    ``outputs`` maps a name to its shape; ``forward(op, **inputs)`` returns a dict
    holding every output.
    """

    inputs: dict[str, tuple[ir.DataType | None, list]]
    outputs: dict[str, list]
    forward: Callable


class DiffusionComponentTask(ModelTask):
    """Builds the graphs a component declares; subclasses state which paths and names are allowed."""

    #: graph path -> (allowed input names, allowed output names); ``None`` allows any.
    contract: dict[str, tuple[frozenset[str] | None, frozenset[str] | None]] = {}

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        specs = module.graph_specs()
        models = {}
        for path, spec in specs.items():
            self._check(path, spec)
            graph, builder = self.new_graph(path.replace("/", "_"))
            values = {
                name: builder.input(name, input_dtype or dtype, shape)
                for name, (input_dtype, shape) in spec.inputs.items()
            }
            outputs = spec.forward(builder.op, **values)
            missing = set(spec.outputs) - set(outputs)
            if missing:
                raise ValueError(f"{type(module).__name__} did not return {sorted(missing)}")
            for name, shape in spec.outputs.items():
                set_output(builder, outputs[name], name, dtype, shape)
            models[path] = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
        return models

    def _check(self, path: str, spec: GraphSpec) -> None:
        if path not in self.contract:
            raise ValueError(
                f"task {self.name} has no graph {path!r}; it has {sorted(self.contract)}"
            )
        allowed_inputs, allowed_outputs = self.contract[path]
        for kind, names, allowed in (
            ("input", spec.inputs, allowed_inputs),
            ("output", spec.outputs, allowed_outputs),
        ):
            unknown = [
                n for n in names if allowed is not None and n not in allowed and "." not in n
            ]
            if unknown:
                raise ValueError(
                    f"task {self.name}, {path}: {kind}s {unknown} are not in its contract"
                )


class VAETask(DiffusionComponentTask):
    """``encoder/model`` and ``decoder/model`` of an autoencoder; see the module docstring."""

    name = "vae"
    contract = {
        "encoder/model": (frozenset({"sample"}), frozenset({"latent_parameters", "latent"})),
        # LTX-Video 0.9.1+'s decoder takes a decode timestep (and noise.{i}, if it injects noise)
        "decoder/model": (frozenset({"latent_sample", "timestep"}), frozenset({"sample"})),
        # Wan's frame-by-frame decode: also past_frames.{i} -> present_frames.{i} (its caches)
        "decoder_step/model": (frozenset({"latent_sample"}), frozenset({"sample"})),
        # LTX-Video's latent statistics, which its pipelines read (no inputs)
        "latents/model": (frozenset(), frozenset({"mean", "std"})),
        # Flux.2's latent batch-norm statistics, which its pipelines read (no inputs)
        "bn/model": (frozenset(), frozenset({"running_mean", "running_var"})),
    }


#: The build option (``--unet-residuals``) giving a UNet a ControlNet's or a T2I-Adapter's inputs.
UNET_RESIDUALS_OPTION = "unet_residuals"
UNET_RESIDUALS = ("controlnet", "adapter")
#: The build option (``--ip-adapter FILE``) giving a UNet an IP-Adapter's image attention.
IP_ADAPTER_OPTION = "ip_adapter"


class DenoisingTask(DiffusionComponentTask):
    """The denoiser's graph; its conditioning inputs are the family's. A prior (``PriorTransformer``)
    adds ``post_process/model``: its final ``latents`` -> ``image_embeds``."""

    name = "denoising"
    contract = {
        "model": (None, frozenset({"out_sample", "out_hidden_states"})),
        "post_process/model": (frozenset({"latents"}), frozenset({"image_embeds"})),
    }

    def configure(self, config, options, source):
        """Apply ``--unet-residuals`` and ``--ip-adapter`` (a UNet's config fields
        ``residuals`` and ``ip_adapter``)."""
        config = super().configure(config, options, source)
        ip_adapter = options.plugin.get(IP_ADAPTER_OPTION)
        if ip_adapter is not None:
            from mobius_diffusion.models._ip_adapter_attention import check_ip_adapter

            if source.entry.key != "UNet2DConditionModel":
                raise ConfigError(
                    f"--ip-adapter applies to UNet2DConditionModel; {source.entry.key} is not one"
                )
            if not Path(ip_adapter).is_file():
                raise ConfigError(f"--ip-adapter {ip_adapter}: no such file")
            check_ip_adapter(config)
            config = replace(config, ip_adapter=str(ip_adapter))
        residuals = options.plugin.get(UNET_RESIDUALS_OPTION)
        if residuals is None:
            return config
        if residuals not in UNET_RESIDUALS:
            raise ConfigError(
                f"--unet-residuals {residuals!r}: expected one of {', '.join(UNET_RESIDUALS)}"
            )
        if not hasattr(config, "residuals"):
            raise ConfigError(
                f"--unet-residuals applies to UNet2DConditionModel; {source.entry.key} is not one"
            )
        return replace(config, residuals=residuals)


class ControlNetTask(DiffusionComponentTask):
    """The ControlNet's one graph: residuals for the UNet's down blocks and mid block, or for a
    transformer's blocks."""

    name = "controlnet"
    # + down_block_res_samples.{i} (UNet), controlnet_block_samples.{i} (transformers),
    # controlnet_single_block_samples.{i} (Flux)
    contract = {"model": (None, frozenset({"mid_block_res_sample"}))}


class AdapterTask(DiffusionComponentTask):
    """A T2I-Adapter's features or an IP-Adapter's image prompt embeddings."""

    name = "adapter"
    contract = {
        "model": (
            frozenset({"condition", "image_embeds", "id_embeds"}),
            frozenset({"image_prompt_embeds", "id_prompt_embeds"}),
        )
    }  # + features.{i}
