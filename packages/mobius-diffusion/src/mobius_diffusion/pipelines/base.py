"""What every pipeline runner shares: the package's configs, ONNX Runtime sessions, tokenizers and scheduler.

A runner subclasses :class:`PipelineRunner` and follows its diffusers pipeline
step by step; see :mod:`mobius_diffusion.pipeline` for the package layout.
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
from mobius_diffusion.tiling import decode_stepwise, decode_tiled, tile_plan

_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
#: Graphs run many times on inputs of changing sizes and kept between runs (Wan's decoder
#: step and its caches): ONNX Runtime's CPU arena kept growing over their runs (measured:
#: 5.5 to 6.6 GB over 5 steps at 240 x 416, where without it a step peaks at 4.4 GB).
NO_ARENA_GRAPHS = frozenset({"vae/decoder_step/model"})


class PipelineRunner:
    """What every runner shares: the package's configs, sessions, tokenizers and scheduler.

    ``progress`` (off by default; ``mobius generate`` turns it on) shows a bar over the
    denoising steps when stderr is a terminal.
    """

    progress = False
    #: Decode large latents in overlapping tiles (``mobius generate --vae-tiling``), as
    #: diffusers' ``vae.enable_tiling()`` does: see :mod:`mobius_diffusion.tiling`.
    vae_tiling = False

    def __init__(
        self,
        package_dir: str | os.PathLike,
        *,
        threads: int | None = None,
        providers: Sequence[str] | None = None,
    ) -> None:
        self.package_dir = Path(package_dir)
        self.index = read_json(self.package_dir / "model_index.json")
        self._threads, self._providers = threads, providers
        self._sessions: dict[str, object] = {}
        self.scheduler_config = read_json(self.package_dir / "scheduler" / "scheduler_config.json")
        load_scheduler(self.scheduler_config)  # an unported scheduler is refused at once

    def steps(self, timesteps):
        """``timesteps`` to iterate, behind a progress bar when :attr:`progress` is on."""
        from tqdm.auto import tqdm

        shown = self.progress and sys.stderr.isatty()
        return tqdm(timesteps, desc="denoising", unit="step", leave=False, disable=not shown)

    def config(self, component: str) -> dict:
        """A component's ``config.json``."""
        return read_json(self.package_dir / component / "config.json")

    def session(self, graph: str):
        """The ONNX Runtime session of ``<graph>.onnx`` (``"unet/model"``), opened once."""
        if graph not in self._sessions:
            from mobius.generate import _import_onnxruntime, load_session

            ort = _import_onnxruntime()
            path = self.package_dir / f"{graph}.onnx"
            if not path.is_file():
                raise MobiusError(f"no {graph}.onnx in {self.package_dir}: not a built pipeline")
            options = ort.SessionOptions()
            if self._threads:
                options.intra_op_num_threads = int(self._threads)
            if graph in NO_ARENA_GRAPHS:
                options.enable_cpu_mem_arena = False
            providers = list(self._providers or ["CPUExecutionProvider"])
            self._sessions[graph] = load_session(path, options, providers)
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
        return [value.astype(np.float32, copy=False) for value in session.run(outputs, cast)]

    def tokenize(self, component: str, prompts: list[str], max_length: int) -> np.ndarray:
        """``input_ids`` [batch, max_length], padded to the length and truncated, as diffusers does."""
        tokenizer = self.tokenizer(component)
        ids = tokenizer(prompts, padding="max_length", max_length=max_length, truncation=True)[
            "input_ids"
        ]
        return np.asarray(ids, dtype=np.int64)

    def encode_masked(self, texts: list[str], max_length: int) -> tuple[np.ndarray, np.ndarray]:
        """``(last_hidden_state, attention_mask)`` of ``text_encoder/model`` on ``texts`` that
        ``tokenizer/`` pads to ``max_length`` (and truncates), the mask fed with them."""
        encoded = self.tokenizer("tokenizer")(
            texts, padding="max_length", max_length=max_length, truncation=True
        )
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        mask = np.asarray(encoded["attention_mask"], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        return self.run("text_encoder/model", feeds, "last_hidden_state"), mask

    def tokenizer(self, component: str):
        """The tokenizer in folder ``component`` (``transformers.AutoTokenizer``), loaded once."""
        key = f"tokenizer:{component}"
        if key not in self._sessions:
            from mobius.generate import load_tokenizer

            self._sessions[key] = load_tokenizer(self.package_dir / component)
        return self._sessions[key]

    def vae_scale_factor(self) -> int:
        """How many pixels a latent stands for on each side: 2 per VAE level after the first."""
        return 2 ** (len(self.config("vae")["block_out_channels"]) - 1)

    def decode_latents(self, latents: np.ndarray) -> np.ndarray:
        """``vae/decoder/model``'s ``sample`` for ``latents``: in tiles when :attr:`vae_tiling`
        is on and they are larger than one tile, as diffusers' tiled decode; frame by frame
        with ``vae/decoder_step/model`` where the VAE has one (Wan's) and there are several
        latent frames, as diffusers decodes (one frame, an image, needs no caches)."""

        def decode(tile: np.ndarray) -> np.ndarray:
            return self.run("vae/decoder/model", {"latent_sample": tile}, "sample")

        step_graph = "vae/decoder_step/model"
        several = latents.ndim == 5 and latents.shape[2] > 1
        if several and (self.package_dir / f"{step_graph}.onnx").is_file():
            inputs = self.session(step_graph).get_inputs()
            past = {i.name: i.shape for i in inputs if i.name.startswith("past_frames.")}
            names = self.outputs(step_graph)

            def step(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
                return dict(zip(names, self.run_outputs(step_graph, feeds, names), strict=True))

            def decode(tile: np.ndarray) -> np.ndarray:
                return decode_stepwise(step, past, tile)

        if self.vae_tiling:
            plan = tile_plan(self.config("vae"))
            if plan.applies(latents):
                return decode_tiled(decode, latents, plan)
        return decode(latents)

    def decode(self, latents: np.ndarray) -> np.ndarray:
        """VAE-decoded images ``[batch, H, W, 3]`` in [0, 1] (diffusers' ``output_type="np"``)."""
        image = self.decode_latents(latents)
        image = np.clip(image / 2 + 0.5, 0, 1)
        return image.transpose(0, 2, 3, 1)

    def unscale_latents(self, latents: np.ndarray) -> np.ndarray:
        """The final latents as the VAE decoder takes them: divided by its ``scaling_factor``."""
        return latents / np.float32(self.config("vae").get("scaling_factor", 0.18215))

    def unscale_shifted_latents(self, latents: np.ndarray) -> np.ndarray:
        """Divided by the VAE's ``scaling_factor``, plus its ``shift_factor`` (Flux, SD3)."""
        vae = self.config("vae")
        shift = np.float32(vae.get("shift_factor") or 0)
        return (latents / np.float32(vae["scaling_factor"]) + shift).astype(np.float32)

    def clip_outputs(
        self, tokenizer: str, encoder: str, texts: list[str], length: int, names: list[str]
    ) -> list[np.ndarray]:
        """Outputs ``names`` of a CLIP text encoder on ``texts`` padded to ``length``, no mask (as diffusers)."""
        ids = self.tokenize(tokenizer, texts, length)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        return self.run_outputs(f"{encoder}/model", feeds, names)

    def config_int(self, component: str, key: str, default: int | None = None) -> int:
        """A positive integer of a component's ``config.json`` (``default`` when absent or null), checked."""
        value = self.config(component).get(key)
        value = default if value is None else value
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{component}/config.json {key} is {value!r}, not a positive integer")
        return value

    def graph_inputs(self, graph: str) -> set[str]:
        """The input names of ``graph``."""
        return {i.name for i in self.session(graph).get_inputs()}

    def guided_states(self, encode, prompts: list[str], negative_prompt, guidance_scale):
        """``(states, scale, guided)``: ``encode(prompts)``, with the negative prompts' rows
        first when the guidance scale (``guidance_scale``, else the runner's
        ``default_guidance_scale``) is above 1, as diffusers batches classifier-free guidance."""
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        states = encode(prompts)
        if scale > 1:
            negatives = encode(one_per_prompt(negative_prompt, len(prompts)))
            states = np.concatenate([negatives, states])
        return states, scale, scale > 1

    def new_scheduler(self, seed: int | None):
        """The package's scheduler, fresh for one generation; samplers that add noise each
        step (Euler ancestral, LCM, SDE solvers) draw it from a generator seeded by ``seed``
        (a stream of its own: the initial noise stays :meth:`initial_noise`'s)."""
        stream = None if seed is None else [seed, 1]
        return load_scheduler(self.scheduler_config, generator=np.random.default_rng(stream))

    @staticmethod
    def initial_noise(shape: tuple[int, ...], seed: int | None) -> np.ndarray:
        """Standard normal float32 noise from ``numpy.random.default_rng(seed)``."""
        return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

    def given_or_initial_latents(
        self, latents: np.ndarray | None, shape: tuple[int, ...], seed: int | None
    ) -> np.ndarray:
        """``latents`` (as diffusers takes them), checked to be of ``shape``, else
        :meth:`initial_noise`; float32, not yet scaled by the scheduler's ``init_noise_sigma``."""
        if latents is None:
            return self.initial_noise(shape, seed)
        if tuple(latents.shape) != tuple(shape):
            raise ConfigError(f"latents of shape {tuple(latents.shape)} given; this needs {shape}")
        return latents.astype(np.float32)


def one_per_prompt(text: str | list[str] | None, batch: int) -> list[str]:
    """One (negative) text per prompt; none is the empty text, as diffusers takes it."""
    text = text if text is not None else ""
    return [text] * batch if isinstance(text, str) else list(text)


def is_listed(index: dict, component: str) -> bool:
    """Whether ``model_index.json`` lists ``component`` (``[library, class]``, not ``[null, null]``)."""
    value = index.get(component)
    return isinstance(value, list) and bool(value) and value[0] is not None


def read_json(path: Path) -> dict:
    """A JSON object file of a package; unreadable or not an object is a one-line MobiusError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MobiusError(f"unreadable {path}: {exc}") from None
    if not isinstance(data, dict):
        raise MobiusError(f"{path} is not a JSON object")
    return data


def guide(uncond: np.ndarray, cond: np.ndarray, scale: float) -> np.ndarray:
    """Classifier-free guidance: ``uncond + scale * (cond - uncond)``."""
    return uncond + np.float32(scale) * (cond - uncond)
