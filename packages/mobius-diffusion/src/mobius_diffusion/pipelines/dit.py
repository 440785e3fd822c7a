"""DiT: class-conditional generation (ImageNet labels), CFG against the null class, learned sigma."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide


class DiTRunner(PipelineRunner):
    """``DiTPipeline``: a class id per image, guidance against the "no class" label.

    As diffusers: the latents are ``sample_size`` square and not scaled by the
    scheduler's ``init_noise_sigma``; with guidance the batch is each class then the
    null class (the label table's last row, ``num_embeds_ada_norm``: diffusers names
    it 1000, which it is in every DiT checkpoint), and the guided noise drives the
    step; with a learned sigma the variance channels are dropped. Classes are given
    by id (``class_labels``) or by name: ``model_index.json``'s ``id2label``, each
    comma-separated name of a label on its own (``"white shark"``), as diffusers'
    ``get_label_ids`` reads it.
    """

    default_guidance_scale = 4.0

    def labels(self) -> dict[str, int]:
        """Class ids by name, from ``model_index.json`` ``id2label`` (empty when it has none)."""
        id2label = self.index.get("id2label") or {}
        if not isinstance(id2label, dict):
            raise ConfigError("model_index.json id2label is not an object of class names")
        labels = {}
        for key, value in id2label.items():
            if not (isinstance(value, str) and str(key).isdigit()):
                raise ConfigError(
                    f"model_index.json id2label has {key!r}: {value!r}, not id: names"
                )
            for name in value.split(","):
                labels[name.strip()] = int(key)
        return labels

    def class_ids(self, names: list[str]) -> list[int]:
        """The class id of each label name; an unknown name is an error naming it."""
        labels = self.labels()
        unknown = [name for name in names if name not in labels]
        if unknown:
            known = ", ".join(list(labels)[:5]) or "none: this package has no id2label"
            raise ConfigError(f"no class named {unknown[0]!r} (labels: {known}...); or give its id")
        return [labels[name] for name in names]

    def __call__(
        self,
        prompt: str | list[str] | None = None,
        *,
        class_labels: list[int] | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
    ) -> np.ndarray:
        """Images ``[batch, N, N, 3]`` float32 in [0, 1]: one per class name in ``prompt`` or id in ``class_labels``.

        ``latents`` [batch, channels, sample_size, sample_size] replaces the seeded noise.
        """
        if (prompt is None) == (class_labels is None):
            raise ConfigError(
                "DiT takes the classes either by name (prompt) or by id (class_labels)"
            )
        if class_labels is None:
            class_labels = self.class_ids([prompt] if isinstance(prompt, str) else list(prompt))
        classes = self.config_int("transformer", "num_embeds_ada_norm", 1000)
        channels = self.config_int("transformer", "in_channels")
        labels = np.asarray(class_labels, dtype=np.int64).reshape(-1)
        if labels.size == 0 or labels.min() < 0 or labels.max() >= classes:
            raise ConfigError(f"DiT class ids run from 0 to {classes - 1}; given {labels.tolist()}")
        if guidance_scale is None:
            guidance_scale = self.default_guidance_scale
        guided = guidance_scale > 1
        if guided:
            labels = np.concatenate([labels, np.full(labels.shape, classes, dtype=np.int64)])
        size = self.config_int("transformer", "sample_size")
        if latents is None:
            latents = self.initial_noise((len(class_labels), channels, size, size), seed)
        latents = latents.astype(np.float32)

        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            model_input = scheduler.scale_model_input(model_input, t)
            timestep = np.full(model_input.shape[0], t, dtype=np.float32)
            feeds = {"hidden_states": model_input, "timestep": timestep, "class_labels": labels}
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            noise = noise[:, :channels]  # a learned sigma's variance channels are not used
            if guided:  # the class rows come first, then the null class
                cond, uncond = np.split(noise, 2)
                noise = guide(uncond, cond, guidance_scale)
            # diffusers steps the guided pair, whose halves are equal: one half is the same step.
            latents = scheduler.step(noise, t, latents)
        return self.decode(self.unscale_latents(latents))
