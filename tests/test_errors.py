"""User errors through the real CLI: one line on stderr, non-zero exit, no traceback, no partial output.

Each case writes a tiny Llama checkpoint by hand (numpy + safetensors, no torch),
breaks it in one way and runs ``mobius build`` (``mobius.cli.main``; once through
``python -m mobius``). The output must not appear, nor any staging directory
beside it.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from mobius._package import ModelPackage
from mobius.cli import main
from mobius_text.testing import write_tiny_llama

pytestmark = pytest.mark.usefixtures("offline_hub")


def leftovers(parent: Path, name: str) -> list[str]:
    """Staging (``.<name>.*.tmp``) and backup (``.<name>.old-*``) directories left in ``parent``."""
    if not parent.is_dir():
        return []
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


def assert_user_error(capsys: pytest.CaptureFixture[str], argv: list[str], *expected: str) -> str:
    """Run the CLI; it must fail with one ``mobius: error:`` line holding every ``expected``."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code != 0
    assert code == 1
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("mobius: error: "), line
    for text in expected:
        assert text in line, f"{text!r} not in {line!r}"
    assert "wrote" not in out
    return line


def assert_fails_cleanly(
    capsys: pytest.CaptureFixture[str], model: Path | str, out: Path, *expected: str
) -> str:
    before = sorted(os.listdir(out.parent)) if out.parent.is_dir() else None
    line = assert_user_error(capsys, ["build", "--model", str(model), str(out), "-q"], *expected)
    assert not out.exists()
    assert leftovers(out.parent, out.name) == []
    if before is not None:
        assert sorted(os.listdir(out.parent)) == before
    return line


def edit_tensors(directory: Path, edit: Callable[[dict[str, np.ndarray]], None]) -> None:
    tensors = load_file(directory / "model.safetensors")
    edit(tensors)
    save_file(tensors, directory / "model.safetensors")


# -- unknown model types --------------------------------------------------------------------


def test_unknown_model_type(capsys, tmp_path: Path, outputs: Path) -> None:
    model = write_tiny_llama(tmp_path / "m", model_type="zz9_unknown")
    line = assert_fails_cleanly(
        capsys, model, outputs / "out", "unknown model type", "'zz9_unknown'", "installed:"
    )
    assert "mobius-text" in line
    assert "close matches" not in line


def test_near_miss_model_type_lists_close_matches(capsys, tmp_path: Path, outputs: Path) -> None:
    model = write_tiny_llama(tmp_path / "m", model_type="lama")
    line = assert_fails_cleanly(capsys, model, outputs / "out", "unknown model type", "'lama'")
    assert "close matches: llama" in line


def test_known_domain_key_without_support_yet(capsys, tmp_path: Path, outputs: Path) -> None:
    """An audio model_type mobius-audio does not register (FastSpeech2): still one clear line."""
    model = write_tiny_llama(tmp_path / "m", model_type="fastspeech2_conformer")
    assert_fails_cleanly(
        capsys, model, outputs / "out", "unknown model type 'fastspeech2_conformer'"
    )


def test_diffusers_component_class_not_registered(capsys, tmp_path: Path, outputs: Path) -> None:
    unet = tmp_path / "unet"
    unet.mkdir()
    (unet / "config.json").write_text(json.dumps({"_class_name": "UNet3DConditionModel"}))
    assert_fails_cleanly(capsys, unet, outputs / "out", "unknown model type 'UNet3DConditionModel'")


def test_diffusers_pipeline_directory(capsys, tmp_path: Path, outputs: Path) -> None:
    pipeline = tmp_path / "sd"
    pipeline.mkdir()
    index = {
        "_class_name": "StableDiffusionPipeline",
        "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"],
        "scheduler": ["diffusers", "PNDMScheduler"],
    }
    (pipeline / "model_index.json").write_text(json.dumps(index))
    # Built whole (mobius_diffusion.pipeline_source): a component listed without its folder is named.
    assert_fails_cleanly(
        capsys, pipeline, outputs / "out", "pipeline component 'scheduler' (PNDMScheduler)"
    )


# -- checkpoints that do not fit ----------------------------------------------------------


def test_missing_weight(capsys, model_dir: Path, outputs: Path) -> None:
    edit_tensors(model_dir, lambda t: t.pop("model.norm.weight"))
    assert_fails_cleanly(capsys, model_dir, outputs / "out", "missing", "model.norm.weight")


def test_unexpected_weight(capsys, model_dir: Path, outputs: Path) -> None:
    edit_tensors(model_dir, lambda t: t.update({"model.extra.weight": np.zeros(3, np.float32)}))
    assert_fails_cleanly(capsys, model_dir, outputs / "out", "unexpected", "model.extra.weight")


def test_wrong_shape(capsys, model_dir: Path, outputs: Path) -> None:
    name = "model.layers.1.mlp.down_proj.weight"
    edit_tensors(model_dir, lambda t: t.update({name: np.zeros((64, 32), np.float32)}))
    line = assert_fails_cleanly(capsys, model_dir, outputs / "out", "wrong shape", name)
    assert "[64, 32] (expected [32, 64])" in line


def test_wrong_dtype(capsys, model_dir: Path, outputs: Path) -> None:
    name = "model.layers.0.input_layernorm.weight"
    edit_tensors(model_dir, lambda t: t.update({name: np.ones(32, np.int32)}))
    assert_fails_cleanly(capsys, model_dir, outputs / "out", "wrong dtype", name, "INT32")


def test_every_problem_in_one_line(capsys, model_dir: Path, outputs: Path) -> None:
    def edit(t: dict[str, np.ndarray]) -> None:
        del t["model.norm.weight"]
        t["model.extra.weight"] = np.zeros(3, np.float32)

    edit_tensors(model_dir, edit)
    assert_fails_cleanly(
        capsys, model_dir, outputs / "out", "missing (1): model.norm.weight", "unexpected (1)"
    )


# -- broken files ---------------------------------------------------------------------------


def test_truncated_safetensors(capsys, model_dir: Path, outputs: Path) -> None:
    path = model_dir / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    assert_fails_cleanly(capsys, model_dir, outputs / "out", "truncated", "model.safetensors")


def test_missing_shard(capsys, model_dir: Path, outputs: Path) -> None:
    tensors = load_file(model_dir / "model.safetensors")
    (model_dir / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[: len(names) // 2],
        "model-00002-of-00002.safetensors": names[len(names) // 2 :],
    }
    weight_map = {name: shard for shard, group in shards.items() for name in group}
    (model_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    first = "model-00001-of-00002.safetensors"
    save_file({n: tensors[n] for n in shards[first]}, model_dir / first)  # the second is absent
    assert_fails_cleanly(
        capsys, model_dir, outputs / "out", "missing shard", "model-00002-of-00002.safetensors"
    )


def test_unreadable_config(capsys, model_dir: Path, outputs: Path) -> None:
    (model_dir / "config.json").write_text("{not json")
    assert_fails_cleanly(capsys, model_dir, outputs / "out", "config.json")


def test_corrupt_gguf(capsys, tmp_path: Path, outputs: Path) -> None:
    from mobius_text.testing import smollm2_gguf

    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smollm2_gguf().read_bytes()[:5000])  # the header, then nothing
    assert_fails_cleanly(capsys, cut, outputs / "out", str(cut))
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    assert_fails_cleanly(capsys, garbage, outputs / "out", str(garbage))


def test_no_safetensors(capsys, model_dir: Path, outputs: Path) -> None:
    (model_dir / "model.safetensors").unlink()
    assert_fails_cleanly(capsys, model_dir, outputs / "out", "no safetensors files")


# -- sources and outputs ------------------------------------------------------------------


def test_nonexistent_model_path(capsys, tmp_path: Path, outputs: Path) -> None:
    missing = tmp_path / "no" / "such" / "model"
    assert_fails_cleanly(capsys, missing, outputs / "out", "no such directory", str(missing))


def test_output_parent_is_a_file(capsys, model_dir: Path, tmp_path: Path) -> None:
    """Unwritable output (a parent that is a regular file stops root too)."""
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    before = sorted(os.listdir(tmp_path))
    line = assert_fails_cleanly(capsys, model_dir, afile / "out", "cannot write", str(afile))
    assert afile.read_text() == "not a directory"
    assert sorted(os.listdir(tmp_path)) == before
    assert line.count("mobius: error:") == 1


def test_output_is_an_existing_file(capsys, model_dir: Path, outputs: Path) -> None:
    out = outputs / "out"
    out.write_text("precious")
    before = sorted(os.listdir(outputs))
    assert_user_error(
        capsys,
        ["build", "--model", str(model_dir), str(out), "-q"],
        "exists and is not a directory",
    )
    assert out.read_text() == "precious"
    assert sorted(os.listdir(outputs)) == before


def test_disk_full_while_writing(
    capsys, model_dir: Path, outputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure half-way through writing removes the staging directory."""
    original = ModelPackage._write
    staged: list[Path] = []

    def write_then_fail(self, staging: Path, progress: bool) -> None:
        staged.append(staging)
        original(self, staging, progress)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ModelPackage, "_write", write_then_fail)
    assert_fails_cleanly(capsys, model_dir, outputs / "out", "disk full")
    assert staged and staged[0].parent == outputs and staged[0].name.startswith(".out.")
    assert not staged[0].exists()


def test_interrupt_while_writing(
    capsys, model_dir: Path, outputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(self, staging: Path, progress: bool) -> None:
        (staging / "model.onnx").write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(ModelPackage, "_write", interrupted)
    code = main(["build", "--model", str(model_dir), str(outputs / "out"), "-q"])
    _, err = capsys.readouterr()
    assert code == 130
    assert err.strip() == "mobius: interrupted"
    assert os.listdir(outputs) == []


def test_existing_output_is_replaced_only_on_success(
    capsys, model_dir: Path, outputs: Path
) -> None:
    out = outputs / "out"
    out.mkdir()
    (out / "marker.txt").write_text("from an earlier build")

    broken = write_tiny_llama(model_dir.parent / "broken")
    edit_tensors(broken, lambda t: t.pop("model.norm.weight"))
    assert_user_error(
        capsys,
        ["build", "--model", str(broken), str(out), "-q", "--overwrite"],
        "missing",
        "model.norm.weight",
    )
    assert sorted(p.name for p in out.iterdir()) == ["marker.txt"]
    assert (out / "marker.txt").read_text() == "from an earlier build"
    assert leftovers(outputs, "out") == []

    assert main(["build", "--model", str(model_dir), str(out), "-q", "--overwrite"]) == 0
    stdout, stderr = capsys.readouterr()
    assert stdout.startswith(f"wrote {out} (")
    assert stderr == ""
    assert (out / "model.onnx").is_file() and (out / "model.onnx.data").is_file()
    assert not (out / "marker.txt").exists()
    assert leftovers(outputs, "out") == []
    assert os.listdir(outputs) == ["out"]


def test_existing_output_is_refused_without_overwrite(
    capsys, model_dir: Path, outputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = outputs / "out"
    out.mkdir()
    (out / "marker.txt").write_text("precious")
    built: list[str] = []
    monkeypatch.setattr("mobius._build.build", lambda *a, **k: built.append("built"))
    assert_user_error(
        capsys, ["build", "--model", str(model_dir), str(out), "-q"], "not empty", "--overwrite"
    )
    assert built == []  # refused before the build starts, not after it
    assert os.listdir(out) == ["marker.txt"] and os.listdir(outputs) == ["out"]


def test_an_empty_output_directory_is_used(capsys, model_dir: Path, outputs: Path) -> None:
    (outputs / "out").mkdir()
    assert main(["build", "--model", str(model_dir), str(outputs / "out"), "-q"]) == 0
    assert (outputs / "out" / "model.onnx").is_file()
    assert leftovers(outputs, "out") == []


# -- configs that are refused, not approximated ---------------------------------------------


def edit_config(directory: Path, **changes) -> None:
    path = directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_config_that_needs_remote_code(capsys, model_dir: Path, outputs: Path) -> None:
    edit_config(
        model_dir,
        model_type="my_private_arch",
        auto_map={"AutoConfig": "configuration_mine.MyConfig"},
    )
    (model_dir / "configuration_mine.py").write_text("raise SystemExit('remote code ran')\n")
    assert_fails_cleanly(
        capsys, model_dir, outputs / "out", "my_private_arch", "never runs a model's own code"
    )


def test_auto_map_on_a_registered_type_uses_mobius_code(capsys, model_dir: Path, outputs: Path):
    edit_config(model_dir, auto_map={"AutoConfig": "configuration_mine.MyConfig"})
    (model_dir / "configuration_mine.py").write_text("raise SystemExit('remote code ran')\n")
    assert main(["build", "--model", str(model_dir), str(outputs / "out"), "-q"]) == 0
    assert (outputs / "out" / "model.onnx").is_file()


def test_unknown_rope_type_is_refused(capsys, model_dir: Path, outputs: Path) -> None:
    edit_config(model_dir, rope_scaling={"rope_type": "imaginary", "factor": 2.0})
    assert_fails_cleanly(capsys, model_dir, outputs / "out", "imaginary")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"num_attention_heads": 0}, "config"),
        ({"hidden_size": "thirty-two"}, "hidden_size"),
        ({"model_type": ["llama"]}, "model_type must be a string"),
    ],
)
def test_malformed_config_fields(capsys, model_dir, outputs, changes, expected) -> None:
    edit_config(model_dir, **changes)
    assert_fails_cleanly(capsys, model_dir, outputs / "out", expected)


# -- pickled checkpoints --------------------------------------------------------------------


def pickled(model_dir: Path) -> Path:
    """``model_dir`` with its weights as ``pytorch_model.bin`` (torch.save) instead of safetensors."""
    torch = pytest.importorskip("torch")
    tensors = load_file(model_dir / "model.safetensors")
    torch.save(
        {k: torch.from_numpy(v) for k, v in tensors.items()}, model_dir / "pytorch_model.bin"
    )
    (model_dir / "model.safetensors").unlink()
    return model_dir


def test_pickled_weights_are_refused_by_default(capsys, model_dir: Path, outputs: Path) -> None:
    assert_fails_cleanly(
        capsys, pickled(model_dir), outputs / "out", "pytorch_model.bin", "--allow-pickle"
    )


def test_allow_pickle_builds_the_same_model(capsys, tmp_path: Path, outputs: Path) -> None:
    import onnx

    reference = write_tiny_llama(tmp_path / "reference")
    assert main(["build", "--model", str(reference), str(outputs / "a"), "-q"]) == 0
    source = pickled(write_tiny_llama(tmp_path / "pickled"))
    capsys.readouterr()
    assert main(["build", "--model", str(source), str(outputs / "b"), "-q", "--allow-pickle"]) == 0
    _, err = capsys.readouterr()
    assert "mobius: note: reading pickled weights (pytorch_model.bin)" in err
    a, b = (onnx.load(str(outputs / n / "model.onnx")) for n in "ab")
    assert {t.name: t.SerializeToString() for t in a.graph.initializer} == {
        t.name: t.SerializeToString() for t in b.graph.initializer
    }


# -- what the CLI prints ------------------------------------------------------------------


def test_verbose_adds_the_traceback(capsys, model_dir: Path, outputs: Path) -> None:
    edit_tensors(model_dir, lambda t: t.pop("model.norm.weight"))
    code = main(["build", "--model", str(model_dir), str(outputs / "out"), "-q", "--verbose"])
    _, err = capsys.readouterr()
    assert code == 1
    assert "Traceback (most recent call last)" in err and "WeightMismatchError" in err
    assert err.splitlines()[-1].startswith("mobius: error: ")


def test_a_bug_is_one_line_with_exit_code_3(
    capsys, model_dir: Path, outputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("something\nmobius got wrong")

    monkeypatch.setattr("mobius._build.build", broken)
    code = main(["build", "--model", str(model_dir), str(outputs / "out"), "-q"])
    _, err = capsys.readouterr()
    assert code == 3
    assert err.splitlines() == [
        "mobius: internal error (a bug in mobius, please report it): RuntimeError: "
        "something mobius got wrong; --verbose prints the traceback"
    ]
    assert os.listdir(outputs) == []


# -- the real console entry point -----------------------------------------------------------


def test_python_m_mobius_reports_one_line(model_dir: Path, outputs: Path) -> None:
    edit_tensors(model_dir, lambda t: t.pop("model.norm.weight"))
    out = outputs / "out"
    result = subprocess.run(
        [sys.executable, "-m", "mobius", "build", "--model", str(model_dir), str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("mobius: error: ")
    assert "missing" in lines[0] and "model.norm.weight" in lines[0]
    assert result.stdout == ""
    assert not out.exists()
    assert os.listdir(outputs) == []


# -- architecture options mobius refuses rather than approximates ---------------------------


@pytest.mark.parametrize(
    ("model_type", "changes", "expected"),
    [
        ("big_bird", {"attention_type": "block_sparse"}, "attention_type"),
        ("nystromformer", {"conv_kernel_size": 4}, "conv_kernel_size"),
        ("switch_transformers", {"router_dtype": "bfloat16"}, "router_dtype"),
    ],
)
def test_unbuilt_architecture_options_are_refused(
    capsys, tmp_path: Path, outputs: Path, model_type, changes, expected
) -> None:
    from transformers import AutoConfig

    source, out = tmp_path / model_type, outputs / "out"
    AutoConfig.for_model(model_type, **changes).save_pretrained(source)
    argv = ["build", "--model", str(source), str(out), "--no-weights", "-q"]
    assert_user_error(capsys, argv, expected)
    assert not out.exists()
