"""Flux.2 text to image: a decoder LLM's stacked hidden states, 4-axis positions, patchified
latents normalised by the VAE's batch-norm statistics, flow matching with an empirical shift."""

from __future__ import annotations

import numpy as np

from mobius.chat_template import render_chat_template
from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, read_json


def latent_ids(height: int, width: int) -> np.ndarray:
    """``[height * width, 4]``: ``(0, row, column, 0)`` of each packed latent token."""
    ids = np.zeros((height, width, 4), dtype=np.float32)
    ids[..., 1] = np.arange(height)[:, None]
    ids[..., 2] = np.arange(width)[None, :]
    return ids.reshape(height * width, 4)


def text_ids(length: int) -> np.ndarray:
    """``[length, 4]``: ``(0, 0, 0, token)`` of each text token."""
    ids = np.zeros((length, 4), dtype=np.float32)
    ids[:, 3] = np.arange(length)
    return ids


def compute_empirical_mu(image_seq_len: int, num_steps: int) -> float:
    """Flux.2's time shift ``mu``: fitted lines in the token count, blended by the step count."""
    a1, b1 = 8.73809524e-05, 1.89833333
    a2, b2 = 0.00016927, 0.45666666
    if image_seq_len > 4300:
        return float(a2 * image_seq_len + b2)
    m_200 = a2 * image_seq_len + b2
    m_10 = a1 * image_seq_len + b1
    a = (m_200 - m_10) / 190.0
    return float(a * num_steps + m_200 - 200.0 * a)


def patchify(latents: np.ndarray) -> np.ndarray:
    """``[b, c, 2h, 2w]`` -> ``[b, 4c, h, w]``: each 2x2 patch's pixels as channels."""
    b, c, h, w = latents.shape
    x = latents.reshape(b, c, h // 2, 2, w // 2, 2).transpose(0, 1, 3, 5, 2, 4)
    return x.reshape(b, c * 4, h // 2, w // 2)


def unpatchify(latents: np.ndarray) -> np.ndarray:
    """The inverse of :func:`patchify`."""
    b, c, h, w = latents.shape
    x = latents.reshape(b, c // 4, 2, 2, h, w).transpose(0, 1, 4, 2, 5, 3)
    return x.reshape(b, c // 4, h * 2, w * 2)


class Flux2KleinRunner(PipelineRunner):
    """``Flux2KleinPipeline``: a prompt to images ``[batch, H, W, 3]`` in [0, 1].

    As diffusers: each prompt is put in the tokenizer's chat template as the user's turn
    (a generation prompt, thinking off), padded to ``max_sequence_length`` (512) with a
    mask, and encoded by the Qwen3 text encoder (``text_encoder/model``); the states of
    layers :attr:`text_layers` are concatenated per token (the whole-pipeline build adds
    them: ``--hidden-states 9,18,27``). The patchified latents ``[b, 4C, h, w]`` are
    flattened to ``h * w`` tokens at positions ``(0, row, column, 0)``, the text tokens at
    ``(0, 0, 0, index)``; ``transformer/model`` takes ``t / 1000``. Unless the package is
    step-distilled (``model_index.json`` ``is_distilled``), a ``guidance_scale`` above 1
    runs it again on the empty prompt for classifier-free guidance. The sigmas are
    ``linspace(1, 1/steps, steps)`` shifted by :func:`compute_empirical_mu`. Last, the
    latents are de-normalised with the VAE's ``bn/model`` statistics, unpatchified and
    decoded. Reference images (diffusers' ``image``) are not taken.
    """

    default_guidance_scale = 4.0
    default_max_sequence_length = 512
    default_sample_size = 128  # latents a side, as diffusers' default_sample_size
    #: transformers' ``hidden_states`` indices the pipeline stacks.
    text_layers = (9, 18, 27)

    def text_states(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """``[batch, seq, layers * d]``: the :attr:`text_layers` states, side by side per token."""
        names = [f"hidden_states.{i}" for i in self.text_layers]
        missing = [n for n in names if n not in self.outputs("text_encoder/model")]
        if missing:
            layers = ",".join(str(i) for i in self.text_layers)
            raise ConfigError(
                f"text_encoder/model.onnx has no output {missing[0]}: rebuild the pipeline "
                f"whole, or its text encoder with --hidden-states {layers}"
            )
        feeds = {"input_ids": ids, "attention_mask": mask}
        return np.concatenate(self.run_outputs("text_encoder/model", feeds, names), axis=-1)

    def encode(self, texts: list[str], max_sequence_length: int) -> np.ndarray:
        """Each text as the user's turn of the chat template, thinking off; padded, masked."""
        tokenizer = self.tokenizer("tokenizer")
        if not tokenizer.chat_template:
            raise ConfigError("tokenizer/ has no chat template: the Flux.2 Klein prompt needs one")
        chats = [
            render_chat_template(
                tokenizer,
                [{"role": "user", "content": text}],
                source=self.package_dir / "tokenizer",
                add_generation_prompt=True,
                enable_thinking=False,
            )
            for text in texts
        ]
        encoded = tokenizer(
            chats, padding="max_length", truncation=True, max_length=max_sequence_length
        )
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        return self.text_states(ids, np.asarray(encoded["attention_mask"], dtype=np.int64))

    def latent_grid(self, height: int, width: int) -> tuple[int, int]:
        """The patchified latent grid of an image; a size the VAE and 2x2 patches do not
        divide is refused (diffusers rounds it down)."""
        multiple = 2 * self.vae_scale_factor()
        if height < 1 or width < 1 or height % multiple or width % multiple:
            raise ConfigError(
                f"a Flux.2 image's height and width are multiples of {multiple}, "
                f"not {height} x {width}"
            )
        return height // multiple, width // multiple

    def latent_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, std)`` ``[1, 4C, 1, 1]`` of the VAE's ``bn``, as diffusers computes them."""
        patch = self.config("vae").get("patch_size", [2, 2])
        if list(patch) != [2, 2]:
            raise ConfigError(
                f"vae/config.json patch_size {patch}: the Flux.2 pipelines patchify 2x2"
            )
        mean, var = self.run_outputs("vae/bn/model", {}, ["running_mean", "running_var"])
        eps = np.float32(self.config("vae").get("batch_norm_eps", 1e-4))
        return mean.reshape(1, -1, 1, 1), np.sqrt(var + eps).reshape(1, -1, 1, 1)

    def denoise(self, latents, image_ids, timestep, states, guidance) -> np.ndarray:
        """One run of ``transformer/model`` (``guidance`` only when the graph takes it)."""
        feeds = {
            "hidden_states": latents,
            "timestep": timestep,
            "encoder_hidden_states": states,
            "img_ids": image_ids,
            "txt_ids": text_ids(states.shape[1]),
        }
        if guidance is not None:
            feeds["guidance"] = guidance
        return self.run("transformer/model", feeds, "out_hidden_states")

    def conditioning(self, prompts, scale, max_sequence_length):
        """``(states, negative states or None, guidance input or None)`` of one generation."""
        if "guidance" in self.graph_inputs("transformer/model"):
            raise ConfigError(
                "transformer/config.json guidance_embeds is true: a Flux2KleinPipeline passes "
                "the transformer no guidance"
            )
        states = self.encode(prompts, max_sequence_length)
        guided = scale > 1 and not self.index.get("is_distilled", False)
        negative = self.encode([""] * len(prompts), max_sequence_length) if guided else None
        return states, negative, None

    def __call__(
        self,
        prompt: str | list[str],
        *,
        guidance_scale: float | None = None,
        num_inference_steps: int = 50,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int | None = None,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` may be given as diffusers takes them, patchified ``[batch, 4C, h, w]``,
        in place of the seeded noise. Default size 1024 x 1024, 512 text tokens.
        """
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        default_size = self.default_sample_size * self.vae_scale_factor()
        grid_h, grid_w = self.latent_grid(height or default_size, width or default_size)
        channels = self.config_int("transformer", "in_channels")
        shape = (len(prompts), channels, grid_h, grid_w)
        latents = self.given_or_initial_latents(latents, shape, seed)
        latents = latents.reshape(*shape[:2], -1).transpose(0, 2, 1)  # [b, h*w, 4C]

        length = max_sequence_length or self.default_max_sequence_length
        states, negative, guidance = self.conditioning(prompts, scale, length)
        scheduler = self.new_scheduler(seed)
        steps = num_inference_steps
        sigmas = (
            None
            if self.scheduler_config.get("use_flow_sigmas")
            else np.linspace(1.0, 1 / steps, steps)
        )
        scheduler.set_timesteps(
            steps, sigmas=sigmas, mu=compute_empirical_mu(latents.shape[1], steps)
        )
        image_ids = latent_ids(grid_h, grid_w)
        for t in self.steps(scheduler.timesteps):
            timestep = np.full(len(prompts), t, dtype=np.float32) / np.float32(1000)
            noise = self.denoise(latents, image_ids, timestep, states, guidance)
            if negative is not None:
                uncond = self.denoise(latents, image_ids, timestep, negative, guidance)
                noise = guide(uncond, noise, scale)
            latents = scheduler.step(noise, t, latents)
        latents = latents.transpose(0, 2, 1).reshape(shape)
        mean, std = self.latent_statistics()
        return self.decode(unpatchify(latents * std + mean))


#: The system turn Flux2Pipeline puts before every prompt (diffusers' ``SYSTEM_MESSAGE``,
#: from Black Forest Labs' reference code).
SYSTEM_MESSAGE = (
    "You are an AI that reasons about image descriptions. You give structured responses "
    "focusing on object relationships, object\nattribution and actions without speculation."
)


class Flux2Runner(Flux2KleinRunner):
    """``Flux2Pipeline`` (FLUX.2 dev): Klein's steps with another prompt and guidance.

    As diffusers: ``[IMG]`` is removed from each prompt, which becomes the user's turn after
    :data:`SYSTEM_MESSAGE`'s system turn, both as content blocks, in the processor's chat
    template (no generation prompt); the processor adds no special tokens when the chat
    starts with the BOS (Mistral's template puts it there). Mistral 3's layers 10, 20 and 30
    (``--hidden-states 10,20,30`` in the whole-pipeline build) are concatenated per token.
    The model is guidance-distilled: no classifier-free guidance, the scale goes to the
    transformer's ``guidance`` input (if its graph has one: diffusers passes it to a
    transformer without the embedding, which ignores it). Caption upsampling
    (``caption_upsample_temperature``) and reference images are not taken.
    """

    text_layers = (10, 20, 30)

    def chat_template(self) -> str:
        """The processor's chat template (``chat_template.jinja`` or ``.json`` in
        ``tokenizer/``, as the processor loads it), else its tokenizer's."""
        folder = self.package_dir / "tokenizer"
        if (folder / "chat_template.jinja").is_file():
            try:
                return (folder / "chat_template.jinja").read_text(encoding="utf-8")
            except UnicodeDecodeError as error:
                raise ConfigError(
                    f"tokenizer/chat_template.jinja is not UTF-8 text: {error}"
                ) from None
        if (folder / "chat_template.json").is_file():
            template = read_json(folder / "chat_template.json").get("chat_template")
            if not isinstance(template, str):
                raise ConfigError("tokenizer/chat_template.json has no chat_template string")
            return template
        template = self.tokenizer("tokenizer").chat_template
        if not isinstance(template, str):
            raise ConfigError("tokenizer/ has no chat template: the Flux.2 prompt needs one")
        return template

    def encode(self, texts: list[str], max_sequence_length: int) -> np.ndarray:
        """Each text after the system turn, as content blocks; padded, masked."""
        tokenizer = self.tokenizer("tokenizer")
        template = self.chat_template()
        chats = [
            render_chat_template(
                tokenizer,
                [
                    {"role": "system", "content": [{"type": "text", "text": SYSTEM_MESSAGE}]},
                    {"role": "user", "content": [{"type": "text", "text": text}]},
                ],
                source=self.package_dir / "tokenizer",
                chat_template=template,
                add_generation_prompt=False,
            )
            for text in (t.replace("[IMG]", "") for t in texts)
        ]
        # The processor reads the first chat for all: a BOS there means the template wrote it.
        bos = tokenizer.bos_token
        special = not (bos is not None and chats[0].startswith(bos))
        encoded = tokenizer(
            chats,
            padding="max_length",
            truncation=True,
            max_length=max_sequence_length,
            add_special_tokens=special,
        )
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        return self.text_states(ids, np.asarray(encoded["attention_mask"], dtype=np.int64))

    def conditioning(self, prompts, scale, max_sequence_length):
        """The prompts' states, no negative, the scale as the ``guidance`` input."""
        states = self.encode(prompts, max_sequence_length)
        if "guidance" not in self.graph_inputs("transformer/model"):
            return states, None, None
        return states, None, np.full(len(prompts), scale, dtype=np.float32)
