"""Run a built diffusion pipeline with ONNX Runtime and numpy: text to image, no torch, no diffusers.

A package is what ``mobius build --model <pipeline>`` writes (see the README): one
folder per component (``unet/model.onnx``, ``vae/decoder/model.onnx``,
``text_encoder/model.onnx``, ``tokenizer/``, ``scheduler/``) and ``model_index.json``,
whose ``_class_name`` picks the runner:

- ``StableDiffusionPipeline``: :class:`StableDiffusionRunner` (CLIP text encoder,
  UNet with classifier-free guidance, VAE decoder);
- ``StableDiffusionXLPipeline``: :class:`StableDiffusionXLRunner` (two CLIP encoders'
  penultimate states, pooled text and size conditioning of the UNet);
- ``FluxPipeline``: :class:`FluxRunner` (CLIP pooled and T5 states, packed latents,
  flow-matching steps with the resolution-dependent shift, guidance embedding).

Each runner follows its diffusers pipeline step by step, with the scheduler of
``scheduler/scheduler_config.json`` ported to numpy (:mod:`mobius_diffusion.schedulers`),
so the same initial latents give the same image. Example::

    from mobius_diffusion.pipeline import open_pipeline

    pipe = open_pipeline("sd-onnx/")
    images = pipe("a red bicycle", num_inference_steps=20, seed=0)  # [1, H, W, 3] in [0, 1]
    to_pil(images)[0].save("bicycle.png")

Needs ONNX Runtime and transformers' tokenizers (``pip install mobius-core[run]``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mobius.errors import ConfigError, MobiusError
from mobius_diffusion.schedulers import load_scheduler

__all__ = [
    "FluxRunner",
    "PipelineRunner",
    "StableDiffusionRunner",
    "StableDiffusionXLRunner",
    "is_image_package",
    "open_pipeline",
    "to_pil",
]

_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


class PipelineRunner:
    """What every runner shares: the package's configs, sessions, tokenizers and scheduler.

    ``progress`` (off by default; ``mobius generate`` turns it on) shows a bar over the
    denoising steps when stderr is a terminal.
    """

    progress = False

    def __init__(
        self,
        package_dir: str | os.PathLike,
        *,
        threads: int | None = None,
        providers: Sequence[str] | None = None,
    ) -> None:
        self.package_dir = Path(package_dir)
        self.index = _read_json(self.package_dir / "model_index.json")
        self._threads, self._providers = threads, providers
        self._sessions: dict[str, object] = {}
        self.scheduler_config = _read_json(self.package_dir / "scheduler" / "scheduler_config.json")
        load_scheduler(self.scheduler_config)  # an unported scheduler is refused at once

    def steps(self, timesteps):
        """``timesteps`` to iterate, behind a progress bar when :attr:`progress` is on."""
        from tqdm.auto import tqdm

        shown = self.progress and sys.stderr.isatty()
        return tqdm(timesteps, desc="denoising", unit="step", leave=False, disable=not shown)

    def config(self, component: str) -> dict:
        """A component's ``config.json``."""
        return _read_json(self.package_dir / component / "config.json")

    def session(self, graph: str):
        """The ONNX Runtime session of ``<graph>.onnx`` (``"unet/model"``), opened once."""
        if graph not in self._sessions:
            from mobius.generate import _import_onnxruntime

            ort = _import_onnxruntime()
            path = self.package_dir / f"{graph}.onnx"
            if not path.is_file():
                raise MobiusError(f"no {graph}.onnx in {self.package_dir}: not a built pipeline")
            options = ort.SessionOptions()
            if self._threads:
                options.intra_op_num_threads = int(self._threads)
            providers = list(self._providers or ["CPUExecutionProvider"])
            self._sessions[graph] = ort.InferenceSession(str(path), options, providers=providers)
        return self._sessions[graph]

    def run(self, graph: str, feeds: dict[str, np.ndarray], output: str) -> np.ndarray:
        """One output of ``graph`` in float32; float feeds are cast to the graph's input types."""
        return self.run_outputs(graph, feeds, [output])[0]

    def outputs(self, graph: str) -> list[str]:
        """The output names of ``graph``."""
        return [o.name for o in self.session(graph).get_outputs()]

    def run_outputs(
        self, graph: str, feeds: dict[str, np.ndarray], outputs: list[str]
    ) -> list[np.ndarray]:
        """Several outputs of one run of ``graph``, in float32 (see :meth:`run`)."""
        session = self.session(graph)
        inputs = {i.name: i for i in session.get_inputs()}
        unknown = sorted(set(inputs) - set(feeds))
        if unknown:
            raise ConfigError(f"{graph}.onnx takes inputs this runner does not feed: {unknown}")
        cast = {
            name: value.astype(_NUMPY_TYPES.get(inputs[name].type, value.dtype))
            if value.dtype.kind == "f"
            else value
            for name, value in feeds.items()
            if name in inputs
        }
        return [value.astype(np.float32) for value in session.run(outputs, cast)]

    def tokenize(self, component: str, prompts: list[str], max_length: int) -> np.ndarray:
        """``input_ids`` [batch, max_length], padded to the length and truncated, as diffusers does."""
        tokenizer = self.tokenizer(component)
        ids = tokenizer(prompts, padding="max_length", max_length=max_length, truncation=True)[
            "input_ids"
        ]
        return np.asarray(ids, dtype=np.int64)

    def tokenizer(self, component: str):
        """The tokenizer in folder ``component`` (``transformers.AutoTokenizer``), loaded once."""
        key = f"tokenizer:{component}"
        if key not in self._sessions:
            from transformers import AutoTokenizer

            self._sessions[key] = AutoTokenizer.from_pretrained(
                str(self.package_dir / component), trust_remote_code=False
            )
        return self._sessions[key]

    def vae_scale_factor(self) -> int:
        return 2 ** (len(self.config("vae")["block_out_channels"]) - 1)

    def decode(self, latents: np.ndarray) -> np.ndarray:
        """VAE-decoded images ``[batch, H, W, 3]`` in [0, 1] (diffusers' ``output_type="np"``)."""
        image = self.run("vae/decoder/model", {"latent_sample": latents}, "sample")
        image = np.clip(image / 2 + 0.5, 0, 1)
        return image.transpose(0, 2, 3, 1)

    @staticmethod
    def initial_noise(shape: tuple[int, ...], seed: int | None) -> np.ndarray:
        """Standard normal float32 noise from ``numpy.random.default_rng(seed)``."""
        return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


class StableDiffusionRunner(PipelineRunner):
    """``StableDiffusionPipeline``: CLIP text encoder, UNet with classifier-free guidance, VAE.

    A variant changes :meth:`conditioning` (the UNet's text feeds) and
    :meth:`unscale_latents`; the denoising loop is shared.
    """

    default_guidance_scale = 7.5

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        unet = self.config("unet")
        if unet.get("time_cond_proj_dim") is not None:
            raise ConfigError("a UNet with time_cond_proj_dim (LCM guidance embedding) is not run")

    def encode(self, prompts: list[str]) -> np.ndarray:
        """CLIP ``last_hidden_state`` of each prompt, padded to the tokenizer's length."""
        tokenizer = self.tokenizer("tokenizer")
        ids = self.tokenize("tokenizer", prompts, tokenizer.model_max_length)
        mask = np.ones_like(ids)  # diffusers passes no mask unless use_attention_mask
        if self.config("text_encoder").get("use_attention_mask"):
            length = ids.shape[1]
            encoded = tokenizer(prompts, padding="max_length", max_length=length, truncation=True)
            mask = np.asarray(encoded["attention_mask"], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        return self.run("text_encoder/model", feeds, "last_hidden_state")

    def conditioning(
        self, prompts: list[str], negative_prompt, guided: bool, height: int, width: int
    ) -> dict[str, np.ndarray]:
        """The UNet's conditioning feeds (``encoder_hidden_states``), negative rows first if guided."""
        embeds = self.encode(prompts)
        if guided:
            negatives = _negatives(negative_prompt, len(prompts))
            embeds = np.concatenate([self.encode(negatives), embeds])
        return {"encoder_hidden_states": embeds}

    def unscale_latents(self, latents: np.ndarray) -> np.ndarray:
        """The final latents as the VAE decoder takes them: divided by its ``scaling_factor``."""
        return latents / np.float32(self.config("vae").get("scaling_factor", 0.18215))

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        **options,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``guidance_scale`` defaults to the pipeline's (:attr:`default_guidance_scale`).
        ``latents`` [batch, channels, H/8, W/8] replaces the seeded noise (before the
        scheduler's ``init_noise_sigma`` scaling, as diffusers takes them). ``options``
        go to :meth:`conditioning` (SDXL's ``prompt_2``, ``original_size``...).
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        unet = self.config("unet")
        factor = self.vae_scale_factor()
        height = height or unet["sample_size"] * factor
        width = width or unet["sample_size"] * factor
        if guidance_scale is None:
            guidance_scale = self.default_guidance_scale
        guided = guidance_scale > 1
        conditioning = self.conditioning(prompts, negative_prompt, guided, height, width, **options)
        scheduler = load_scheduler(self.scheduler_config)
        scheduler.set_timesteps(num_inference_steps)
        shape = (len(prompts), unet["in_channels"], height // factor, width // factor)
        if latents is None:
            latents = self.initial_noise(shape, seed)
        latents = (latents * np.float32(scheduler.init_noise_sigma)).astype(np.float32)
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            model_input = scheduler.scale_model_input(model_input, t)
            timestep = np.full(model_input.shape[0], t, dtype=np.float32)
            feeds = {"sample": model_input, "timestep": timestep, **conditioning}
            noise = self.run("unet/model", feeds, "out_sample")
            if guided:
                uncond, text = np.split(noise, 2)
                noise = uncond + np.float32(guidance_scale) * (text - uncond)
            latents = scheduler.step(noise, t, latents)
        return self.decode(self.unscale_latents(latents))


class StableDiffusionXLRunner(StableDiffusionRunner):
    """``StableDiffusionXLPipeline``: two CLIP encoders, pooled text and size conditioning.

    Each text encoder's ``penultimate_hidden_state`` (``hidden_states[-2]``), side by
    side, is the cross-attention context; ``text_embeds`` of the projecting encoder
    (``text_encoder_2``) and ``time_ids`` (original size, crop corner, target size)
    feed the UNet's added embedding. With ``force_zeros_for_empty_prompt`` (the
    default) and no ``negative_prompt``, the unconditional rows are zeros, as in
    diffusers. Conditioning options: ``prompt_2``, ``negative_prompt_2`` (the second
    encoder's texts, by default the first's), ``original_size`` and ``target_size``
    (``(height, width)``, by default the image's), ``crops_coords_top_left`` (``(0, 0)``).
    No invisible watermark is applied.
    """

    default_guidance_scale = 5.0

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        if not _listed(self.index, "text_encoder_2"):
            raise ConfigError(
                "an SDXL pipeline without text_encoder_2 (its pooled text) is not run"
            )
        added = self.config("unet").get("addition_embed_type")
        if added != "text_time":
            raise ConfigError(
                f"an SDXL pipeline's UNet takes addition_embed_type text_time; this one {added!r}"
            )

    def text_encoders(self) -> list[tuple[str, str]]:
        """``(tokenizer, text encoder)`` folders in diffusers' order; ``text_encoder`` may be absent."""
        pairs = [("tokenizer", "text_encoder"), ("tokenizer_2", "text_encoder_2")]
        return [pair for pair in pairs if _listed(self.index, pair[1])]

    def encode(self, prompts: list[str], prompts_2: list[str] | None = None):
        """``(states [batch, seq, d1 + d2], pooled [batch, projection])`` for the two encoders' texts.

        As diffusers: no attention mask, each encoder's ``penultimate_hidden_state``
        concatenated on the last axis, the first ``text_embeds`` as the pooled text.
        """
        states, pooled = [], None
        # With text_encoder absent, text_encoder_2 reads the first texts, as diffusers zips them.
        texts_per_encoder = zip(self.text_encoders(), (prompts, prompts_2 or prompts), strict=False)
        for (tokenizer, encoder), texts in texts_per_encoder:
            ids = self.tokenize(tokenizer, texts, self.tokenizer(tokenizer).model_max_length)
            graph = f"{encoder}/model"
            names = ["penultimate_hidden_state"]
            if pooled is None and "text_embeds" in self.outputs(graph):
                names.append("text_embeds")
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            state, *rest = self.run_outputs(graph, feeds, names)
            states.append(state)
            pooled = rest[0] if rest else pooled
        if pooled is None:
            raise ConfigError(
                "SDXL pools text_embeds of a CLIPTextModelWithProjection; no text encoder gives it"
            )
        return np.concatenate(states, axis=-1), pooled

    def conditioning(
        self,
        prompts: list[str],
        negative_prompt,
        guided: bool,
        height: int,
        width: int,
        *,
        prompt_2: str | list[str] | None = None,
        negative_prompt_2: str | list[str] | None = None,
        original_size: tuple[int, int] | None = None,
        crops_coords_top_left: tuple[int, int] = (0, 0),
        target_size: tuple[int, int] | None = None,
    ) -> dict[str, np.ndarray]:
        """``encoder_hidden_states``, ``text_embeds`` and ``time_ids``, negative rows first if guided."""
        batch = len(prompts)
        second = _negatives(prompt_2, batch) if prompt_2 else None  # "" is the first prompt too
        embeds, pooled = self.encode(prompts, second)
        if guided:
            if negative_prompt is None and self.index.get("force_zeros_for_empty_prompt", True):
                negative, negative_pooled = np.zeros_like(embeds), np.zeros_like(pooled)
            else:
                negatives = _negatives(negative_prompt, batch)
                negatives_2 = _negatives(negative_prompt_2, batch) if negative_prompt_2 else None
                negative, negative_pooled = self.encode(negatives, negatives_2 or negatives)
            embeds = np.concatenate([negative, embeds])
            pooled = np.concatenate([negative_pooled, pooled])
        sizes = [*(original_size or (height, width)), *crops_coords_top_left]
        sizes += [*(target_size or (height, width))]
        unet = self.config("unet")
        expected = unet.get("projection_class_embeddings_input_dim")
        given = unet.get("addition_time_embed_dim", 0) * len(sizes) + pooled.shape[-1]
        if expected != given:
            raise ConfigError(
                f"the UNet's added embedding takes {expected} features; the pooled text and "
                f"{len(sizes)} size ids give {given}"
            )
        time_ids = np.tile(np.asarray(sizes, dtype=np.float32), (embeds.shape[0], 1))
        return {"encoder_hidden_states": embeds, "text_embeds": pooled, "time_ids": time_ids}

    def unscale_latents(self, latents: np.ndarray) -> np.ndarray:
        """Divided by ``scaling_factor``; with the VAE's ``latents_mean``/``latents_std``, de-normalised."""
        vae = self.config("vae")
        mean, std = vae.get("latents_mean"), vae.get("latents_std")
        if mean is None or std is None:
            return super().unscale_latents(latents)
        mean = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
        std = np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
        return latents * std / np.float32(vae["scaling_factor"]) + mean


def calculate_shift(
    image_seq_len: int,
    base_seq_len: int = 256,
    max_seq_len: int = 4096,
    base_shift: float = 0.5,
    max_shift: float = 1.15,
) -> float:
    """Flux's ``mu``: the time shift grows linearly with the number of image tokens."""
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    b = base_shift - m * base_seq_len
    return image_seq_len * m + b


def pack_latents(latents: np.ndarray) -> np.ndarray:
    """[batch, C, H, W] -> [batch, (H/2)(W/2), 4C]: 2x2 patches as tokens."""
    b, c, h, w = latents.shape
    x = latents.reshape(b, c, h // 2, 2, w // 2, 2).transpose(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // 2) * (w // 2), c * 4)


def unpack_latents(latents: np.ndarray, height: int, width: int) -> np.ndarray:
    """The inverse of :func:`pack_latents` for a latent grid ``height`` x ``width``."""
    b, _, channels = latents.shape
    x = latents.reshape(b, height // 2, width // 2, channels // 4, 2, 2).transpose(0, 3, 1, 4, 2, 5)
    return x.reshape(b, channels // 4, height, width)


def latent_image_ids(height: int, width: int) -> np.ndarray:
    """[(height)(width), 3]: 0, row, column of each packed token."""
    ids = np.zeros((height, width, 3), dtype=np.float32)
    ids[..., 1] += np.arange(height)[:, None]
    ids[..., 2] += np.arange(width)[None, :]
    return ids.reshape(height * width, 3)


class FluxRunner(PipelineRunner):
    """``FluxPipeline``: CLIP pooled + T5 conditioning, packed latents, flow-matching Euler steps."""

    def encode(self, prompts: list[str], max_sequence_length: int):
        """``(T5 states [batch, seq, d], CLIP pooled [batch, d'])``, as diffusers feeds them (no masks)."""
        clip_length = self.tokenizer("tokenizer").model_max_length
        ids = self.tokenize("tokenizer", prompts, clip_length)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        pooled = self.run("text_encoder/model", feeds, "pooler_output")
        ids = self.tokenize("tokenizer_2", prompts, max_sequence_length)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        return self.run("text_encoder_2/model", feeds, "last_hidden_state"), pooled

    def __call__(
        self,
        prompt: str | list[str],
        *,
        num_inference_steps: int = 28,
        guidance_scale: float = 3.5,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int = 512,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` may be given packed ([batch, tokens, 4C], as diffusers takes them)
        in place of the seeded noise; ``guidance_scale`` feeds the guidance embedding
        of a guidance-distilled transformer (FLUX.1-dev) and is unused otherwise.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        transformer = self.config("transformer")
        factor = self.vae_scale_factor()
        height = height or 128 * factor
        width = width or 128 * factor
        text, pooled = self.encode(prompts, max_sequence_length)
        text_ids = np.zeros((text.shape[1], 3), dtype=np.float32)
        grid_h, grid_w = 2 * (height // (factor * 2)), 2 * (width // (factor * 2))
        if latents is None:
            channels = transformer["in_channels"] // 4
            latents = pack_latents(
                self.initial_noise((len(prompts), channels, grid_h, grid_w), seed)
            )
        latents = latents.astype(np.float32)
        image_ids = latent_image_ids(grid_h // 2, grid_w // 2)

        scheduler = load_scheduler(self.scheduler_config)
        c = scheduler.config
        mu = calculate_shift(
            latents.shape[1],
            c.get("base_image_seq_len", 256),
            c.get("max_image_seq_len", 4096),
            c.get("base_shift", 0.5),
            c.get("max_shift", 1.15),
        )
        sigmas = np.linspace(1.0, 1 / num_inference_steps, num_inference_steps)
        scheduler.set_timesteps(sigmas=sigmas, mu=mu)
        batch = latents.shape[0]
        feeds = {
            "encoder_hidden_states": text,
            "pooled_projections": pooled,
            "img_ids": image_ids,
            "txt_ids": text_ids,
            "guidance": np.full(batch, guidance_scale, dtype=np.float32),
        }
        if "guidance" not in {i.name for i in self.session("transformer/model").get_inputs()}:
            del feeds["guidance"]
        for t in self.steps(scheduler.timesteps):
            timestep = np.full(batch, t, dtype=np.float32) / np.float32(1000)
            feeds.update(hidden_states=latents, timestep=timestep)
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            latents = scheduler.step(noise, t, latents)
        vae = self.config("vae")
        latents = unpack_latents(latents, grid_h, grid_w)
        latents = latents / np.float32(vae["scaling_factor"]) + np.float32(
            vae.get("shift_factor") or 0
        )
        return self.decode(latents.astype(np.float32))


#: Runners by the diffusers pipeline class they stand for.
RUNNERS: dict[str, type[PipelineRunner]] = {
    "StableDiffusionPipeline": StableDiffusionRunner,
    "StableDiffusionXLPipeline": StableDiffusionXLRunner,
    "FluxPipeline": FluxRunner,
}


def is_image_package(package_dir: str | os.PathLike) -> bool:
    """Whether a directory is a built pipeline package (it has ``model_index.json``)."""
    return (Path(package_dir) / "model_index.json").is_file()


def open_pipeline(package_dir: str | os.PathLike, **options) -> PipelineRunner:
    """The runner of a built pipeline package, by its ``model_index.json`` ``_class_name``.

    ``options``: ``threads`` (ONNX Runtime intra-op threads), ``providers``.

    Raises:
        ConfigError: a pipeline class or scheduler mobius does not run.
        MobiusError: not a pipeline package.
    """
    package = Path(package_dir)
    if not is_image_package(package):
        raise MobiusError(f"{package} has no model_index.json: not a built diffusion pipeline")
    name = _read_json(package / "model_index.json").get("_class_name")
    if name not in RUNNERS:
        raise ConfigError(
            f"mobius runs {', '.join(sorted(RUNNERS))} packages; {package} is a {name}"
        )
    return RUNNERS[name](package, **options)


def to_pil(images: np.ndarray) -> list:
    """PIL images from ``[batch, H, W, 3]`` floats in [0, 1] (rounded as diffusers rounds)."""
    from PIL import Image

    return [Image.fromarray((image * 255).round().astype(np.uint8)) for image in images]


def _negatives(negative_prompt: str | list[str] | None, batch: int) -> list[str]:
    """One (negative) prompt per prompt; none is the empty prompt, as diffusers takes it."""
    negative = negative_prompt if negative_prompt is not None else ""
    return [negative] * batch if isinstance(negative, str) else list(negative)


def _listed(index: dict, component: str) -> bool:
    """Whether ``model_index.json`` lists ``component`` (``[library, class]``, not ``[null, null]``)."""
    value = index.get(component)
    return isinstance(value, list) and bool(value) and value[0] is not None


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MobiusError(f"unreadable {path}: {exc}") from None
    if not isinstance(data, dict):
        raise MobiusError(f"{path} is not a JSON object")
    return data
