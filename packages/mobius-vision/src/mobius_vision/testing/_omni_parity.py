"""Parity of models that see and hear (the audio-vision-language contract) against PyTorch.

The vision–language kit (:mod:`._vl_parity`) with audio beside the images: each prompt
of the batch goes through the family's real transformers processor with its images and
its audio clips (random pixels, random noise), so the placeholders of both sit where
the processor puts them. The ONNX side is the same :class:`~mobius_vision.vl_model.OnnxVisionLanguage`
(its ``audio/`` graph runs beside ``vision/``); prefill and decode steps are compared by
:func:`._vl_parity.compare_vision_language`.

A whole checkpoint whose text model sits inside a wrapper (Qwen2.5-Omni's ``thinker``
beside the talker) is saved whole and compared through its ``reference_part``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.testing import PARITY_ATOL, CausalLMParity, perturb_parameters
from mobius_vision.testing._vl_parity import compare_every_build, random_images


def random_clips(lengths: tuple[int, ...], seed: int) -> list[np.ndarray]:
    """Random float32 clips of ``lengths`` samples, as loud as speech (standard deviation 0.1)."""
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(n)).astype(np.float32) for n in lengths]


def make_random_model(hf_config, model_class: str, seed: int = 0):
    """A float32 transformers ``model_class`` of ``hf_config``, every parameter perturbed, eval."""
    import torch
    import transformers

    torch.manual_seed(seed)
    model = getattr(transformers, model_class)._from_config(
        hf_config, dtype=torch.float32, attn_implementation="eager"
    )
    perturb_parameters(model, seed)
    return model.eval()


def as_model_inputs(batch) -> dict[str, np.ndarray]:
    """A processor's numpy outputs as the models take them: float32 floats, int64 ints."""
    inputs = {}
    for name, value in dict(batch).items():
        value = np.asarray(value)
        if np.issubdtype(value.dtype, np.floating):
            value = value.astype(np.float32)
        elif np.issubdtype(value.dtype, np.integer):
            value = value.astype(np.int64)
        inputs[name] = value
    return inputs


def check_audio_vision_language_parity(
    hf_config,
    processor,
    workdir: Path,
    *,
    model_class: str,
    prompts: tuple[str, ...],
    image_sizes: tuple[tuple[int, int], ...],
    clip_lengths: tuple[int, ...],
    rope_positions=None,
    reference_part: str | None = None,
    decode_steps: int = 8,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    forms: tuple[str, ...] = ("split", "single"),
    eps: tuple[str, ...] = ("default", "cpu"),
    prefill_model=None,
) -> list[CausalLMParity]:
    """Build a perturbed tiny model with the CLI per form and ep, and check it against PyTorch.

    ``model_class`` is the transformers class made from ``hf_config`` and saved;
    ``reference_part`` the attribute of it that computes the text (``"thinker"``), or
    None for the model itself. ``prompts`` hold as many image and audio placeholders as
    ``image_sizes`` and ``clip_lengths`` (samples at the feature extractor's rate) give,
    in order over the batch (no ``clip_lengths``: a prompt of images alone, the processor
    given no audio). ``rope_positions(model, inputs)`` gives the 3-D rotary
    positions and deltas of the reference (see :func:`._vl_parity.compare_vision_language`);
    ``prefill_model(reference)`` runs its prefill where its forward takes the processor's
    outputs under other names than the graphs do (ibid.).
    """
    workdir = Path(workdir)
    model = make_random_model(hf_config, model_class, seed)
    model.save_pretrained(workdir / "hf")
    reference = getattr(model, reference_part) if reference_part else model
    images = [random_images(1, size, seed + i)[0] for i, size in enumerate(image_sizes)]
    clips = random_clips(clip_lengths, seed)
    batch = processor(  # no clips: no audio at all (a checkpoint without an audio tower)
        text=list(prompts), images=images, audio=clips or None, return_tensors="np", padding=True
    )
    inputs = as_model_inputs(batch)
    return compare_every_build(
        reference,
        inputs,
        workdir,
        forms=forms,
        eps=eps,
        atol=atol,
        decode_steps=decode_steps,
        rope_positions=rope_positions,
        prefill_model=prefill_model,
    )
