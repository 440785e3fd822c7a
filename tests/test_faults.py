"""Faults while a build writes its output: a full disk, Ctrl-C, and a build killed outright.

The output directory is either complete or absent, and the next run succeeds. A
build killed with SIGKILL cannot clean up: it leaves only its temporary
directory, which the next build of the same output removes (and says so).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import onnx_ir as ir
import pytest

from mobius.cli import main

# ``mobius build`` whose writes pause after every tensor, so a signal lands mid-save.
SLOW_BUILD = """
import signal, sys, time
import onnx_ir

# Ctrl-C at a terminal: a run started in the background of a script (as a CI job may be)
# inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
signal.signal(signal.SIGINT, signal.default_int_handler)

original = onnx_ir.save

def slow_save(model, path, callback=None, **options):
    def pause(tensor, info):
        if callback is not None:
            callback(tensor, info)
        print("writing", info.index, flush=True)  # the test waits for this line
        time.sleep(0.3)
    original(model, path, callback=pause, **options)

onnx_ir.save = slow_save
sys.argv[0] = "mobius"
from mobius.cli import run
run()
"""


def staging_dirs(parent: Path, name: str) -> list[Path]:
    """The staging and backup directories beside ``parent/name`` (not its lock file)."""
    return sorted(p for p in parent.iterdir() if p.name.startswith(f".{name}.") and p.is_dir())


def start_slow_build(model_dir: Path, out: Path) -> subprocess.Popen:
    """A ``mobius build`` child, returned once it is writing weights into its staging directory."""
    child = subprocess.Popen(
        [sys.executable, "-c", SLOW_BUILD, "build", "--model", str(model_dir), str(out), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    first = child.stdout.readline()  # blocks until the first tensor is being written
    if not first.startswith("writing"):
        child.kill()
        pytest.fail(f"the build never started writing: {first!r} {child.communicate()}")
    assert staging_dirs(out.parent, out.name), "writing, but not into a staging directory"
    return child


def assert_builds(capsys, model_dir: Path, out: Path) -> str:
    """A normal build of ``model_dir`` into ``out`` succeeds; returns its stderr."""
    code = main(["build", "--model", str(model_dir), str(out), "-q"])
    _, err = capsys.readouterr()
    assert code == 0, err
    assert (out / "model.onnx").is_file() and (out / "model.onnx.data").is_file()
    assert staging_dirs(out.parent, out.name) == []
    return err


def test_ctrl_c_while_saving_leaves_nothing(capsys, model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    child = start_slow_build(model_dir, out)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=120)
    assert (child.returncode, stderr) == (130, "mobius: interrupted\n")
    assert not out.exists()
    assert staging_dirs(tmp_path, "out") == []
    assert_builds(capsys, model_dir, out)


def test_sigkill_leaves_only_a_temporary_directory_that_the_next_run_removes(
    capsys, model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    child = start_slow_build(model_dir, out)
    child.kill()
    child.communicate(timeout=60)
    (left,) = staging_dirs(tmp_path, "out")
    assert left.name.startswith(f".out.mobius-{child.pid}-") and left.name.endswith(".tmp")
    assert not out.exists()  # nothing that looks like a finished model
    assert (tmp_path / ".out.mobius-lock").is_file()  # its lock file, which the kernel let go

    err = assert_builds(capsys, model_dir, out)
    assert sorted(os.listdir(tmp_path)) == ["model", "out"]
    assert (
        f"mobius: note: removed {left}, left by an interrupted build (process {child.pid})" in err
    )
    assert not left.exists()


def test_a_running_builds_output_is_left_alone(capsys, model_dir: Path, tmp_path: Path) -> None:
    """A second build into the output of a running one fails at once and touches nothing."""
    out = tmp_path / "out"
    child = start_slow_build(model_dir, out)
    try:
        (theirs,) = staging_dirs(tmp_path, "out")
        code = main(["build", "--model", str(model_dir), str(tmp_path / "out"), "-q"])
        _, err = capsys.readouterr()
        assert code == 1, err
        assert err == f"mobius: error: another mobius build is writing {out} (pid {child.pid})\n"
        assert theirs.exists() or child.poll() is not None
    finally:
        child.kill()
        child.communicate(timeout=60)


def test_disk_full_half_way_through_the_weights(
    capsys, model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC after some tensors are written: one line, nothing left, and a rerun succeeds."""
    original = ir.save
    written: list[int] = []

    def fills_up(model, path, callback=None, **options):
        def count(tensor, info):
            written.append(1)
            if len(written) == 5:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            if callback is not None:
                callback(tensor, info)

        original(model, path, callback=count, **options)

    monkeypatch.setattr(ir, "save", fills_up)
    out = tmp_path / "out"
    code = main(["build", "--model", str(model_dir), str(out), "-q"])
    _, err = capsys.readouterr()
    assert code == 1
    assert err.strip() == f"mobius: error: cannot write {out}: disk full"
    assert len(written) == 5
    assert not out.exists() and staging_dirs(tmp_path, "out") == []

    monkeypatch.setattr(ir, "save", original)
    assert_builds(capsys, model_dir, out)


@pytest.fixture
def small_filesystem(tmp_path: Path):
    """A 64 KiB tmpfs: a real full disk. Mounting needs root with CAP_SYS_ADMIN."""
    mount = tmp_path / "small"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs CAP_SYS_ADMIN): {result.stderr.strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_a_really_full_disk(capsys, model_dir: Path, small_filesystem: Path) -> None:
    out = small_filesystem / "out"  # the tiny llama's weights are ~100 KB
    code = main(["build", "--model", str(model_dir), str(out), "-q"])
    _, err = capsys.readouterr()
    assert code == 1
    assert err.strip() == f"mobius: error: cannot write {out}: disk full"
    assert os.listdir(small_filesystem) == []  # the staging directory is gone too
