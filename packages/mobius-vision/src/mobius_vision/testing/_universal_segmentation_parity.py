"""Universal-segmentation parity: ``class_queries_logits`` and ``masks_queries_logits`` of a
MaskFormer build, ONNX Runtime against PyTorch.

The semantic kit's (:mod:`._segmentation_parity`) perturbed tiny model, images and scaled
difference, with this contract's two outputs. Class logits stay near the scale of their
inputs; mask logits are dot products of two embeddings and can reach tens, so each is bounded
absolutely (:data:`~mobius.testing.PARITY_ATOL`) up to a scale of 1 and relative to its
largest reference value above it.

A family that conditions its queries on a task (OneFormer: the ``task_inputs`` input) is
given ``tasks``: the kit saves a tiny tokenizer with the model (:func:`write_task_tokenizer`)
and runs each pair of tasks on the two images, ``task_inputs`` made as OneFormerProcessor
makes them (the ids times the attention mask, padded to ``task_seq_len``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
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
#: The words of OneFormer's task texts ("the task is semantic"...).
TASK_WORDS = ("the", "task", "is", "semantic", "instance", "panoptic")


def write_task_tokenizer(directory: Path):
    """A word-level fast tokenizer of :data:`TASK_WORDS` with CLIP's start and end tokens
    around each text, padded on the right (as CLIP's), saved in ``directory``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = {"!": 0, "<|startoftext|>": 1, "<|endoftext|>": 2}
    vocab = {**specials, **{word: i for i, word in enumerate(TASK_WORDS, start=len(specials))}}
    model = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    model.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    model.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>",
        special_tokens=[("<|startoftext|>", 1), ("<|endoftext|>", 2)],
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=model,
        bos_token="<|startoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",  # CLIP's: nonzero, so the mask's zeroing shows
        padding_side="right",
    )
    tokenizer.save_pretrained(directory)
    return tokenizer


def task_inputs(tokenizer, tasks, length: int) -> np.ndarray:
    """OneFormerProcessor's ``task_inputs`` of ``tasks`` (one per image): the ids of "the task
    is TASK" padded to ``length``, times the attention mask; int64 ``[len(tasks), length]``."""
    texts = [f"the task is {task}" for task in tasks]
    tokens = tokenizer(texts, padding="max_length", max_length=length, truncation=True)
    ids, mask = np.asarray(tokens["input_ids"]), np.asarray(tokens["attention_mask"])
    return (ids * mask).astype(np.int64)


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
    tasks: tuple[str, ...] = (),
) -> list[VisionParity]:
    """Build a perturbed tiny ``model_class`` (``MaskFormerForInstanceSegmentation``...) with
    the CLI (``--ep`` each of ``eps``) and compare both outputs with transformers' on a batch
    of ``batch`` different random images of ``image_size``; with ``tasks`` (OneFormer), once
    per task, the first image given it and the others the next tasks in turn."""
    import onnxruntime as ort
    import torch

    workdir = Path(workdir)
    torch_model = make_random_segmenter(hf_config, seed, model_class)
    source = workdir / "hf"
    torch_model.save_pretrained(source)
    write_preprocessor_config(source, image_size, processor)
    pixels = random_image_batch(batch, 3, image_size, seed)
    feeds = {"": {"pixel_values": pixels}}
    if tasks:
        tokenizer = write_task_tokenizer(source)
        length = hf_config.task_seq_len
        feeds = {
            "-".join(chosen): {
                "pixel_values": pixels,
                "task_inputs": task_inputs(tokenizer, chosen, length),
            }
            for chosen in (
                [tasks[(start + i) % len(tasks)] for i in range(batch)]
                for start in range(len(tasks))
            )
        }
    references = {}
    for key, feed in feeds.items():
        with torch.no_grad():
            out = torch_model(**{k: torch.from_numpy(v) for k, v in feed.items()})
        for name in UNIVERSAL_SEGMENTATION_OUTPUTS:
            reference = getattr(out, name).numpy()
            _assert_depends_on_image(name, reference)
            references[f"{name}[{key}]" if key else name] = reference
    if len(feeds) > 1:  # a graph that ignored task_inputs must not pass
        first, second = (references[f"class_queries_logits[{key}]"] for key in list(feeds)[:2])
        assert not np.allclose(first, second, atol=1e-3), "the reference ignores the task"
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
        inputs = [i.name for i in session.get_inputs()]
        assert inputs == list(next(iter(feeds.values()))), f"{TASK} inputs are {inputs}"
        got = {}
        for key, feed in feeds.items():
            for name, value in zip(names, session.run(None, feed), strict=True):
                got[f"{name}[{key}]" if key else name] = value
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
