"""Segmentation parity: ``logits`` of a semantic-segmentation build, and dense backbones'
feature maps, ONNX Runtime against PyTorch.

A case is a transformers config; the kit makes the perturbed tiny model, saves it with a
``preprocessor_config.json`` naming the image size (the size the build reads), builds it
with the CLI and compares the logits on a batch of two different random images. Logits of
a random head stay near the scale of their inputs, so the bound is absolute
(:data:`~mobius.testing.PARITY_ATOL`) up to a scale of 1 and relative to the largest
reference value above it (a UperNet's BatchNorm stack can reach tens).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx

from mobius import apply_weights, build_from_module
from mobius.model import Model
from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters
from mobius_vision.config import image_size_pair
from mobius_vision.models._backbone import backbone
from mobius_vision.models._backbone_config import backbone_config
from mobius_vision.testing._vision_parity import VisionParity, _assert_depends_on_image

TASK = "semantic-segmentation"


def make_random_segmenter(hf_config, seed: int = 0, model_class: str | None = None):
    """A float32 transformers semantic-segmentation model of ``hf_config``, perturbed, eval."""
    import torch
    import transformers

    torch.manual_seed(seed)
    auto = (
        getattr(transformers, model_class)
        if model_class
        else transformers.AutoModelForSemanticSegmentation
    )
    kwargs = dict(dtype=torch.float32, attn_implementation="eager")
    if hasattr(auto, "from_config"):
        model = auto.from_config(hf_config, **kwargs)
    else:  # a model class, not an Auto class
        hf_config.architectures = [model_class]
        model = auto._from_config(hf_config, **kwargs)
    perturb_parameters(model, seed)
    return model.eval()


def write_preprocessor_config(directory: Path, image_size: tuple[int, int], processor: str):
    """A ``preprocessor_config.json`` of ``processor`` resizing to ``image_size``."""
    height, width = image_size
    settings = {"image_processor_type": processor, "size": {"height": height, "width": width}}
    (Path(directory) / "preprocessor_config.json").write_text(json.dumps(settings))


def random_image_batch(batch: int, channels: int, image_size: tuple[int, int], seed: int):
    """Normalised-looking pixels ``[batch, channels, height, width]``, a different image each."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, channels, *image_size)).astype(np.float32)


def scaled_difference(got: np.ndarray, reference: np.ndarray) -> float:
    """Max abs difference, divided by the reference's largest magnitude where that exceeds 1."""
    return float(np.abs(got - reference).max() / max(1.0, float(np.abs(reference).max())))


def check_semantic_segmentation_parity(
    hf_config,
    workdir: Path,
    *,
    image_size: tuple[int, int] = (64, 64),
    processor: str = "SegformerImageProcessor",
    batch: int = 2,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
    model_class: str | None = None,
) -> list[VisionParity]:
    """Build a perturbed tiny segmenter with the CLI (``--ep`` each of ``eps``) and compare its
    ``logits`` with transformers' (``AutoModelForSemanticSegmentation`` or ``model_class``) on
    a batch of random images of ``image_size``, which the saved ``preprocessor_config.json``
    (of ``processor``) names as the build's size."""
    import onnxruntime as ort
    import torch

    workdir = Path(workdir)
    torch_model = make_random_segmenter(hf_config, seed, model_class)
    source = workdir / "hf"
    torch_model.save_pretrained(source)
    write_preprocessor_config(source, image_size, processor)
    channels = getattr(hf_config, "num_channels", None) or 3
    pixels = random_image_batch(batch, channels, image_size, seed)
    with torch.no_grad():
        reference = torch_model(pixel_values=torch.from_numpy(pixels)).logits.numpy()
    _assert_depends_on_image("logits", reference)
    results = []
    for ep in eps:
        out = build_with_cli(source, workdir / f"onnx-{ep}", "--ep", ep)
        if ep == "default":
            onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
        session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        assert names == ["logits"], f"a {TASK} graph returns logits alone, not {names}"
        (logits,) = session.run(None, {"pixel_values": pixels})
        assert logits.shape == reference.shape, f"logits {logits.shape} != {reference.shape}"
        result = VisionParity(TASK, ep, {"logits": scaled_difference(logits, reference)})
        result.assert_close(atol)
        results.append(result)
    return results


def check_backbone_parity(
    hf_config,
    workdir: Path,
    *,
    batch: int = 2,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    any_size: tuple[tuple[int, int], ...] = (),
) -> VisionParity:
    """mobius's ``backbone_class`` of ``hf_config.model_type`` against transformers'
    ``AutoBackbone``: every feature map, on a batch of random images at the config's
    ``image_size``. The backbone is built as a module (it is no registered model of its own)
    and filled from the transformers model's saved checkpoint, every tensor used or ignored.
    ``any_size``: image sizes instead, one graph of the family's backbone for heads that take
    any size (:func:`~mobius_vision.models._backbone.backbone`) run at each."""
    import onnxruntime as ort
    import torch
    import transformers

    torch.manual_seed(seed)
    torch_model = transformers.AutoBackbone.from_config(hf_config, dtype=torch.float32)
    perturb_parameters(torch_model, seed)
    torch_model.eval()
    sizes = any_size or (image_size_pair(getattr(hf_config, "image_size", 224)),)
    batches = [random_image_batch(batch, hf_config.num_channels, size, seed) for size in sizes]
    with torch.no_grad():
        references = [
            [m.numpy() for m in torch_model(torch.from_numpy(pixels)).feature_maps]
            for pixels in batches
        ]

    probe = BackboneProbe.of(hf_config, any_size=bool(any_size))
    package = build_from_module(probe, task=TASK, config=probe.config)
    import onnx_ir as ir
    from safetensors.numpy import load_file

    # The names a checkpoint holds are the saved ones (transformers renames some in memory).
    torch_model.save_pretrained(Path(workdir) / "hf")
    saved = load_file(Path(workdir) / "hf" / "model.safetensors")
    state = {f"backbone.{k}": ir.tensor(v) for k, v in saved.items()}
    ignored = [f"backbone.{pattern}" for pattern in probe.backbone.ignored]
    apply_weights(package.models.values(), state, ignore=ignored)
    path = Path(workdir) / "backbone"
    package.save(path, progress=False)
    session = ort.InferenceSession(str(path / "model.onnx"), providers=["CPUExecutionProvider"])
    diffs = {}
    for size, pixels, maps in zip(sizes, batches, references, strict=True):
        got = session.run(None, {"pixel_values": pixels})
        assert len(got) == len(maps), f"{len(got)} maps, transformers {len(maps)}"
        at = f" at {size[0]}x{size[1]}" if any_size else ""
        for i, (mine, reference) in enumerate(zip(got, maps, strict=True)):
            _assert_depends_on_image(f"feature_maps.{i}", reference)
            assert mine.shape == reference.shape, f"map {i}{at}: {mine.shape} != {reference.shape}"
            diffs[f"feature_maps.{i}{at}"] = scaled_difference(mine, reference)
    result = VisionParity("backbone", "default", diffs)
    result.assert_close(atol)
    return result


class BackboneProbe(Model):
    """A registered family's backbone as a one-graph model: ``pixel_values`` -> its maps
    (``feature_maps.0``...), parameters under ``backbone.``."""

    task = TASK

    def __init__(self, config, module) -> None:
        super().__init__()
        self.config = config
        self.backbone = module

    @classmethod
    def of(cls, hf_config, any_size: bool = False) -> BackboneProbe:
        """The probe of the backbone mobius registers for ``hf_config.model_type`` (for heads
        that take any image size: ``pixel_values`` of a symbolic height and width)."""
        config = backbone_config(hf_config)
        module = backbone(hf_config.model_type, config, any_size=any_size)
        if any_size:  # the task reads the input's size from the config it is given
            config = SimpleNamespace(
                image_size=("height", "width"),
                num_channels=config.num_channels,
                out_features=config.out_features,
            )
        return cls(config, module)

    def output_shapes(self) -> dict[str, list]:
        count = len(self.config.out_features)
        return {
            f"feature_maps.{i}": ["batch", f"channels_{i}", f"h_{i}", f"w_{i}"]
            for i in range(count)
        }

    def forward(self, op, pixel_values):
        maps = self.backbone(op, pixel_values)
        return {f"feature_maps.{i}": x for i, x in enumerate(maps)}
