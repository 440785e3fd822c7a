"""Build full-size architectures from their HF configs with ``--no-weights``: time and peak memory.

No checkpoint is read and no weight is allocated: parameters become graph
inputs. Each build runs in its own process so its peak RSS is its own.

    uv run python packages/mobius-text/benchmarks/build_no_weights.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

# Public config.json values of the full-size models (the fields that shape the graph).
CONFIGS: dict[str, dict] = {
    "Llama-3-70B": {
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "Mixtral-8x22B": {
        "model_type": "mixtral",
        "vocab_size": 32768,
        "hidden_size": 6144,
        "intermediate_size": 16384,
        "num_hidden_layers": 56,
        "num_attention_heads": 48,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 65536,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "Gemma-3-27B": {
        "model_type": "gemma3_text",
        "vocab_size": 262208,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_hidden_layers": 62,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "query_pre_attn_scalar": 168,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh",
        "torch_dtype": "bfloat16",
    },
    "DeepSeek-V3": {
        "model_type": "deepseek_v3",
        "vocab_size": 129280,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "n_shared_experts": 1,
        "n_routed_experts": 256,
        "routed_scaling_factor": 2.5,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "qk_nope_head_dim": 128,
        "topk_method": "noaux_tc",
        "n_group": 8,
        "topk_group": 4,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "norm_topk_prob": True,
        "max_position_embeddings": 163840,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": {
            "type": "yarn",
            "factor": 40,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
}

# Runs in a child process: one build, then its own wall time and peak RSS as JSON.
CHILD = """
import json, resource, sys, time, io, contextlib
from mobius.cli import main
start = time.perf_counter()
err = io.StringIO()
with contextlib.redirect_stderr(err):
    code = main(["build", "--model", sys.argv[1], sys.argv[2], "--no-weights", "--quiet"])
print(json.dumps({
    "code": code,
    "seconds": time.perf_counter() - start,
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "error": err.getvalue().strip().splitlines()[-1:] ,
}))
"""


def measure(name: str, config: dict, workdir: Path) -> dict:
    model_dir = workdir / name / "hf"
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text(json.dumps(config))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(model_dir), str(workdir / name / "onnx")],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return {"code": out.returncode, "error": [out.stderr.strip().splitlines()[-1:]]}
    result = json.loads(lines[-1])
    graph = workdir / name / "onnx" / "model.onnx"
    result["graph_mb"] = graph.stat().st_size / 2**20 if graph.exists() else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="keep the configs and graphs in this directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.keep or Path(tmp)
        print(f"{'model':<16} {'build s':>8} {'peak RSS MB':>12} {'graph MB':>9}")
        for name, config in CONFIGS.items():
            r = measure(name, config, workdir)
            if r.get("code") != 0:
                print(f"{name:<16} failed: {' '.join(map(str, r.get('error', [])))}")
                continue
            print(
                f"{name:<16} {r['seconds']:>8.1f} {r['peak_rss_mb']:>12.0f} {r['graph_mb']:>9.1f}"
            )


if __name__ == "__main__":
    main()
