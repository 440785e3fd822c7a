"""One tiny VL case made ready for the generate tests: the torch model, its processor,
the checkpoint directory and the split package built with the CLI.

The generate test files subclass :class:`BuiltVL` where their family differs (how the
processor is made or called); the rest is the same for every family.
"""

from __future__ import annotations

import inspect
import json

import torch

from mobius.testing import build_with_cli, perturb_parameters
from mobius_vision.testing import make_random_vl_model


def save_processor(processor, directory) -> None:
    """The processor's files as ``save_pretrained`` writes them: the tokenizer, and
    ``processor_config.json`` with the image processor nested. (The cases' subclasses, made
    to run without a video processor, cannot ``save_pretrained``: the settings are those
    of the transformers class's ``__init__``.)"""
    processor.tokenizer.save_pretrained(directory)
    if hasattr(processor, "qformer_tokenizer"):  # InstructBLIP's, in a folder of its own
        processor.qformer_tokenizer.save_pretrained(directory / "qformer_tokenizer")
    base = next(c for c in type(processor).__mro__ if c.__module__.startswith("transformers."))
    skip = {"self", "image_processor", "tokenizer", "video_processor", "chat_template", "kwargs"}
    settings = {"image_processor": processor.image_processor.to_dict()}
    for name in inspect.signature(base.__init__).parameters:
        value = getattr(processor, name, None)
        if name not in skip and isinstance(value, (int, float, str, list)):
            settings[name] = value
    (directory / "processor_config.json").write_text(json.dumps(settings), encoding="utf-8")


class BuiltVL:
    """A parity case ``(model_type, make_config, make_processor[, options])`` built under ``root``."""

    #: Perturb the weights again, more: near its init a tiny model says the same words
    #: whatever the image; larger weights make its greedy text depend on the pixels,
    #: so the test can fail.
    sharpen = True

    def __init__(self, case: tuple, root, family: str = "") -> None:
        _model_type, make_config, make_processor, *options = case
        self.family = family
        self.options = options[0] if options else {}
        config = make_config()
        self.processor = self.make_processor(make_processor, config)
        self.model = make_random_vl_model(config, seed=0)
        if self.sharpen:
            perturb_parameters(self.model, seed=1, scale=0.2)
        self.hf = root / "hf"
        self.model.save_pretrained(self.hf)
        save_processor(self.processor, self.hf)
        self.package = build_with_cli(self.hf, root / "split", "--form", "split")

    def make_processor(self, make_processor, config):
        """The case's transformers processor for ``config``."""
        return make_processor(config)

    def hf_inputs(self, prompt: str, images: list, tensors: str = "np") -> dict:
        """The transformers processor's inputs for one prompt and its images."""
        return dict(self.processor(text=[prompt], images=images or None, return_tensors=tensors))

    def greedy_tokens(self, prompt: str, images: list, max_new_tokens: int) -> list[int]:
        """The new tokens of transformers' greedy ``generate``."""
        inputs = self.hf_inputs(prompt, images, "pt")
        with torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        return out[0, inputs["input_ids"].shape[1] :].tolist()

    def greedy_text(self, prompt: str, images: list, max_new_tokens: int = 8) -> str:
        """transformers' greedy ``generate``, decoded as the runner prints it."""
        new = self.greedy_tokens(prompt, images, max_new_tokens)
        return self.processor.tokenizer.decode(new, skip_special_tokens=True)
