"""Builds stream weights: peak RSS grows by about the largest tensor, not by the checkpoint.

A ~420 MB float32 Llama checkpoint (largest tensor 16 MB) is built to f16 in a
child process. The child records its RSS once the graphs are built (imports, graphs,
lazy weights: nothing read yet), resets the kernel's high-water mark, saves, and
reports the new high-water mark. Holding every tensor, or keeping the checkpoint's
memory-mapped pages resident, would add ~420 MB; streaming adds a few times the
largest tensor (its mapping, its cast and its transposed copy).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx_ir as ir
import pytest
from safetensors.numpy import save_file

from mobius.components._linear import TransposedParameter
from mobius.errors import CheckpointError
from mobius.weights import SafetensorsCheckpoint, apply_weights
from mobius.weights._safetensors import CheckpointTensor

MB = 1 << 20
HIDDEN, INTERMEDIATE, LAYERS, VOCAB = 1024, 4096, 6, 4096
LARGEST = INTERMEDIATE * HIDDEN * 4  # an MLP projection in float32: 16 MB
# Streaming holds the tensor's mapping (1x), its f16 cast (0.5x) and transposed copy
# (0.5x); allow twice that plus allocator slack, far below the 420 MB checkpoint.
ALLOWED_GROWTH = 2 * 2 * LARGEST + 32 * MB

CHILD = r"""
import json, sys
sys.modules["torch"] = None  # the build never needs torch; importing it only costs time
from mobius._build import build

def status(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(key + ":"))

package = build(sys.argv[1], dtype="f16")
before = status("VmRSS")
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS: the peak below is the save's own
    reset = True
except OSError:
    reset = False
package.save(sys.argv[2], progress=False)
print(json.dumps({"before": before, "peak": status("VmHWM"), "reset": reset}))
"""


def _write_checkpoint(directory: Path) -> int:
    """A float32 Llama in two shards (a ~420 MB checkpoint) with an index; returns its bytes."""
    directory.mkdir()
    config = {
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "max_position_embeddings": 256,
        "tie_word_embeddings": False,
    }
    (directory / "config.json").write_text(json.dumps(config))
    # Tiling one random block keeps the writer quick; every page still holds data.
    block = np.random.default_rng(0).standard_normal(1 << 18, dtype=np.float32) * 0.02

    def weight(*shape: int) -> np.ndarray:
        return np.resize(block, shape)

    shards: list[dict[str, np.ndarray]] = [{"model.embed_tokens.weight": weight(VOCAB, HIDDEN)}, {}]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shards[i * 2 // LAYERS].update(
            {
                p + "input_layernorm.weight": np.ones(HIDDEN, np.float32),
                p + "post_attention_layernorm.weight": np.ones(HIDDEN, np.float32),
                **{p + f"self_attn.{n}_proj.weight": weight(HIDDEN, HIDDEN) for n in "qkvo"},
                p + "mlp.gate_proj.weight": weight(INTERMEDIATE, HIDDEN),
                p + "mlp.up_proj.weight": weight(INTERMEDIATE, HIDDEN),
                p + "mlp.down_proj.weight": weight(HIDDEN, INTERMEDIATE),
            }
        )
    shards[-1]["model.norm.weight"] = np.ones(HIDDEN, np.float32)
    shards[-1]["lm_head.weight"] = weight(VOCAB, HIDDEN)

    weight_map, total = {}, 0
    for n, tensors in enumerate(shards, 1):
        name = f"model-{n:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, directory / name)
        weight_map |= dict.fromkeys(tensors, name)
        total += sum(t.nbytes for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    assert max(t.nbytes for s in shards for t in s.values()) == LARGEST
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RSS from /proc (Linux)")
def test_build_streams_weights(tmp_path: Path) -> None:
    checkpoint_bytes = _write_checkpoint(tmp_path / "hf")
    assert checkpoint_bytes > 2.5 * ALLOWED_GROWTH  # holding it all could not pass

    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "hf"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    growth = measured["peak"] - measured["before"]
    assert growth < ALLOWED_GROWTH, (
        f"saving grew RSS by {growth / MB:.0f} MB (allowed {ALLOWED_GROWTH / MB:.0f} MB, "
        f"checkpoint {checkpoint_bytes / MB:.0f} MB, largest tensor {LARGEST / MB:.0f} MB; "
        f"high-water mark reset: {measured['reset']})"
    )
    # Every weight was written, cast to f16.
    assert (out / "model.onnx.data").stat().st_size == pytest.approx(checkpoint_bytes / 2, rel=0.01)


# -- the pieces: slab reads and the one-pass cast + transpose --------------------


def test_slabs_cover_the_tensor(tmp_path: Path) -> None:
    array = np.arange(37 * 5, dtype=np.float32).reshape(37, 5)
    save_file({"w": array, "s": np.array(2.5, np.float32)}, tmp_path / "x.safetensors")
    tensor = SafetensorsCheckpoint.open(tmp_path / "x.safetensors")["w"]
    slabs = [(start, rows.copy()) for start, rows in tensor.slabs(max_bytes=64)]
    assert [start for start, _ in slabs] == list(range(0, 37, 3))  # 3 rows of 20 bytes fit 64
    np.testing.assert_array_equal(np.concatenate([rows for _, rows in slabs]), array)
    huge_rows = list(tensor.slabs(max_bytes=1))  # never less than one row
    assert len(huge_rows) == 37


def test_slabs_report_a_file_truncated_after_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.safetensors"
    save_file({"w": np.ones((64, 64), np.float32)}, path)
    tensor = SafetensorsCheckpoint.open(path)["w"]
    path.write_bytes(path.read_bytes()[:-1000])
    with pytest.raises(CheckpointError, match="changed size"):
        next(tensor.slabs())
    # Cut short between that check and the reads: the reads come up short.
    monkeypatch.setattr(tensor._file, "size", path.stat().st_size)
    with pytest.raises(CheckpointError, match="truncated"):
        list(tensor.slabs(max_bytes=4096))


@pytest.mark.parametrize("dtype", [ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.BFLOAT16])
def test_transposed_parameter_streams_in_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: ir.DataType
) -> None:
    """A parameter naming ``checkpoint_axes`` is filled from slabs, never from a full mapping."""
    rng = np.random.default_rng(0)
    array = rng.standard_normal((300, 70), dtype=np.float32).astype(ml_dtypes.bfloat16)
    save_file({"w": array}, tmp_path / "x.safetensors")

    def built(axes: tuple[int, ...] | None) -> np.ndarray:
        param = TransposedParameter(300, 70, name="w")  # stored [70, 300]
        param.type = ir.TensorType(dtype)
        if axes is not None:
            param.checkpoint_axes = axes
        graph = ir.Graph([], [], nodes=[], initializers=[param], name="g")
        apply_weights(ir.Model(graph, ir_version=10), SafetensorsCheckpoint.open(tmp_path))
        return param.const_value.numpy()

    generic = built(None)
    np.testing.assert_array_equal(generic, array.T.astype(dtype.numpy()))

    def no_mapping(self):
        raise AssertionError("the whole tensor was mapped")

    monkeypatch.setattr(CheckpointTensor, "numpy", no_mapping)
    monkeypatch.setattr("mobius.weights._safetensors.SLAB_BYTES", 1000)  # several slabs
    streamed = built((1, 0))
    assert streamed.dtype == generic.dtype and streamed.flags.c_contiguous
    assert streamed.tobytes() == generic.tobytes()
