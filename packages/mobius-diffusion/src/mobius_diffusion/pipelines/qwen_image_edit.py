"""Qwen-Image Edit: the input image read by Qwen2.5-VL beside the instruction, and its latents
beside the noise's in the transformer's sequence."""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.flux import calculate_shift, pack_latents, unpack_latents
from mobius_diffusion.pipelines.image_input import load_image, preprocess_image
from mobius_diffusion.pipelines.qwen_image import QwenImageRunner, rescaled_guidance

#: diffusers' ``prompt_template_encode`` of the edit pipeline: the image and the instruction
#: go in as the user's turn.
EDIT_PROMPT_TEMPLATE = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, "
    "texture, objects, background), then explain how the user's text instruction should alter "
    "or modify the image. Generate a new image that meets the user's requirements while "
    "maintaining consistency with the original input where appropriate.<|im_end|>\n"
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{}<|im_end|>\n"
    "<|im_start|>assistant\n"
)
#: diffusers' ``prompt_template_encode_start_idx``: the template's leading tokens (through
#: ``<|im_start|>user\n`` with Qwen's tokenizer), dropped from the states.
EDIT_TEMPLATE_PREFIX_TOKENS = 64


def calculate_dimensions(area: int, ratio: float) -> tuple[int, int]:
    """diffusers' ``calculate_dimensions``: ``(height, width)`` of about ``area`` pixels at
    ``ratio`` (width / height), each rounded to a multiple of 32."""
    width = math.sqrt(area * ratio)
    height = width / ratio
    return round(height / 32) * 32, round(width / 32) * 32


class QwenImageEditRunner(QwenImageRunner):
    """``QwenImageEditPipeline``: ``image`` edited as ``prompt`` says, ``[batch, H, W, 3]`` in [0, 1].

    As diffusers: the image is resized (Lanczos) to about :attr:`image_area` pixels at its
    aspect ratio, multiples of 32 (:func:`calculate_dimensions`), which is also the default
    output size. Each prompt goes into :data:`EDIT_PROMPT_TEMPLATE` with that image through
    the Qwen2.5-VL processor (``processor/``: the image resized within its pixel bounds and
    cut into patches, ``<|image_pad|>`` expanded to one token per merge block) and
    ``text_encoder/model`` (the image-text encoder: vision tower, merged tokens, the M-RoPE
    decoder's last state); the first :data:`EDIT_TEMPLATE_PREFIX_TOKENS` states are
    dropped. The image's VAE latents (the mean, normalised by ``latents_mean``/``latents_std``)
    are packed and follow the noise's tokens (``img_shapes`` holds both grids); the
    prediction keeps the noise's tokens. Scheduler, true CFG and decoding are
    :class:`QwenImageRunner`'s; the negative prompt is encoded with the image too.

    The decoder's positions are the model's 3-D rope index over the image tokens, which
    transformers 5 computes only from the processor's ``mm_token_type_ids``: diffusers
    0.42 does not pass them (huggingface/diffusers#14194), and its text encoder then counts
    the image tokens as text; mobius computes them as the model was trained with.

    A size diffusers would round down is refused. Each prompt is encoded on its own with
    the image (diffusers' processor takes one image for the whole batch and fails on a
    second prompt); the image's latents are shared by every row.
    """

    image_inputs = ("image",)
    #: diffusers' target area of the edit image (1024 x 1024, fixed there).
    image_area = 1024 * 1024

    def processor(self):
        """The Qwen2.5-VL processor of ``processor/`` (mobius-vision's, torch-free), loaded once.

        Its image settings are ``preprocessor_config.json``'s (the hub's) or those nested in
        ``processor_config.json`` (transformers 5 saves them so); the merge size of the
        rope index is the text encoder's tower's.
        """
        key = "processor:processor"
        if key not in self._sessions:
            try:
                from mobius_vision.processing._image import ImageSettings
                from mobius_vision.processing._settings import (
                    PackageSettings,
                    load_tokenizer,
                    read_json_object,
                )
                from mobius_vision.processing.qwen_vl import PIXEL_BOUNDS, QwenVLProcessor
            except ImportError:
                raise ConfigError(
                    "a Qwen-Image Edit package's image processor needs mobius-vision "
                    "(pip install mobius-vision)"
                ) from None
            folder = self.package_dir / "processor"
            settings = read_json_object(folder / "processor_config.json")
            nested = settings.pop("image_processor", None)
            image = read_json_object(folder / "preprocessor_config.json")
            image = image or (nested if isinstance(nested, dict) else {})
            standard = {k: v for k, v in image.items() if k not in PIXEL_BOUNDS}
            self._sessions[key] = QwenVLProcessor(
                load_tokenizer(folder),
                ImageSettings.from_dict(standard, **QwenVLProcessor.image_defaults),
                PackageSettings(self.config("text_encoder"), image, settings),
            )
        return self._sessions[key]

    def encode_with_image(self, texts: list[str], image) -> tuple[np.ndarray, np.ndarray]:
        """``(states [batch, seq, d], mask int64 [batch, seq])``: each text's states with the
        image after the template's prefix, zero-padded to the longest."""
        processor = self.processor()
        rows = []
        for text in texts:
            inputs = processor(EDIT_PROMPT_TEMPLATE.format(text), [image])
            if inputs["input_ids"].shape[1] <= EDIT_TEMPLATE_PREFIX_TOKENS:
                raise ConfigError(
                    f"the processor makes {inputs['input_ids'].shape[1]} tokens of Qwen-Image "
                    f"Edit's prompt template, not more than the {EDIT_TEMPLATE_PREFIX_TOKENS} "
                    "the pipeline drops: not Qwen's tokenizer"
                )
            positions, _ = processor.rope_positions(inputs)
            feeds = {
                "input_ids": inputs["input_ids"],
                "attention_mask": inputs["attention_mask"],
                "position_ids": positions,
                "pixel_values": inputs["pixel_values"],
                "image_grid_thw": inputs["image_grid_thw"],
            }
            states = self.run("text_encoder/model", feeds, "last_hidden_state")[0]
            rows.append(states[EDIT_TEMPLATE_PREFIX_TOKENS:])
        length = max(len(row) for row in rows)
        states = np.zeros((len(rows), length, rows[0].shape[-1]), dtype=np.float32)
        mask = np.zeros((len(rows), length), dtype=np.int64)
        for i, row in enumerate(rows):
            states[i, : len(row)], mask[i, : len(row)] = row, 1
        return states, mask

    def image_latents(self, pixels: np.ndarray) -> np.ndarray:
        """``[1, z_dim, h, w]``: the normalised latent mean of ``pixels`` [1, 3, H, W] in [-1, 1]."""
        moments = self.run("vae/encoder/model", {"sample": pixels[:, :, None]}, "latent_parameters")
        z_dim = moments.shape[1] // 2
        mean, std = self.latent_statistics(z_dim)
        return ((moments[:, :z_dim] - mean) / std)[:, :, 0].astype(np.float32)

    def __call__(
        self,
        prompt: str | list[str],
        image,
        *,
        negative_prompt: str | list[str] | None = None,
        true_cfg_scale: float | None = None,
        guidance_scale: float | None = None,
        num_inference_steps: int = 50,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1]: ``image`` (a PIL image or a file)
        edited as ``prompt`` says.

        ``latents`` may be given packed ([batch, tokens, 4C]) in place of the seeded noise.
        ``guidance_scale`` is ``true_cfg_scale`` (default 4) by another name; guidance needs
        a ``negative_prompt``. The size defaults to the resized image's.
        """
        if guidance_scale is not None and true_cfg_scale is not None:
            raise ConfigError("give true_cfg_scale or guidance_scale (the same scale), not both")
        scale = next(
            (s for s in (true_cfg_scale, guidance_scale) if s is not None),
            self.default_true_cfg_scale,
        )
        image = load_image(image)
        image_h, image_w = calculate_dimensions(self.image_area, image.width / image.height)
        if image_h < 32 or image_w < 32:
            raise ConfigError(
                f"an image of {image.width}x{image.height} is too elongated for Qwen-Image Edit"
            )
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        if negative_prompt is not None and isinstance(negative_prompt, str):
            negative_prompt = [negative_prompt] * len(prompts)
        guided = negative_prompt is not None and scale > 1
        grid_h, grid_w = self.latent_grid(height or image_h, width or image_w)
        context_h, context_w = self.latent_grid(image_h, image_w)
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

        from PIL import Image

        # diffusers resizes once (Lanczos); the VAE and the processor both read that image
        resized = image.resize((image_w, image_h), resample=Image.LANCZOS)
        context = self.image_latents(preprocess_image(resized, image_h, image_w))
        context = pack_latents(np.repeat(context, len(prompts), axis=0))
        states, mask = self.encode_with_image(prompts, resized)
        if guided:
            negative, negative_mask = self.encode_with_image(list(negative_prompt), resized)
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
        image_grid = np.array(
            [[1, grid_h // 2, grid_w // 2], [1, context_h // 2, context_w // 2]], dtype=np.int64
        )
        tokens = latents.shape[1]
        for t in self.steps(scheduler.timesteps):
            timestep = np.full(len(prompts), t, dtype=np.float32) / np.float32(1000)
            joint = np.concatenate([latents, context], axis=1)
            noise = self.predict(joint, timestep, image_grid, states, mask)[:, :tokens]
            if guided:
                uncond = self.predict(joint, timestep, image_grid, negative, negative_mask)
                noise = rescaled_guidance(noise, uncond[:, :tokens], scale)
            latents = scheduler.step(noise, t, latents)
        latents = unpack_latents(latents, grid_h, grid_w)[:, :, None]  # one frame
        return self.decode_video(latents)[:, 0]
