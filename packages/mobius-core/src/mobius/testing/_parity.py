"""Causal-LM parity: prefill and cached decode, ONNX Runtime against PyTorch."""

from __future__ import annotations

import inspect
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from mobius.testing._parity_log import record_parity

PARITY_ATOL = 1e-4


def perturb_parameters(model, seed: int = 0, scale: float = 0.05) -> None:
    """Add seeded Gaussian noise to every parameter and every saved float buffer.

    HF initialises norms to one and biases to zero; a graph that dropped or
    misplaced either would still match such a model, so nothing stays at its init.
    Saved float buffers (a router's ``e_score_correction_bias``) are state that the
    checkpoint carries too; unsaved ones (rotary tables) are left alone, as are
    parameters ``save_pretrained`` leaves out (Marian's fixed position tables).
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    unsaved = [re.compile(p) for p in getattr(model, "_keys_to_ignore_on_save", None) or []]
    saved = {n for n in model.state_dict() if not any(p.search(n) for p in unsaved)}
    tensors = [(n, p) for n, p in sorted(model.named_parameters()) if n in saved]
    tensors += [(n, b) for n, b in sorted(model.named_buffers()) if n in saved]
    with torch.no_grad():
        for _, tensor in tensors:
            if not tensor.is_floating_point():
                continue
            noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float32)
            tensor.add_((noise * scale).to(tensor.dtype))


def make_random_model(
    hf_config, seed: int = 0, attn_implementation: str = "eager", source_class: str | None = None
):
    """A float32 causal LM from ``hf_config`` with every parameter perturbed, in eval mode.

    The reference uses transformers' eager attention: the plain formulation every
    model supports (soft-capping and sinks included). ``source_class`` names another
    transformers class to make instead (a vision–language wrapper whose checkpoint a
    text-only class reads).
    """
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    kwargs = dict(dtype=torch.float32, attn_implementation=attn_implementation)
    if source_class is None:
        model = AutoModelForCausalLM.from_config(hf_config, **kwargs)
    else:
        model = getattr(transformers, source_class)._from_config(hf_config, **kwargs)
    perturb_parameters(model, seed)
    return model.eval()


def load_causal_lm(model_dir: Path, attn_implementation: str = "eager"):
    """transformers' causal LM of a saved checkpoint, float32 in eval mode, and the names
    of its weights that it did not find there."""
    import torch
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(
        model_dir,
        dtype=torch.float32,
        attn_implementation=attn_implementation,
        output_loading_info=True,
        trust_remote_code=False,
    )
    return model.eval(), sorted(info["missing_keys"])


def build_with_cli(model_dir: Path, output_dir: Path, *extra: str) -> Path:
    """Build ``model_dir`` exactly as ``mobius build`` does; returns ``output_dir``."""
    from mobius.cli import main

    code = main(["build", "--model", str(model_dir), str(output_dir), "--quiet", *extra])
    if code != 0:
        raise RuntimeError(f"mobius build failed with exit code {code}")
    return output_dir


def left_padded_batch(lengths: list[int], vocab_size: int, seed: int = 0):
    """Random ``input_ids``, ``attention_mask`` and ``position_ids`` with left padding.

    Position ids count real tokens only, as ``generate`` makes them.
    """
    rng = np.random.default_rng(seed)
    width = max(lengths)
    input_ids = rng.integers(1, vocab_size, size=(len(lengths), width), dtype=np.int64)
    attention_mask = np.zeros_like(input_ids)
    for row, length in enumerate(lengths):
        attention_mask[row, width - length :] = 1
        input_ids[row, : width - length] = 0
    position_ids = np.where(attention_mask == 1, np.cumsum(attention_mask, -1) - 1, 1)
    return input_ids, attention_mask, position_ids


class OnnxCausalLM:
    """A causal-LM graph in ONNX Runtime, driven step by step with its KV cache."""

    def __init__(self, model_path: Path) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        self.session = ort.InferenceSession(
            str(model_path), options, providers=["CPUExecutionProvider"]
        )
        self.past_inputs = [i for i in self.session.get_inputs() if i.name.startswith("past_")]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def empty_cache(self, batch: int) -> dict[str, np.ndarray]:
        """Zero-length KV caches and zero-filled fixed-size states (conv, ssm)."""
        cache = {}
        for inp in self.past_inputs:
            shape = [batch if d == "batch" else 0 if isinstance(d, str) else d for d in inp.shape]
            dtype = np.float16 if "float16" in inp.type else np.float32
            cache[inp.name] = np.zeros(shape, dtype=dtype)
        return cache

    def __call__(self, input_ids, attention_mask, position_ids, cache):
        feeds = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        outputs = dict(
            zip(self.output_names, self.session.run(None, {**feeds, **cache}), strict=True)
        )
        present = {
            name.replace("present.", "past_key_values."): value
            for name, value in outputs.items()
            if name.startswith("present.")
        }
        return outputs["logits"], present


@dataclass
class CausalLMParity:
    """What a parity run measured: max abs logit difference per step, and both token streams."""

    prefill_diff: float = 0.0
    decode_diffs: list[float] = field(default_factory=list)
    torch_tokens: list[list[int]] = field(default_factory=list)
    onnx_tokens: list[list[int]] = field(default_factory=list)
    ep: str = "default"

    @property
    def max_diff(self) -> float:
        return max([self.prefill_diff, *self.decode_diffs])

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        assert self.onnx_tokens == self.torch_tokens, (
            f"--ep {self.ep}: greedy tokens differ: onnx {self.onnx_tokens} "
            f"torch {self.torch_tokens}"
        )
        assert self.max_diff <= atol, (
            f"--ep {self.ep}: max abs logit diff {self.max_diff:.3g} > {atol:g} "
            f"(prefill {self.prefill_diff:.3g}, decode {[f'{d:.3g}' for d in self.decode_diffs]})"
        )


def text_forward(wrapper):
    """A multimodal wrapper model run on token ids alone, with its text config: what
    :func:`compare_causal_lm` reads (``config.vocab_size``, the cache's layout)."""
    import torch

    class TextForward(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wrapper = wrapper
            self.config = wrapper.config.get_text_config()

        def forward(
            self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=True
        ):
            return self.wrapper(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                use_cache=use_cache,
            )

    return TextForward()


def compare_causal_lm(
    torch_model,
    onnx_model: OnnxCausalLM,
    lengths,
    decode_steps=8,
    seed=0,
    decode_attention_mask: bool = True,
    torch_cache=None,
    torch_full_ids: bool = False,
):
    """Run prefill then ``decode_steps`` greedy steps through both caches, feeding torch's tokens.

    ``decode_attention_mask=False`` gives PyTorch no mask after prefill, as ``generate``
    does for state-space models (the ONNX graph always gets the full mask). A PyTorch
    model without a cache (OpenAI GPT) re-reads the whole sequence at every step; the
    ONNX graph still decodes through its cache. ``torch_cache(model, batch)`` makes the
    PyTorch cache for models that need their own class (xLSTM's ``xLSTMCache``).
    ``torch_full_ids``: the PyTorch model takes the whole sequence with its cache at every
    step and slices off the cached part itself (CPM-Ant); the ONNX graph takes the new tokens.
    """
    steps = torch_reference_steps(
        torch_model,
        lengths,
        decode_steps,
        seed,
        decode_attention_mask,
        torch_cache,
        torch_full_ids,
    )
    return compare_with_reference(onnx_model, steps)


def torch_reference_steps(
    torch_model,
    lengths,
    decode_steps=8,
    seed=0,
    decode_attention_mask: bool = True,
    torch_cache=None,
    torch_full_ids: bool = False,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """PyTorch's side of :func:`compare_causal_lm`: per step, the ONNX feeds and torch's logits.

    Each step is ``(input_ids, attention_mask, position_ids, torch_logits)``: what the ONNX
    graph is fed at that step (the new tokens, the full mask, their positions) and the
    logits PyTorch gave for them. Torch's greedy tokens drive every step, so the run does
    not depend on the graph: one run serves every graph compared against it
    (:func:`compare_with_reference`), the ``--ep default`` and ``--ep cpu`` builds alike.
    """
    import torch
    from transformers import DynamicCache

    vocab = torch_model.config.vocab_size
    input_ids, attention_mask, position_ids = left_padded_batch(list(lengths), vocab, seed)
    if torch_cache is not None:
        cache = torch_cache(torch_model, len(lengths))
    else:
        cache = DynamicCache(config=torch_model.config)
    parameters = inspect.signature(torch_model.forward).parameters
    takes_positions = "position_ids" in parameters
    takes_cache = bool({"cache", "past_key_values"} & set(parameters))
    all_ids, all_positions = input_ids, position_ids
    steps = []
    for step in range(decode_steps + 1):
        if takes_cache:
            ids = all_ids if torch_full_ids else input_ids
            inputs = dict(input_ids=torch.from_numpy(ids), cache=cache, use_cache=True)
        else:
            inputs = dict(input_ids=torch.from_numpy(all_ids))
        if step == 0 or decode_attention_mask or not takes_cache:
            inputs["attention_mask"] = torch.from_numpy(attention_mask)
        if takes_positions:  # ALiBi models (Bloom, MPT...) have no position ids
            inputs["position_ids"] = torch.from_numpy(
                position_ids if takes_cache else all_positions
            )
        with torch.no_grad():
            out = torch_model(**inputs)
        torch_logits = out.logits[:, -input_ids.shape[1] :].float().numpy()  # (B, S, V)
        steps.append((input_ids, attention_mask, position_ids, torch_logits))
        torch_next = torch_logits[:, -1].argmax(-1)
        input_ids = torch_next[:, None].astype(np.int64)  # (B, 1)
        position_ids = position_ids[:, -1:] + 1
        attention_mask = np.concatenate([attention_mask, np.ones_like(input_ids)], axis=1)
        all_ids = np.concatenate([all_ids, input_ids], axis=1)
        all_positions = np.concatenate([all_positions, position_ids], axis=1)
    return steps


def compare_with_reference(onnx_model: OnnxCausalLM, steps) -> CausalLMParity:
    """The ONNX graph run through its cache on the feeds of :func:`torch_reference_steps`,
    its logits compared with torch's at every step (prefill on real tokens only)."""
    result = CausalLMParity()
    real = steps[0][1].astype(bool)
    onnx_cache = onnx_model.empty_cache(real.shape[0])
    for step, (input_ids, attention_mask, position_ids, torch_logits) in enumerate(steps):
        onnx_logits, onnx_cache = onnx_model(input_ids, attention_mask, position_ids, onnx_cache)
        onnx_logits = onnx_logits.astype(np.float32)
        if step == 0:  # padded positions carry no meaning: compare real tokens only
            result.prefill_diff = float(np.abs(torch_logits - onnx_logits)[real].max())
        else:
            result.decode_diffs.append(float(np.abs(torch_logits - onnx_logits).max()))
        result.torch_tokens.append(torch_logits[:, -1].argmax(-1).tolist())
        result.onnx_tokens.append(onnx_logits[:, -1].argmax(-1).tolist())
    return result


def check_causal_lm_parity(
    hf_config,
    workdir: Path,
    *,
    batches=((7,), (7, 4)),
    decode_steps: int = 8,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    decode_attention_mask: bool = True,
    attn_implementation: str = "eager",
    torch_cache=None,
    eps: tuple[str, ...] = ("default", "cpu"),
    torch_full_ids: bool = False,
    source_class: str | None = None,
) -> list[CausalLMParity]:
    """Build a perturbed tiny model of ``hf_config`` with the CLI and check it against PyTorch.

    Each entry of ``batches`` lists prompt lengths: ``(7,)`` is batch 1, ``(7, 4)``
    batch 2 with the second row left-padded. ``attn_implementation`` picks the
    PyTorch reference path (eager unless a model's eager path is known to be wrong).
    The model is built once per execution provider in ``eps`` (``--ep``): the
    portable graph and the one with ONNX Runtime's fused CPU ops.
    ``source_class`` (a wrapper class, ``Qwen3_5ForConditionalGeneration``) is the
    model saved; the reference is then the causal LM that ``AutoModelForCausalLM``
    loads from that checkpoint (the text-only ``Qwen3_5ForCausalLM``), and the build
    names that class as ``--model-type`` (the registry key of the text-only class).
    Where that class misses weights in the wrapper's layout (it would run them
    random), the wrapper itself, on token ids alone, is the reference (with a warning).
    ``torch_full_ids`` feeds the PyTorch model the whole sequence at every step (see
    :func:`compare_causal_lm`).
    Returns the measurements, per ep then per batch.
    """
    workdir = Path(workdir)
    torch_model = make_random_model(hf_config, seed, attn_implementation, source_class)
    torch_model.save_pretrained(workdir / "hf")
    extra = []
    if source_class is not None:
        text_model, missing = load_causal_lm(workdir / "hf", attn_implementation)
        extra = ["--model-type", type(text_model).__name__]
        if missing:  # transformers' own class cannot read the wrapper's layout (Emu3 in 5.24)
            warnings.warn(
                f"{type(text_model).__name__} does not find {missing[:3]}... in a "
                f"{source_class} checkpoint: the reference is the wrapper on text alone",
                stacklevel=2,
            )
            torch_model = text_forward(torch_model)
        else:
            torch_model = text_model
    results = []
    references = {}  # prompt lengths -> torch_reference_steps
    for ep in eps:
        out = build_with_cli(workdir / "hf", workdir / f"onnx-{ep}", "--ep", ep, *extra)
        if ep == "default":  # contrib ops are outside the ONNX checker's schemas
            onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
        onnx_model = OnnxCausalLM(out / "model.onnx")
        for lengths in map(tuple, batches):
            if lengths not in references:  # torch's run is the same for every ep: once
                references[lengths] = torch_reference_steps(
                    torch_model,
                    list(lengths),
                    decode_steps,
                    seed,
                    decode_attention_mask,
                    torch_cache,
                    torch_full_ids,
                )
            result = compare_with_reference(onnx_model, references[lengths])
            result.ep = ep
            result.assert_close(atol)
            results.append(result)
    return results
