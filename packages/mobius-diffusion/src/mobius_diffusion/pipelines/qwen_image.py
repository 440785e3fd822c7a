"""Qwen-Image text to image: Qwen2.5-VL states behind a chat template, packed latents,
true CFG with the norm rescale, flow matching with a dynamic shift, the causal VAE."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner
from mobius_diffusion.pipelines.flux import calculate_shift, pack_latents, unpack_latents
from mobius_diffusion.pipelines.wan import WanRunner

#: diffusers' ``prompt_template_encode``: the prompt goes in as the user's turn.
PROMPT_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
    "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
    "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)
#: diffusers' ``prompt_template_encode_start_idx``: the template's leading tokens (34 with
#: Qwen's tokenizer), dropped from the states whatever the tokenizer.
TEMPLATE_PREFIX_TOKENS = 34
#: diffusers' ``tokenizer_max_length``: prompt tokens kept after the prefix (and the most
#: ``max_sequence_length`` may be).
MAX_PROMPT_TOKENS = 1024


def rescaled_guidance(cond: np.ndarray, uncond: np.ndarray, scale: float) -> np.ndarray:
    """Qwen-Image's true CFG: ``uncond + scale * (cond - uncond)``, each token's vector then
    rescaled to the norm of ``cond``'s."""
    combined = uncond + np.float32(scale) * (cond - uncond)
    cond_norm = np.linalg.norm(cond, axis=-1, keepdims=True)
    combined_norm = np.linalg.norm(combined, axis=-1, keepdims=True)
    return combined * (cond_norm / combined_norm)


class QwenImageRunner(PipelineRunner):
    """``QwenImagePipeline``: a prompt to images ``[batch, H, W, 3]`` in [0, 1].

    As diffusers: each text is put in :data:`PROMPT_TEMPLATE`, encoded by the Qwen2.5-VL
    text model (``text_encoder/model``, its last state), and its first
    :data:`TEMPLATE_PREFIX_TOKENS` states dropped; the texts are zero-padded to the
    longest with a mask. The latents are 2x2-packed tokens denoised by
    ``transformer/model`` (``t / 1000``, the image's patch grid as ``img_shapes``) with
    flow-matching Euler steps whose shift grows with the token count; with a
    ``negative_prompt`` and ``true_cfg_scale`` > 1, true CFG with each token's
    prediction rescaled to the conditional one's norm. The VAE de-normalises with
    ``latents_mean``/``latents_std`` and decodes one frame.

    Unlike diffusers, a size it would round down is refused. Each text is encoded on
    its own (positions count from 0 on each row in diffusers too, so the states agree).
    """

    default_true_cfg_scale = 4.0
    default_max_sequence_length = 512
    default_sample_size = 128  # latents a side, as diffusers' default_sample_size

    # Wan's VAE config fields, read the same way (Qwen-Image's VAE is Wan 2.1's).
    vae_factors = WanRunner.vae_factors
    latent_statistics = WanRunner.latent_statistics
    decode_video = WanRunner.decode_video

    def vae_scale_factor(self) -> int:
        """Pixels per latent on each side: 2 per ``temperal_downsample`` entry."""
        return self.vae_factors()[1]

    def encode(self, texts: list[str], max_sequence_length: int):
        """``(states [batch, seq, d], mask int64 [batch, seq])``: each text's states after the
        template's prefix, at most ``max_sequence_length``, zero-padded to the longest."""
        tokenizer = self.tokenizer("tokenizer")
        rows = []
        for text in texts:
            ids = tokenizer(
                [PROMPT_TEMPLATE.format(text)],
                max_length=MAX_PROMPT_TOKENS + TEMPLATE_PREFIX_TOKENS,
                truncation=True,
            )["input_ids"]
            ids = np.asarray(ids, dtype=np.int64)
            if ids.shape[1] <= TEMPLATE_PREFIX_TOKENS:
                raise ConfigError(
                    f"the tokenizer makes {ids.shape[1]} tokens of Qwen-Image's prompt template, "
                    f"not more than the {TEMPLATE_PREFIX_TOKENS} the pipeline drops: "
                    "not Qwen's tokenizer"
                )
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            states = self.run("text_encoder/model", feeds, "last_hidden_state")[0]
            rows.append(states[TEMPLATE_PREFIX_TOKENS:][:max_sequence_length])
        length = max(len(row) for row in rows)
        states = np.zeros((len(rows), length, rows[0].shape[-1]), dtype=np.float32)
        mask = np.zeros((len(rows), length), dtype=np.int64)
        for i, row in enumerate(rows):
            states[i, : len(row)], mask[i, : len(row)] = row, 1
        return states, mask

    def predict(self, latents, timestep, image_grid, text, text_mask) -> np.ndarray:
        """One run of ``transformer/model``: the flow prediction for packed ``latents``."""
        feeds = {
            "hidden_states": latents,
            "timestep": timestep,
            "img_shapes": image_grid,
            "encoder_hidden_states": text,
            "encoder_hidden_states_mask": text_mask,
        }
        return self.run("transformer/model", feeds, "out_hidden_states")

    def latent_grid(self, height: int, width: int) -> tuple[int, int]:
        """The latent rows and columns of an image; a size the VAE and 2x2 packing do not
        divide is refused (diffusers rounds it down)."""
        multiple = 2 * self.vae_scale_factor()
        if height < 1 or width < 1 or height % multiple or width % multiple:
            raise ConfigError(
                f"a Qwen-Image image's height and width are multiples of {multiple}, "
                f"not {height} x {width}"
            )
        factor = self.vae_scale_factor()
        return height // factor, width // factor

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        true_cfg_scale: float | None = None,
        guidance_scale: float | None = None,
        num_inference_steps: int = 50,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int | None = None,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` may be given packed ([batch, tokens, 4C], as diffusers takes them) in
        place of the seeded noise. ``guidance_scale`` (``mobius generate
        --guidance-scale``) is ``true_cfg_scale`` (default 4) by another name: Qwen-Image
        has no guidance-distilled embedding. Guidance needs a ``negative_prompt``, as in
        diffusers (``" "`` is the usual one). Default size 1024 x 1024, 512 text tokens.
        """
        if guidance_scale is not None and true_cfg_scale is not None:
            raise ConfigError("give true_cfg_scale or guidance_scale (the same scale), not both")
        scale = next(
            (s for s in (true_cfg_scale, guidance_scale) if s is not None),
            self.default_true_cfg_scale,
        )
        length = max_sequence_length or self.default_max_sequence_length
        if not 1 <= length <= MAX_PROMPT_TOKENS:
            raise ConfigError(f"max_sequence_length is 1 to {MAX_PROMPT_TOKENS}, not {length}")
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        if negative_prompt is not None and isinstance(negative_prompt, str):
            negative_prompt = [negative_prompt] * len(prompts)
        guided = negative_prompt is not None and scale > 1
        default_size = self.default_sample_size * self.vae_scale_factor()
        grid_h, grid_w = self.latent_grid(height or default_size, width or default_size)
        channels = self.config_int("transformer", "in_channels") // 4
        shape = (len(prompts), (grid_h // 2) * (grid_w // 2), 4 * channels)
        if latents is None:
            latents = pack_latents(
                self.initial_noise((len(prompts), channels, grid_h, grid_w), seed)
            )
        elif tuple(latents.shape) != shape:
            raise ConfigError(
                f"latents of shape {tuple(latents.shape)} given; this image needs {shape}"
            )
        latents = latents.astype(np.float32)

        states, mask = self.encode(prompts, length)
        if guided:
            negative, negative_mask = self.encode(list(negative_prompt), length)
        scheduler = self.new_scheduler(seed)
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
        image_grid = np.array([[1, grid_h // 2, grid_w // 2]], dtype=np.int64)
        for t in self.steps(scheduler.timesteps):
            timestep = np.full(len(prompts), t, dtype=np.float32) / np.float32(1000)
            noise = self.predict(latents, timestep, image_grid, states, mask)
            if guided:
                uncond = self.predict(latents, timestep, image_grid, negative, negative_mask)
                noise = rescaled_guidance(noise, uncond, scale)
            latents = scheduler.step(noise, t, latents)
        latents = unpack_latents(latents, grid_h, grid_w)[:, :, None]  # one frame
        return self.decode_video(latents)[:, 0]
