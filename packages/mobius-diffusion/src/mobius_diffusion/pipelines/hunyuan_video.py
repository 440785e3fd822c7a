"""HunyuanVideo text to video: Llama states behind a prompt template, CLIP's pooled text,
embedded guidance, flow matching, the causal video VAE decoded in overlapping frame tiles."""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, one_per_prompt

#: diffusers' ``DEFAULT_PROMPT_TEMPLATE``: the prompt goes at ``{}``; the first ``crop_start``
#: tokens (the template's text before it, as Llama 3's tokenizer cuts it) are dropped.
DEFAULT_PROMPT_TEMPLATE = {
    "template": (
        "<|start_header_id|>system<|end_header_id|>\n\nDescribe the video by detailing the "
        "following aspects: "
        "1. The main content and theme of the video."
        "2. The color, shape, size, texture, quantity, text, and spatial relationships of the "
        "objects."
        "3. Actions, events, behaviors temporal relationships, physical movement changes of the "
        "objects."
        "4. background environment, light, style and atmosphere."
        "5. camera angles, movements, and transitions used in the video:<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
    ),
    "crop_start": 95,
}
#: diffusers pads CLIP's text to 77 tokens whatever its tokenizer says.
CLIP_LENGTH = 77
#: ``AutoencoderKLHunyuanVideo``'s frame tiling (on by default in diffusers), in sample frames.
TILE_FRAMES, TILE_STRIDE = 16, 12


def decode_framewise(decode, latents: np.ndarray, temporal: int) -> np.ndarray:
    """diffusers' ``_temporal_tiled_decode`` around ``decode`` (one decoder pass) when the latent
    clip is longer than one tile: tiles of ``TILE_FRAMES / temporal + 1`` latent frames every
    ``TILE_STRIDE / temporal``, each tile after the first losing its first decoded frame and
    blended linearly into the previous one over ``TILE_FRAMES - TILE_STRIDE`` frames."""
    tile, stride = TILE_FRAMES // temporal, TILE_STRIDE // temporal
    frames = latents.shape[2]
    if frames <= tile:
        return decode(latents)
    blend = TILE_FRAMES - TILE_STRIDE
    row = []
    for i in range(0, frames, stride):
        decoded = decode(latents[:, :, i : i + tile + 1])
        row.append(decoded if i == 0 else decoded[:, :, 1:])
    kept = [row[0][:, :, : TILE_STRIDE + 1]]
    for previous, current in zip(row, row[1:], strict=False):
        extent = min(previous.shape[2], current.shape[2], blend)
        for x in range(extent):  # in place: the next tile blends with this blended one
            current[:, :, x] = previous[:, :, x - extent] * (1 - x / extent) + current[:, :, x] * (
                x / extent
            )
        kept.append(current[:, :, :TILE_STRIDE])
    return np.concatenate(kept, axis=2)[:, :, : (frames - 1) * temporal + 1]


class HunyuanVideoRunner(PipelineRunner):
    """``HunyuanVideoPipeline``: a prompt to a video ``[batch, frames, H, W, 3]`` in [0, 1].

    As diffusers: each prompt is put in the prompt template (:data:`DEFAULT_PROMPT_TEMPLATE`
    unless ``prompt_template`` is given), tokenized to ``max_sequence_length + crop_start``
    tokens (right-padded as the tokenizer pads) and encoded by the Llama text encoder; its
    ``hidden_states[-3]`` (``hidden_states.{n-2}``, which the whole-pipeline build adds) and
    the mask lose their first ``crop_start`` tokens. CLIP's ``pooler_output`` of the bare
    prompt (77 tokens) is the pooled projection. ``guidance_scale`` (6) goes into the
    transformer's guidance embedding, times 1000; true classifier-free guidance runs only
    with a ``negative_prompt`` and ``true_cfg_scale`` > 1 (either alone is refused, where
    diffusers would skip it unsaid). Flow-matching Euler over ``linspace(1, 0, steps + 1)``
    without its last sigma, shifted by the scheduler; the latents are divided by the VAE's
    ``scaling_factor`` and decoded in overlapping tiles of frames (diffusers' default
    framewise decoding). A frame count or size diffusers would round is refused.
    """

    default_guidance_scale = 6.0
    default_max_sequence_length = 256
    default_num_frames, default_height, default_width = 129, 720, 1280
    #: ``mobius generate`` writes this runner's output as a video (``--frames``, ``--fps``).
    makes_video = True

    def vae_factors(self) -> tuple[int, int]:
        """``(temporal, spatial)``: frames and pixels per latent (the VAE's compression ratios)."""
        temporal = self.config_int("vae", "temporal_compression_ratio", 4)
        return temporal, self.config_int("vae", "spatial_compression_ratio", 8)

    def llama_state(self) -> str:
        """The text encoder's output that stands for transformers' ``hidden_states[-3]``."""
        name = f"hidden_states.{self.config_int('text_encoder', 'num_hidden_layers') - 2}"
        if name not in self.outputs("text_encoder/model"):
            raise ConfigError(
                f"text_encoder/model.onnx has no output {name} (hidden_states[-3]): rebuild "
                "the pipeline whole, or its text encoder with --hidden-states -3"
            )
        return name

    def encode(self, texts: list[str], template: dict, max_sequence_length: int):
        """``(Llama states, mask int64, CLIP pooled)`` of ``texts``, as diffusers' ``encode_prompt``."""
        crop = template.get("crop_start")
        if not isinstance(crop, int) or isinstance(crop, bool) or crop < 0:
            raise ConfigError(
                f"prompt_template crop_start must be a token count (an integer >= 0), not {crop!r}"
            )
        encoded = self.tokenizer("tokenizer")(
            [template["template"].format(text) for text in texts],
            padding="max_length",
            max_length=max_sequence_length + crop,
            truncation=True,
        )
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        mask = np.asarray(encoded["attention_mask"], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        states = self.run("text_encoder/model", feeds, self.llama_state())
        names = ["pooler_output"]
        (pooled,) = self.clip_outputs("tokenizer_2", "text_encoder_2", texts, CLIP_LENGTH, names)
        return states[:, crop:], mask[:, crop:], pooled

    def latent_shape(self, batch: int, num_frames: int, height: int, width: int) -> tuple:
        """The initial latents' shape; a frame count or size the VAE and patches do not divide is refused."""
        temporal, spatial = self.vae_factors()
        patch = self.config_int("transformer", "patch_size", 2)
        patch_t = self.config_int("transformer", "patch_size_t", 1)
        frames = (num_frames - 1) // temporal + 1 if num_frames >= 1 else 0
        if num_frames < 1 or (num_frames - 1) % temporal or frames % patch_t:
            raise ConfigError(
                f"a HunyuanVideo video has {temporal}k+1 frames (1, {temporal + 1}, "
                f"{2 * temporal + 1}...) making whole temporal patches of {patch_t}, not {num_frames}"
            )
        multiple = math.lcm(16, spatial * patch)  # diffusers' check_inputs: multiples of 16
        if height < 1 or width < 1 or height % multiple or width % multiple:
            raise ConfigError(
                f"a HunyuanVideo video's height and width are multiples of {multiple}, "
                f"not {height} x {width}"
            )
        channels = self.config_int("transformer", "in_channels")
        return (batch, channels, frames, height // spatial, width // spatial)

    def predict(self, step: dict, states, mask, pooled) -> np.ndarray:
        """The transformer's prediction for one step's feeds (``step``) and one text's conditioning."""
        feeds = dict(
            step,
            encoder_hidden_states=states,
            encoder_attention_mask=mask,
            pooled_projections=pooled,
        )
        return self.run("transformer/model", feeds, "out_hidden_states")

    def decode_video(self, latents: np.ndarray) -> np.ndarray:
        """Frames ``[batch, frames, H, W, 3]`` in [0, 1] (``output_type="np"``)."""
        temporal, _ = self.vae_factors()
        latents = self.unscale_latents(latents).astype(np.float32)
        video = decode_framewise(self.decode_latents, latents, temporal)
        return np.clip(video / 2 + 0.5, 0, 1).transpose(0, 2, 3, 4, 1)

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        true_cfg_scale: float = 1.0,
        num_frames: int | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int | None = None,
        prompt_template: dict | None = None,
    ) -> np.ndarray:
        """Video frames ``[batch, frames, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` [batch, channels, latent_frames, H/8, W/8] replaces the seeded noise, as
        diffusers takes them; defaults: 129 frames of 720 x 1280, 256 text tokens.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        if (negative_prompt is not None) != (true_cfg_scale > 1):
            raise ConfigError(
                "HunyuanVideo's true CFG takes a negative_prompt and true_cfg_scale > 1 together "
                f"(got {'a' if negative_prompt is not None else 'no'} negative prompt, "
                f"true_cfg_scale {true_cfg_scale}); its guidance_scale is embedded, not CFG"
            )
        template = DEFAULT_PROMPT_TEMPLATE if prompt_template is None else prompt_template
        if "template" not in template:
            raise ConfigError("prompt_template has no 'template' (the text around '{}')")
        length = max_sequence_length or self.default_max_sequence_length
        shape = self.latent_shape(
            len(prompts),
            num_frames or self.default_num_frames,
            height or self.default_height,
            width or self.default_width,
        )
        states, mask, pooled = self.encode(prompts, template, length)
        guided = negative_prompt is not None
        if guided:
            negative = self.encode(one_per_prompt(negative_prompt, len(prompts)), template, length)
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale

        scheduler = self.new_scheduler(seed)
        if scheduler.config.get("use_dynamic_shifting"):
            raise ConfigError(
                "the HunyuanVideo pipeline passes no mu: a scheduler with use_dynamic_shifting "
                "does not run"
            )
        scheduler.set_timesteps(sigmas=np.linspace(1.0, 0.0, num_inference_steps + 1)[:-1])
        scheduler.set_begin_index(0)
        latents = self.given_or_initial_latents(latents, shape, seed)
        guidance = np.full(shape[0], np.float32(scale) * np.float32(1000), np.float32)
        for t in self.steps(scheduler.timesteps):
            step = {"hidden_states": latents, "timestep": np.full(shape[0], t, np.float32)}
            if "guidance" in self.graph_inputs("transformer/model"):
                step["guidance"] = guidance
            noise = self.predict(step, states, mask, pooled)
            if guided:
                noise = guide(self.predict(step, *negative), noise, true_cfg_scale)
            latents = scheduler.step(noise, t, latents)
        return self.decode_video(latents)
