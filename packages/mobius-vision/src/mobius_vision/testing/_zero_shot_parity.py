"""Zero-shot image–text parity: similarity logits and embeddings, ONNX Runtime against PyTorch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx

from mobius.testing import (
    PARITY_ATOL,
    build_with_cli,
    perturb_parameters,
    record_parity,
    right_padded_batch,
)
from mobius_vision.testing._vision_parity import _assert_depends_on_image, random_pixels

#: The outputs of the task, as transformers' ``CLIPOutput`` / ``SiglipOutput`` name them.
ZERO_SHOT_OUTPUTS = ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds")


def make_random_dual_encoder(hf_config, seed: int = 0):
    """A float32 ``AutoModel`` (``CLIPModel``, ``SiglipModel``) with every parameter perturbed, eval."""
    import torch
    from transformers import AutoModel

    torch.manual_seed(seed)
    model = AutoModel.from_config(hf_config, dtype=torch.float32, attn_implementation="eager")
    perturb_parameters(model, seed)
    return model.eval()


def naflex_inputs(pixels: np.ndarray, patch_size: int) -> dict:
    """SigLIP 2's inputs for square ``pixels [batch, c, h, w]``, as its processor cuts them.

    ``pixel_values [batch, patches, p*p*c]`` (rows of patches, each patch's pixels
    row by row, channels last), every patch real, each image's patch grid.
    """
    import torch

    batch, channels, height, width = pixels.shape
    rows, cols = height // patch_size, width // patch_size
    patches = pixels.reshape(batch, channels, rows, patch_size, cols, patch_size)
    patches = patches.transpose(0, 2, 4, 3, 5, 1).reshape(batch, rows * cols, -1)
    return dict(
        pixel_values=torch.from_numpy(np.ascontiguousarray(patches)),
        pixel_attention_mask=torch.ones(batch, rows * cols, dtype=torch.int32),
        spatial_shapes=torch.tensor([[rows, cols]] * batch, dtype=torch.int64),
    )


@dataclass
class ZeroShotParity:
    """Max abs differences of the four outputs."""

    ep: str
    diffs: dict[str, float] = field(default_factory=dict)

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        assert set(self.diffs) == set(ZERO_SHOT_OUTPUTS), f"--ep {self.ep}: compared {self.diffs}"
        worst = max(self.diffs.values())
        assert worst <= atol, f"--ep {self.ep}: {self.diffs} > {atol:g}"


def compare_zero_shot(
    torch_model, session, input_ids, attention_mask, pixels, naflex_patch_size=None
) -> dict[str, float]:
    """Run one batch of texts and one of images through both; the max abs difference of each output.

    The graph's ``attention_mask`` input, where it has one, gets ``attention_mask``,
    and PyTorch gets it too; otherwise neither does. With ``naflex_patch_size``
    PyTorch gets the images as SigLIP 2's patches (:func:`naflex_inputs`).
    """
    import torch

    feeds = {"input_ids": input_ids, "pixel_values": pixels}
    if "attention_mask" in {i.name for i in session.get_inputs()}:
        feeds["attention_mask"] = attention_mask
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, feeds), strict=True))
    torch_inputs = {k: torch.from_numpy(v) for k, v in feeds.items()}
    if naflex_patch_size is not None:
        torch_inputs.update(naflex_inputs(pixels, naflex_patch_size))
    with torch.no_grad():
        out = torch_model(**torch_inputs)
    diffs = {}
    for name in ZERO_SHOT_OUTPUTS:
        reference = getattr(out, name).float().numpy()
        if name == "image_embeds":
            _assert_depends_on_image(name, reference)
        diffs[name] = float(np.abs(got[name] - reference).max())
    return diffs


def check_zero_shot_parity(
    hf_config,
    workdir: Path,
    *,
    lengths: tuple[int, ...] = (7, 4, 5),
    images: int = 2,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
    end_token_id: int | None = None,
    pad_token_id: int | None = None,
    naflex_patch_size: int | None = None,
) -> list[ZeroShotParity]:
    """Build a perturbed tiny dual encoder with the CLI and check it against PyTorch.

    The texts are ``lengths`` tokens long, padded at the end (ended by
    ``end_token_id`` and padded with ``pad_token_id`` where given: see
    :func:`~mobius.testing.right_padded_batch`); ``images`` random images. Text and
    image batches differ in size, so a transposed similarity cannot pass.
    ``naflex_patch_size`` gives PyTorch the images as SigLIP 2's patches; the images
    are then ``sqrt(num_patches) * patch_size`` square.
    """
    import onnxruntime as ort

    workdir = Path(workdir)
    torch_model = make_random_dual_encoder(hf_config, seed)
    text_config = torch_model.config.text_config
    input_ids, attention_mask, _ = right_padded_batch(
        list(lengths), text_config.vocab_size, 0, seed, end_token_id, pad_token_id
    )
    vision_config = torch_model.config.vision_config
    if naflex_patch_size is not None:  # a config with no image_size: the native square grid
        side = int(round(vision_config.num_patches**0.5)) * naflex_patch_size
        vision_config = SimpleNamespace(image_size=side, num_channels=vision_config.num_channels)
    pixels = random_pixels(vision_config, images, seed)
    source = workdir / "hf"
    torch_model.save_pretrained(source)
    results = []
    for ep in eps:
        out = build_with_cli(source, workdir / f"onnx-{ep}", "--ep", ep)
        if ep == "default":
            onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
        session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
        diffs = compare_zero_shot(
            torch_model, session, input_ids, attention_mask, pixels, naflex_patch_size
        )
        result = ZeroShotParity(ep, diffs)
        result.assert_close(atol)
        results.append(result)
    return results
