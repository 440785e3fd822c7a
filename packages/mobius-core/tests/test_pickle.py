"""The restricted reader of pickled PyTorch checkpoints: torch's own files, views, and hostile pickles."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mobius.errors import CheckpointError
from mobius.weights._open import open_checkpoint
from mobius.weights._pickle import PickleCheckpoint

torch = pytest.importorskip("torch")  # writes the reference files (a dev dependency)


def test_reads_what_torch_save_wrote(tmp_path: Path) -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    state = {
        "weight": torch.randn(3, 5),
        "half": torch.randn(2, 3).half(),
        "bf16": torch.randn(7).bfloat16(),
        "ids": torch.arange(5),
        "flags": torch.tensor([True, False]),
        "scalar": torch.tensor(2.5),
        "rows": base[1:3],  # a view at an offset into a shared storage
        "transposed": base.t(),  # non-contiguous strides
        "param": torch.nn.Parameter(torch.ones(2, 2)),
        "empty": torch.zeros(0, 4),
    }
    torch.save(state, tmp_path / "pytorch_model.bin")
    with PickleCheckpoint.open(tmp_path / "pytorch_model.bin") as checkpoint:
        assert sorted(checkpoint) == sorted(state)
        for name, expected in state.items():
            tensor = checkpoint[name]
            assert tensor.shape == tuple(expected.shape), name
            reference = expected.detach().float().numpy()
            np.testing.assert_array_equal(tensor.numpy().astype(np.float32), reference)
        assert checkpoint["bf16"].dtype.name == "BFLOAT16"


def test_sharded_directory_through_its_index(tmp_path: Path) -> None:
    torch.save({"a": torch.ones(2)}, tmp_path / "pytorch_model-00001-of-00002.bin")
    torch.save({"b": torch.zeros(3)}, tmp_path / "pytorch_model-00002-of-00002.bin")
    (tmp_path / "pytorch_model.bin.index.json").write_text(
        '{"weight_map": {"a": "pytorch_model-00001-of-00002.bin",'
        ' "b": "pytorch_model-00002-of-00002.bin"}}'
    )
    torch.save({"lr": 0.1}, tmp_path / "training_args.bin")  # not weights: never read
    with open_checkpoint(tmp_path, allow_pickle=True) as checkpoint:
        assert sorted(checkpoint) == ["a", "b"]


class _RunsACommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _torch_style_zip(path: Path, payload: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", payload)
        archive.writestr("archive/version", "3\n")
    return path


def test_a_pickle_that_runs_code_is_refused_before_anything_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = _torch_style_zip(tmp_path / "pytorch_model.bin", pickle.dumps(_RunsACommand(marker)))
    with pytest.raises(CheckpointError, match=r"refused to unpickle (posix|os)\.system"):
        PickleCheckpoint.open(evil)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (pickle.dumps(["not", "a", "dict"]), "expected a state dict"),
        (pickle.dumps({"x": 3}), "'x' is not a tensor"),
        (pickle.dumps({"x": 3})[:-3], "unreadable pickle"),
        (pickle.dumps(io.BytesIO), "refused to unpickle _io.BytesIO"),
    ],
)
def test_malformed_state_dicts(tmp_path: Path, payload: bytes, message: str) -> None:
    path = _torch_style_zip(tmp_path / "model.pt", payload)
    with pytest.raises(CheckpointError, match=message):
        PickleCheckpoint.open(path)


def test_a_view_past_its_storage_is_refused(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(4)}, tmp_path / "model.pt")
    with zipfile.ZipFile(tmp_path / "model.pt") as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    pickled = next(name for name in entries if name.endswith("data.pkl"))
    # Claim a 400-element tensor on the 4-element storage: shape (4,) -> (400,).
    entries[pickled] = entries[pickled].replace(b"K\x04\x85", b"M\x90\x01\x85", 1)
    with zipfile.ZipFile(tmp_path / "model.pt", "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    with pytest.raises(CheckpointError, match="reads past its storage"):
        PickleCheckpoint.open(tmp_path / "model.pt")


def test_legacy_and_truncated_files(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy.bin"
    legacy.write_bytes(pickle.dumps({"w": 1}))  # not a zip: torch's pre-1.6 format
    with pytest.raises(CheckpointError, match="not a PyTorch zip checkpoint"):
        PickleCheckpoint.open(legacy)
    torch.save({"w": torch.ones(1000)}, tmp_path / "cut.bin")
    data = (tmp_path / "cut.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError), PickleCheckpoint.open(tmp_path / "cut.bin") as cut:
        cut["w"].numpy()


def test_pickles_are_refused_unless_allowed(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(2)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="only pickled PyTorch weights.*--allow-pickle"):
        open_checkpoint(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")  # safetensors win, even broken ones
    with pytest.raises(CheckpointError, match="too small to be a safetensors file"):
        open_checkpoint(tmp_path, allow_pickle=True)
