"""IP-Adapter: Stable Diffusion (XL) whose UNet also attends to an image prompt.

A package built with ``mobius build --model <pipeline> out/ --ip-adapter FILE``
(:mod:`mobius_diffusion.ip_adapter_pipeline`) holds the adapter's image projection in
``ip_adapter/`` and a ``unet`` that takes ``ip_adapter_image_embeds`` and
``ip_adapter_scale``. As diffusers' ``prepare_ip_adapter_image_embeds``: the image,
prepared by ``feature_extractor/`` (CLIP's image processor; needs mobius-vision), goes
through ``image_encoder/model``: its ``image_embeds`` for a plain IP-Adapter, its
``penultimate_hidden_state`` (``hidden_states[-2]``) for Full, Plus and FaceID Plus; the
negative rows of classifier-free guidance are zeros (plain) or the encoding of a zero
image (the others). Both go through ``ip_adapter/model`` to the image tokens the UNet
attends to.

FaceID adapters read a face-recognition embedding (insightface's, which mobius does not
ship): the caller gives it as ``ip_adapter_image_embeds``, diffusers' contract for one
adapter (see :meth:`IPAdapterMixin.given_embeds`); FaceID Plus also reads the image.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.image_input import load_image
from mobius_diffusion.pipelines.sd import StableDiffusionRunner, StableDiffusionXLRunner

#: The package folder of the adapter's image projection (``model.onnx``, ``config.json``).
IP_ADAPTER_COMPONENT = "ip_adapter"
#: The UNet inputs of a build with ``--ip-adapter``.
UNET_INPUTS = {"ip_adapter_image_embeds", "ip_adapter_scale"}
#: What each kind of adapter reads of the image encoder; FaceID reads no image.
ENCODER_OUTPUTS = {
    "ip-adapter": "image_embeds",
    "full": "penultimate_hidden_state",
    "plus": "penultimate_hidden_state",
    "faceid": None,
    "faceid-plus": "penultimate_hidden_state",
}


class IPAdapterMixin:
    """The image prompt of a Stable Diffusion runner: ``ip_adapter_image`` and/or
    ``ip_adapter_image_embeds``, ``ip_adapter_scale`` (default 1.0, as diffusers'
    ``load_ip_adapter`` sets) and, for FaceID Plus v2, ``ip_adapter_shortcut_scale``
    among the call options, one image prompt for every prompt."""

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        self.kind = self.config(IP_ADAPTER_COMPONENT).get("kind")
        if self.kind not in ENCODER_OUTPUTS:
            raise ConfigError(f"{IP_ADAPTER_COMPONENT}/config.json kind {self.kind!r} is not run")
        if not self.graph_inputs("unet/model") >= UNET_INPUTS:
            raise ConfigError(
                f"{self.package_dir}/unet/model.onnx takes no IP-Adapter image tokens; build "
                "the whole pipeline with mobius build --ip-adapter FILE"
            )
        needed = ENCODER_OUTPUTS[self.kind]
        if needed is not None and needed not in self.outputs("image_encoder/model"):
            raise ConfigError(
                f"this IP-Adapter reads the image encoder's {needed}, which "
                "image_encoder/model.onnx does not give (a CLIPVisionModelWithProjection does)"
            )

    def image_features(self, pixels: np.ndarray) -> np.ndarray:
        """What the adapter's projection reads of ``pixels``: CLIP's ``image_embeds`` [n, d]
        (plain) or ``penultimate_hidden_state`` [n, tokens, width] (the others)."""
        return self.run("image_encoder/model", {"pixel_values": pixels}, ENCODER_OUTPUTS[self.kind])

    def encoded_image(self, image) -> tuple[np.ndarray, np.ndarray]:
        """``(negative, positive)`` features of the image prompt, each ``[1, ...]``."""
        try:
            from mobius_vision.processing.classification import load_image_processor
        except ImportError:
            raise ConfigError(
                "an IP-Adapter package's CLIP image processor needs mobius-vision "
                "(pip install mobius-vision)"
            ) from None
        processor = load_image_processor(self.package_dir / "feature_extractor")
        pixels = processor(load_image(image, "IP-Adapter image"))[None]
        features = self.image_features(pixels)
        if self.kind == "ip-adapter":
            return np.zeros_like(features), features
        return self.image_features(np.zeros_like(pixels)), features

    def given_embeds(self, embeds, guided: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(negative, positive)`` rows ``[num_images, ...]`` of ``ip_adapter_image_embeds``:
        diffusers' one-adapter array, float ``[2, num_images, *features]`` with guidance (the
        negative row first), ``[1, num_images, *features]`` without; ``features`` is the
        projection's input less its batch axis (FaceID, FaceID Plus: ``[id_embed_dim]``;
        plain: ``[image_embed_dim]``; Full, Plus: ``[image_tokens, width]``).

        Raises:
            ConfigError: another type, rank or size.
        """
        name = "id_embeds" if self.kind == "faceid-plus" else "image_embeds"
        inputs = self.session(f"{IP_ADAPTER_COMPONENT}/model").get_inputs()
        features = next(i.shape for i in inputs if i.name == name)[1:]
        rows = 2 if guided else 1
        shape = [rows, "num_images", *features]
        embeds = np.asarray(embeds) if isinstance(embeds, (np.ndarray, list)) else None
        ok = embeds is not None and embeds.dtype.kind == "f" and embeds.ndim == len(shape)
        if ok:
            dims = zip(embeds.shape, shape, strict=True)
            ok = embeds.shape[0] == rows and all(n == d for n, d in dims if isinstance(d, int))
        if ok and self.kind == "faceid-plus" and embeds.shape[1] != 1:
            ok = False  # one face per image prompt: the image's states are one image's
        if not ok or min(embeds.shape) < 1:
            got = "not an array" if embeds is None else f"{embeds.dtype} {list(embeds.shape)}"
            raise ConfigError(
                f"ip_adapter_image_embeds: expected float [{', '.join(map(str, shape))}]"
                f"{' (num_images 1)' if self.kind == 'faceid-plus' else ''}, got {got}"
            )
        embeds = embeds.astype(np.float32)
        return (embeds[0] if guided else np.zeros_like(embeds[0])), embeds[-1]

    def image_prompt_embeds(self, image, embeds, batch: int, guided: bool, shortcut):
        """``[rows, tokens, cross_attention_dim]``: the image prompt's tokens for each of
        ``batch`` prompts, the negative rows first if ``guided``."""
        feeds = {}
        if embeds is not None:
            name = "id_embeds" if self.kind == "faceid-plus" else "image_embeds"
            feeds[name] = self.given_embeds(embeds, guided)
        if image is not None:
            feeds["image_embeds"] = self.encoded_image(image)
        images = feeds["image_embeds"][1].shape[0]
        for name, (negative, positive) in feeds.items():
            feeds[name] = np.concatenate(
                ([negative] * batch if guided else []) + [positive] * batch
            )
        outputs = ["image_prompt_embeds"] + (["id_prompt_embeds"] if shortcut is not None else [])
        tokens, *face = self.run_outputs(f"{IP_ADAPTER_COMPONENT}/model", feeds, outputs)
        if shortcut is not None:  # Plus v2: the face tokens added back
            tokens = face[0] + np.float32(shortcut) * tokens
        # the tokens of a row's images side by side, as diffusers' attention flattens them
        return tokens.reshape(tokens.shape[0] // images, -1, tokens.shape[-1])

    def conditioning(
        self,
        prompts: list[str],
        negative_prompt,
        guided: bool,
        height: int,
        width: int,
        *,
        ip_adapter_image=None,
        ip_adapter_image_embeds=None,
        ip_adapter_scale: float = 1.0,
        ip_adapter_shortcut_scale: float | None = None,
        **options,
    ) -> dict[str, np.ndarray]:
        """The text conditioning of the base runner, and the image prompt's tokens and scale.

        Raises:
            ConfigError: the image prompt missing, or given in a form this adapter does not
                read, or a shortcut scale for another adapter than FaceID Plus.
        """
        self.check_image_prompt(ip_adapter_image, ip_adapter_image_embeds)
        if ip_adapter_shortcut_scale is not None:
            if self.kind != "faceid-plus":
                raise ConfigError(
                    "ip_adapter_shortcut_scale is FaceID Plus v2's, not this adapter's"
                )
            if isinstance(ip_adapter_shortcut_scale, bool) or not isinstance(
                ip_adapter_shortcut_scale, (int, float)
            ):
                raise ConfigError("ip_adapter_shortcut_scale must be a number")
        feeds = super().conditioning(prompts, negative_prompt, guided, height, width, **options)
        tokens = self.image_prompt_embeds(
            ip_adapter_image,
            ip_adapter_image_embeds,
            len(prompts),
            guided,
            ip_adapter_shortcut_scale,
        )
        scale = np.asarray(ip_adapter_scale, dtype=np.float32)
        return {**feeds, "ip_adapter_image_embeds": tokens, "ip_adapter_scale": scale}

    def check_image_prompt(self, image, embeds) -> None:
        """Refuse an image prompt this adapter cannot read: FaceID takes embeddings only,
        FaceID Plus both, the others one of the two."""
        if self.kind == "faceid-plus" and (image is None or embeds is None):
            raise ConfigError(
                "an IP-Adapter FaceID Plus reads a face embedding and an image: give both "
                "ip_adapter_image_embeds and ip_adapter_image"
            )
        if self.kind == "faceid" and (embeds is None or image is not None):
            raise ConfigError(
                "an IP-Adapter FaceID reads a face embedding, no image: give "
                "ip_adapter_image_embeds only"
            )
        if self.kind not in ("faceid", "faceid-plus") and (image is None) == (embeds is None):
            raise ConfigError(
                "an IP-Adapter package draws from an image prompt: give ip_adapter_image or "
                "ip_adapter_image_embeds (one of them)"
            )


class StableDiffusionIPAdapterRunner(IPAdapterMixin, StableDiffusionRunner):
    """``StableDiffusionPipeline`` with an IP-Adapter: SD's text conditioning and the image prompt."""


class StableDiffusionXLIPAdapterRunner(IPAdapterMixin, StableDiffusionXLRunner):
    """``StableDiffusionXLPipeline`` with an IP-Adapter: SDXL's conditioning and the image prompt."""
