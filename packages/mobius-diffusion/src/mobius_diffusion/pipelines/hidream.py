"""HiDream-I1: two CLIP pooled texts, T5's states and every Llama layer's, the mixture-of-experts DiT."""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, is_listed, one_per_prompt
from mobius_diffusion.pipelines.flux import calculate_shift

#: diffusers' HiDream pipeline: the latent side it sizes images for, whatever the transformer.
DEFAULT_SAMPLE_SIZE = 128
#: The longest CLIP text the pipeline pads to (HiDream's CLIP encoders take 248 positions).
CLIP_MAX_LENGTH = 218
#: The schedulers diffusers' pipeline steps: UniPC (HiDream-I1 Full) or flow matching (Dev, Fast).
SCHEDULERS = ("UniPCMultistepScheduler", "FlowMatchEulerDiscreteScheduler")
ENCODERS = ("text_encoder", "text_encoder_2", "text_encoder_3", "text_encoder_4")


class HiDreamImageRunner(PipelineRunner):
    """``HiDreamImagePipeline``: CLIP-L and CLIP-G pooled, T5 and Llama 3 states, CFG.

    As diffusers: the image is resized to the area of a ``128 * vae_scale_factor``
    square (its aspect kept, each side a multiple of twice the VAE factor). Each
    CLIP encoder takes its texts padded to ``min(max_sequence_length, 218)`` with no
    mask and gives ``text_embeds``, put side by side (the pooled text); T5 and Llama
    (whose tokenizer pads with its end token) take theirs padded to
    ``max_sequence_length`` with the mask; the transformer reads T5's
    ``last_hidden_state`` and every Llama layer's output (``hidden_states.1`` to
    ``.N``, stacked: the whole-pipeline build adds them, ``--hidden-states all``).
    Guidance (``guidance_scale`` > 1) batches the negative prompts (each encoder's
    by default ``negative_prompt``, "" by default) first. The transformer's
    prediction is negated before the scheduler's step; flow matching gets ``mu`` of
    the transformer's ``max_seq`` (diffusers' default shift line, used only by a
    dynamically shifting config), UniPC none. The VAE decodes
    ``latents / scaling_factor + shift_factor``. ``prompt_2`` to ``prompt_4`` and
    ``negative_prompt_2`` to ``_4`` feed the second CLIP, T5 and Llama.
    """

    default_guidance_scale = 5.0
    default_max_sequence_length = 128

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        missing = [encoder for encoder in ENCODERS if not is_listed(self.index, encoder)]
        if missing:
            raise ConfigError(f"a HiDreamImagePipeline without {', '.join(missing)} is not run")
        scheduler = self.scheduler_config.get("_class_name")
        if scheduler not in SCHEDULERS:
            raise ConfigError(
                f"diffusers' HiDreamImagePipeline steps {' or '.join(SCHEDULERS)}, not {scheduler}"
            )

    def llama_states(self) -> list[str]:
        """``hidden_states.1`` to ``.N`` of ``text_encoder_4``: every layer's output."""
        layers = self.config_int("text_encoder_4", "num_hidden_layers")
        names = [f"hidden_states.{i}" for i in range(1, layers + 1)]
        missing = [n for n in names if n not in self.outputs("text_encoder_4/model")]
        if missing:
            raise ConfigError(
                f"text_encoder_4/model.onnx has no output {missing[0]} (HiDream reads every "
                "layer's): rebuild the pipeline whole, or its text_encoder_4 with --hidden-states all"
            )
        return names

    def masked(self, tokenizer: str, encoder: str, texts: list[str], length: int, names):
        """Outputs ``names`` of ``encoder`` on ``texts`` padded to ``length``, with their mask."""
        tokenizer = self.tokenizer(tokenizer)
        length = min(length, tokenizer.model_max_length)
        encoded = tokenizer(texts, padding="max_length", max_length=length, truncation=True)
        feeds = {k: np.asarray(encoded[k], dtype=np.int64) for k in ("input_ids", "attention_mask")}
        return self.run_outputs(f"{encoder}/model", feeds, names)

    def encode(self, texts: list[list[str]], length: int) -> dict[str, np.ndarray]:
        """The transformer's text inputs from the four encoders' ``texts``."""
        clip_length = min(length, CLIP_MAX_LENGTH)
        for encoder in ENCODERS[:2]:
            positions = self.config_int(encoder, "max_position_embeddings")
            if clip_length > positions:
                raise ConfigError(
                    f"the CLIP texts are padded to {clip_length} tokens (max_sequence_length); "
                    f"{encoder} takes {positions}"
                )
        pooled = [
            self.clip_outputs(tok, enc, t, clip_length, ["text_embeds"])[0]
            for tok, enc, t in zip(("tokenizer", "tokenizer_2"), ENCODERS, texts, strict=False)
        ]
        self.tokenizer("tokenizer_4").pad_token = self.tokenizer("tokenizer_4").eos_token
        (t5,) = self.masked(
            "tokenizer_3", "text_encoder_3", texts[2], length, ["last_hidden_state"]
        )
        llama = self.masked("tokenizer_4", "text_encoder_4", texts[3], length, self.llama_states())
        return {
            "encoder_hidden_states_t5": t5,
            "encoder_hidden_states_llama3": np.stack(llama),  # [layers, batch, tokens, width]
            "pooled_embeds": np.concatenate(pooled, axis=-1),
        }

    def image_size(self, height: int | None, width: int | None) -> tuple[int, int]:
        """``(height, width)`` as diffusers resizes them: the default square's area, aspect kept."""
        factor = self.vae_scale_factor()
        height = height or DEFAULT_SAMPLE_SIZE * factor
        width = width or DEFAULT_SAMPLE_SIZE * factor
        division = factor * 2
        scale = math.sqrt((DEFAULT_SAMPLE_SIZE * factor) ** 2 / (width * height))
        return (
            int(height * scale // division * division),
            int(width * scale // division * division),
        )

    def latent_shape(self, batch: int, height: int, width: int) -> tuple[int, ...]:
        """``[batch, channels, rows, columns]``, checked against the transformer's patches."""
        factor = self.vae_scale_factor()
        rows, columns = 2 * (height // (factor * 2)), 2 * (width // (factor * 2))
        patch = self.config_int("transformer", "patch_size")
        if rows % patch or columns % patch:
            raise ConfigError(
                f"a {height} x {width} image has {rows} x {columns} latents: not whole "
                f"patches of {patch}"
            )
        tokens = (rows // patch) * (columns // patch)
        if rows != columns and tokens > self.max_seq():
            raise ConfigError(
                f"a {height} x {width} image has {tokens} patches; HiDream pads a non-square "
                f"one to max_resolution's {self.max_seq()} and takes no more"
            )
        return (batch, self.config_int("transformer", "in_channels"), rows, columns)

    def max_seq(self) -> int:
        """The transformer's ``max_resolution`` in patches (diffusers' ``max_seq``)."""
        rows, columns = self.config("transformer").get("max_resolution", (128, 128))
        return rows * columns // self.config_int("transformer", "patch_size") ** 2

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
        max_sequence_length: int | None = None,
        **texts,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``height``/``width`` are resized as the class docstring says; ``latents``
        [batch, channels, H / factor, W / factor] (of the resized image) replaces the
        seeded noise. ``texts``: ``prompt_2`` to ``prompt_4``, ``negative_prompt_2``
        to ``negative_prompt_4``.
        """
        unknown = set(texts) - {
            f"{k}_{i}" for k in ("prompt", "negative_prompt") for i in (2, 3, 4)
        }
        if unknown:
            raise ConfigError(f"a HiDreamImagePipeline takes no {', '.join(sorted(unknown))}")
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        batch = len(prompts)
        length = max_sequence_length or self.default_max_sequence_length
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        guided = scale > 1

        def each(first: list[str], key: str) -> list[list[str]]:
            others = [texts.get(f"{key}_{i}") for i in (2, 3, 4)]
            return [first] + [one_per_prompt(t, batch) if t else first for t in others]

        shape = self.latent_shape(batch, *self.image_size(height, width))
        latents = self.given_or_initial_latents(latents, shape, seed)
        conditioning = self.encode(each(prompts, "prompt"), length)
        if guided:
            negative = self.encode(
                each(one_per_prompt(negative_prompt, batch), "negative_prompt"), length
            )
            axes = {"encoder_hidden_states_llama3": 1}  # Llama's states: [layers, batch, ...]
            conditioning = {
                k: np.concatenate([negative[k], v], axis=axes.get(k, 0))
                for k, v in conditioning.items()
            }

        scheduler = self.new_scheduler(seed)
        if self.scheduler_config["_class_name"] == "UniPCMultistepScheduler":
            scheduler.set_timesteps(num_inference_steps)
        else:
            scheduler.set_timesteps(num_inference_steps, mu=calculate_shift(self.max_seq()))
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            feeds = {
                "hidden_states": model_input,
                "timestep": np.full(model_input.shape[0], t, np.float32),
                **conditioning,
            }
            noise = -self.run("transformer/model", feeds, "out_hidden_states")
            if guided:
                noise = guide(*np.split(noise, 2), scale)
            latents = scheduler.step(noise, t, latents)
        return self.decode(self.unscale_shifted_latents(latents))
