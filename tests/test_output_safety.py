"""Outputs that must never be replaced, one build per output, and Ctrl-C anywhere (issue 30).

``--overwrite`` replaces an output directory, so it must never be the source (a
folder, a GGUF file, a hub snapshot and its blobs), hold it or lie inside it, nor the
current directory, the home directory or ``/``: each refusal is one line, exit 1,
with nothing touched. Two builds into one output exclude each other with a lock
beside it. Ctrl-C exits 130 with one line wherever it lands, start-up included.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mobius._package import check_output, output_lock
from mobius.cli import main
from mobius.errors import OutputError
from mobius_text.testing import write_tiny_llama

pytestmark = pytest.mark.usefixtures("offline_hub")


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return write_tiny_llama(tmp_path / "src" / "model")


@pytest.fixture
def no_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused output is refused before the build starts (and keeps these tests fast)."""

    def build(*args, **kwargs):
        raise AssertionError("the build ran although the output was refused")

    monkeypatch.setattr("mobius._build.build", build)


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every path under ``root`` (``root`` itself if a file) with its bytes or link target."""
    paths = [root, *root.rglob("*")] if root.is_dir() else [root]
    return {
        str(p): os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
        for p in paths
    }


def assert_refused(capsys, model: Path, out: Path | str, *expected: str) -> None:
    """``mobius build --overwrite`` into ``out`` fails with one line; the source is untouched."""
    before = snapshot(model)
    code = main(["build", "--model", str(model), str(out), "-q", "--overwrite"])
    stdout, stderr = capsys.readouterr()
    assert code == 1, stderr
    assert stdout == ""
    (line,) = stderr.splitlines()
    assert line.startswith("mobius: error: output directory "), line
    for text in expected:
        assert text in line, f"{text!r} not in {line!r}"
    assert snapshot(model) == before


# -- never destroy the source ---------------------------------------------------------------


@pytest.mark.usefixtures("no_build")
def test_output_is_the_source(capsys, model_dir: Path) -> None:
    assert_refused(capsys, model_dir, model_dir, f"is the source {model_dir}")


@pytest.mark.usefixtures("no_build")
def test_output_holds_the_source(capsys, model_dir: Path) -> None:
    assert_refused(capsys, model_dir, model_dir.parent, "holds the source", str(model_dir))


@pytest.mark.usefixtures("no_build")
def test_output_inside_the_source(capsys, model_dir: Path) -> None:
    """A folder inside the source may be part of it (a pipeline's ``text_encoder/``)."""
    inner = model_dir / "onnx"
    inner.mkdir()
    (inner / "model.onnx").write_bytes(b"an earlier build")
    assert_refused(capsys, model_dir, inner, "lies inside the source", str(model_dir))


@pytest.mark.usefixtures("no_build")
def test_output_dot_in_the_source(capsys, model_dir: Path, monkeypatch) -> None:
    monkeypatch.chdir(model_dir)
    assert_refused(capsys, model_dir, ".", "is the source")


@pytest.mark.usefixtures("no_build")
def test_output_home_holding_the_source(capsys, tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    model = write_tiny_llama(home / "models" / "llama")
    monkeypatch.setenv("HOME", str(home))
    # The shell expands ``~`` before mobius sees it.
    assert_refused(capsys, model, os.path.expanduser("~"), "holds the source")


def test_home_cwd_and_root_are_never_replaced(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    work = tmp_path / "work"
    (work / "project").mkdir(parents=True)
    (work / "project" / "main.py").write_text("print('precious')\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work / "project")
    before = snapshot(tmp_path)
    for out, expected in [
        (home, "is the home directory"),
        (work / "project", "is the current directory"),
        (".", "is the current directory"),
        (work, "holds the current directory"),
        ("/", "is the root directory"),
    ]:
        for overwrite in (True, False):
            with pytest.raises(OutputError, match=expected):
                check_output(out, overwrite=overwrite)
    assert snapshot(tmp_path) == before
    # An empty current directory holds nothing to lose: building into it stays allowed.
    (work / "empty").mkdir()
    monkeypatch.chdir(work / "empty")
    assert check_output(".", overwrite=True) == work / "empty"


@pytest.mark.usefixtures("no_build")
def test_output_is_a_symlink_to_the_source(capsys, model_dir: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(model_dir, target_is_directory=True)
    assert_refused(capsys, model_dir, link, "is the source")


@pytest.mark.usefixtures("no_build")
def test_output_holds_a_gguf_source(capsys, tmp_path: Path) -> None:
    folder = tmp_path / "downloads"
    folder.mkdir()
    gguf = folder / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    assert_refused(capsys, gguf, folder, "holds the source", str(gguf))


def hub_snapshot(tmp_path: Path) -> tuple[Path, Path]:
    """A hub cache entry as huggingface_hub lays it out: files in ``blobs/``, linked from
    ``snapshots/<revision>/``. Returns the snapshot and the blobs folder."""
    repo = tmp_path / "hub" / "models--org--tiny"
    blobs = repo / "blobs"
    blobs.mkdir(parents=True)
    snap = repo / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    for number, file in enumerate(sorted(write_tiny_llama(tmp_path / "files").iterdir())):
        blob = blobs / f"{number:064x}"
        file.rename(blob)
        (snap / file.name).symlink_to(Path("..", "..", "blobs", blob.name))
    return snap, blobs


@pytest.mark.usefixtures("no_build")
def test_output_is_a_hub_snapshots_blobs(capsys, tmp_path: Path) -> None:
    snap, blobs = hub_snapshot(tmp_path)
    assert_refused(capsys, snap, blobs, f"holds {blobs}/", f"a file of the source {snap}")
    assert_refused(capsys, snap, snap.parent.parent, "holds the source", str(snap))
    before = snapshot(blobs)
    with pytest.raises(OutputError, match="holds"):
        check_output(blobs, overwrite=True, sources=[snap])
    assert snapshot(blobs) == before


def test_save_refuses_the_source_it_was_built_from(model_dir: Path) -> None:
    """The package knows its source (a hub id's snapshot only then): ``save`` checks again."""
    from mobius import build

    package = build(str(model_dir), load_weights=False)
    before = snapshot(model_dir)
    with pytest.raises(OutputError, match="is the source"):
        package.save(model_dir, overwrite=True, progress=False)
    assert snapshot(model_dir) == before


# Where sources, outputs, the current and the home directory may be, in one small tree:
# folders, a file, a hub-style link into ``blobs/`` and links to folders.
TREE_DIRS = ["a", "a/model", "a/model/sub", "a/other", "blobs", "b", "b/c"]
TREE_FILES = ["a/model/config.json", "a/model/sub/x.bin", "a/other/f", "blobs/b1", "b/c/g"]
TREE_LINKS = {"a/model/w.bin": "../../blobs/b1", "l1": "a/model", "l2": "a", "l3": "blobs"}
PLACES = ["", *TREE_DIRS, *TREE_FILES, *TREE_LINKS, "new", "a/model/new", "b/c/.."]


def make_tree(root: Path) -> None:
    for name in TREE_DIRS:
        (root / name).mkdir()
    for name in TREE_FILES:
        (root / name).write_text(name)
    for name, target in TREE_LINKS.items():
        (root / name).symlink_to(target)


def read_through_links(path: Path) -> dict[str, str]:
    """What a build reads from ``path``: each file's text, links followed."""
    if path.is_file():
        return {"": path.read_text()}
    return {
        str(file.relative_to(path)): file.read_text()
        for file in sorted(path.rglob("*"))
        if file.is_file()
    }


@settings(
    max_examples=int(os.environ.get("MOBIUS_FUZZ_EXAMPLES", "150")),
    deadline=30_000,  # ms: no hostile case may take over 30 s (issue 30)
    derandomize=not os.environ.get("MOBIUS_FUZZ_EXAMPLES"),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    source=st.sampled_from(["a/model", "a/model/config.json", "l1", "a/model/w.bin"]),
    out=st.sampled_from(PLACES),
    cwd=st.sampled_from(["", *TREE_DIRS]),
    home=st.sampled_from(["", *TREE_DIRS]),
    overwrite=st.booleans(),
)
def test_an_accepted_output_can_be_replaced_safely(
    tmp_path: Path, source: str, out: str, cwd: str, home: str, overwrite: bool
) -> None:
    """Whatever check_output accepts, replacing it (its resolved folder deleted, the worst
    case) leaves the source's files, the current and the home directory as they were."""
    root = Path(tempfile.mkdtemp(dir=tmp_path)) / "tree"
    root.mkdir()
    make_tree(root)
    before = read_through_links(root / source)
    saved = os.getcwd(), os.environ.get("HOME")
    os.chdir(root / cwd)
    os.environ["HOME"] = str(root / home)
    try:
        try:
            target = check_output(root / out, overwrite=overwrite, sources=[root / source])
        except OutputError:
            return
        if target.is_dir() and any(target.iterdir()):
            assert overwrite  # a non-empty directory needs --overwrite
            shutil.rmtree(os.path.realpath(target))
        assert read_through_links(root / source) == before
        assert Path.cwd().is_dir() and Path.home().is_dir()
    finally:
        os.chdir(saved[0])
        if saved[1] is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = saved[1]


# -- one build per output -------------------------------------------------------------------

# Another build holding the lock of ``OUT``: a flock on ``.OUT.mobius-lock`` holding its pid.
HOLD_LOCK = """
import fcntl, os, sys

fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b"%d\\n" % os.getpid())
print("locked", flush=True)
sys.stdin.read()  # until the test closes it
"""


def test_a_second_build_into_the_same_output_fails_at_once(
    capsys, model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path / ".out.mobius-lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        with monkeypatch.context() as patch:
            patch.setattr("mobius._build.build", lambda *a, **k: pytest.fail("built anyway"))
            code = main(["build", "--model", str(model_dir), str(out), "-q"])
        _, err = capsys.readouterr()
        assert code == 1
        assert err == f"mobius: error: another mobius build is writing {out} (pid {holder.pid})\n"
        assert not out.exists()
    finally:
        holder.communicate(timeout=60)  # closes its stdin: it lets go
    assert holder.returncode == 0

    # Its lock file stays, without a holder: taken over, and removed when done.
    with output_lock(out):
        assert (tmp_path / ".out.mobius-lock").read_text() == f"{os.getpid()}\n"
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_a_lock_without_a_holder_is_taken_over(capsys, model_dir: Path, tmp_path: Path) -> None:
    """A build killed outright leaves its lock file, but the kernel dropped its lock."""
    out = tmp_path / "new" / "out"
    out.parent.mkdir()
    (out.parent / ".out.mobius-lock").write_text("999999999\n")
    assert main(["build", "--model", str(model_dir), str(out), "-q"]) == 0
    capsys.readouterr()
    assert os.listdir(out.parent) == ["out"]


def test_a_failed_build_leaves_no_lock_and_no_parent(capsys, tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    out = tmp_path / "made" / "for" / "out"
    assert main(["build", "--model", str(missing), str(out), "-q"]) == 1
    assert "no such directory" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


# -- Ctrl-C anywhere ------------------------------------------------------------------------

# Put on PYTHONPATH as ``sitecustomize``, it pauses the child the moment it first imports
# PAUSE_AT, and says so on stdout: the test's SIGINT then lands exactly there.
PAUSE = """
import signal, sys, time

# A job started in the background inherits SIGINT ignored; a terminal's Ctrl-C is not.
signal.signal(signal.SIGINT, signal.default_int_handler)


class Pause:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            print("paused", flush=True)
            time.sleep(60)
        return None


sys.meta_path.insert(0, Pause())
"""


@pytest.mark.parametrize(
    "module",
    [
        "mobius.cli",  # python -m mobius loading the command
        "mobius._registry",  # the parser, before main's error handling
        "onnx_ir",  # the build loading its modules (Ctrl-C while saving: test_faults.py)
    ],
)
def test_ctrl_c_exits_130_with_one_line(model_dir: Path, tmp_path: Path, module: str) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(PAUSE.format(module=module)))
    path = os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")]))
    out = tmp_path / "out"
    child = subprocess.Popen(
        [sys.executable, "-m", "mobius", "build", "--model", str(model_dir), str(out), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )
    started = time.monotonic()
    line = child.stdout.readline()
    if line != "paused\n":
        child.kill()
        pytest.fail(f"the child never reached {module}: {line!r} {child.communicate()}")
    child.send_signal(signal.SIGINT)
    stdout, stderr = child.communicate(timeout=60)
    assert (child.returncode, stderr) == (130, "mobius: interrupted\n")
    assert stdout == ""
    assert time.monotonic() - started < 30
    assert sorted(os.listdir(tmp_path)) == ["hook", "src"]


# As sitecustomize: a thread that keeps Python's exit waiting, and says when it does.
LINGER = """
import signal, threading, time

signal.signal(signal.SIGINT, signal.default_int_handler)


def linger():
    while threading.main_thread().is_alive():
        time.sleep(0.01)
    print("exiting", flush=True)  # the command is done; Python waits for this thread
    time.sleep(60)


threading.Thread(target=linger).start()
"""


def test_ctrl_c_while_python_exits(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(LINGER)
    path = os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")]))
    child = subprocess.Popen(
        [sys.executable, "-m", "mobius", "--version"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )
    lines = [child.stdout.readline() for _ in range(2)]
    if lines[-1] != "exiting\n":
        child.kill()
        pytest.fail(f"the child never got to its exit: {lines} {child.communicate()}")
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=60)
    assert (child.returncode, stderr) == (130, "mobius: interrupted\n")
    assert lines[0].startswith("mobius ")


@pytest.mark.usefixtures("no_build")
def test_a_planted_lock_symlink_is_not_followed(capsys, model_dir: Path, tmp_path: Path) -> None:
    """A link in the lock file's place must not make mobius truncate what it points to."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / ".out.mobius-lock").symlink_to(victim)
    code = main(["build", "--model", str(model_dir), str(tmp_path / "out"), "-q"])
    assert code == 1
    assert capsys.readouterr().err == (
        f"mobius: error: cannot write the lock file {tmp_path / '.out.mobius-lock'}: "
        "it is a symbolic link\n"
    )
    assert victim.read_text() == "precious"
