"""Universal-segmentation parity: ``class_queries_logits`` and ``masks_queries_logits`` of a
MaskFormer build, ONNX Runtime against PyTorch.

The semantic kit's (:mod:`._segmentation_parity`) perturbed tiny model, images and scaled
difference, with this contract's two outputs. Class logits stay near the scale of their
inputs; mask logits are dot products of two embeddings and can reach tens, so each is bounded
absolutely (:data:`~mobius.testing.PARITY_ATOL`) up to a scale of 1 and relative to its
largest reference value above it.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_vision.tasks.universal_segmentation import UNIVERSAL_SEGMENTATION_OUTPUTS
from mobius_vision.testing._segmentation_parity import (
    make_random_segmenter,
    random_image_batch,
    scaled_difference,
    write_preprocessor_config,
)
from mobius_vision.testing._vision_parity import VisionParity, _assert_depends_on_image

TASK = "universal-segmentation"


def check_universal_segmentation_parity(
    hf_config,
    workdir: Path,
    *,
    model_class: str,
    image_size: tuple[int, int] = (64, 64),
    processor: str = "MaskFormerImageProcessor",
    batch: int = 2,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
) -> list[VisionParity]:
    """Build a perturbed tiny ``model_class`` (``MaskFormerForInstanceSegmentation``...) with
    the CLI (``--ep`` each of ``eps``) and compare both outputs with transformers' on a batch
    of ``batch`` different random images of ``image_size``."""
    import onnxruntime as ort
    import torch

    workdir = Path(workdir)
    torch_model = make_random_segmenter(hf_config, seed, model_class)
    source = workdir / "hf"
    torch_model.save_pretrained(source)
    write_preprocessor_config(source, image_size, processor)
    pixels = random_image_batch(batch, 3, image_size, seed)
    with torch.no_grad():
        out = torch_model(pixel_values=torch.from_numpy(pixels))
    references = {name: getattr(out, name).numpy() for name in UNIVERSAL_SEGMENTATION_OUTPUTS}
    for name, reference in references.items():
        _assert_depends_on_image(name, reference)
    results = []
    for ep in eps:
        built = build_with_cli(source, workdir / f"onnx-{ep}", "--ep", ep)
        if ep == "default":
            onnx.checker.check_model(str(built / "model.onnx"), full_check=True)
        session = ort.InferenceSession(
            str(built / "model.onnx"), providers=["CPUExecutionProvider"]
        )
        names = [o.name for o in session.get_outputs()]
        assert names == list(UNIVERSAL_SEGMENTATION_OUTPUTS), f"{TASK} outputs are {names}"
        got = dict(zip(names, session.run(None, {"pixel_values": pixels}), strict=True))
        diffs = {}
        for name, reference in references.items():
            assert got[name].shape == reference.shape, (
                f"{name} {got[name].shape} != {reference.shape}"
            )
            diffs[name] = scaled_difference(got[name], reference)
        result = VisionParity(TASK, ep, diffs)
        result.assert_close(atol)
        results.append(result)
    return results
