"""Names read from files never lead outside their folder (:mod:`mobius.safe_paths`).

A checkpoint names other files: an index its shards, a pipeline's ``model_index.json``
its component folders, a package its graphs. Each such name goes through
:func:`mobius.safe_paths.join_inside`; absolute names, ``..`` segments and symlinks out
of the folder are refused with one line naming the name and the file it came from,
exit 1, and nothing is written outside OUT.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file
from test_errors import assert_fails_cleanly

from mobius._package import ModelPackage
from mobius.cli import main
from mobius.errors import CheckpointError, UnsafePathError
from mobius.safe_paths import check_name, join_inside
from mobius_text.testing import write_tiny_llama

pytestmark = pytest.mark.usefixtures("offline_hub")


# -- the join itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["model.safetensors", "unet/config.json", "a\\b", "./x", "sub//x", "日本語.json"]
)
def test_names_the_hub_accepts_are_joined(tmp_path: Path, name: str) -> None:
    assert join_inside(tmp_path, name, source="index.json") == tmp_path / name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("../victim.safetensors", "'..' segment"),
        ("a/../../b", "'..' segment"),
        ("a\\..\\..\\b", "'..' segment"),
        ("/etc/passwd", "absolute"),
        ("C:\\Windows\\x", "absolute"),
        ("C:x", "absolute"),
        ("a/C:x", "absolute"),
        ("\\\\host\\share\\x", "absolute"),
        ("\\x", "absolute"),
        ("", "empty"),
        ("a\0b", "NUL"),
        (".", "the folder itself"),
        (7, "not int"),
    ],
)
def test_unsafe_names_are_refused(tmp_path: Path, name, reason: str) -> None:
    with pytest.raises(UnsafePathError, match=reason) as caught:
        join_inside(tmp_path, name, source="some/index.json")
    message = str(caught.value)
    assert message.startswith("some/index.json: ") and "\n" not in message
    assert isinstance(caught.value, CheckpointError)  # caught where checkpoint errors are


def test_a_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "secret").write_text("x")
    (root / "leak").symlink_to(tmp_path / "secret")
    (root / "sub" / "up").symlink_to(tmp_path)
    (root / "alias").symlink_to(root / "sub")  # stays inside: fine
    for name in ("leak", "sub/up/secret"):
        with pytest.raises(UnsafePathError, match="outside .*symlink"):
            join_inside(root, name, source="index.json")
    assert join_inside(root, "alias/f", source="index.json") == root / "alias" / "f"


def test_hub_cache_snapshots_may_link_to_their_blobs(tmp_path: Path) -> None:
    """huggingface_hub stores each snapshot file as a link to ``../../blobs/<hash>``."""
    repo = tmp_path / "hub" / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc123").write_text("{}")
    snapshot = repo / "snapshots" / "0123abcd"
    (snapshot / "unet").mkdir(parents=True)
    (snapshot / "config.json").symlink_to("../../blobs/abc123")
    (snapshot / "unet" / "config.json").symlink_to("../../../blobs/abc123")
    assert join_inside(snapshot, "config.json", source="x") == snapshot / "config.json"
    assert join_inside(snapshot / "unet", "config.json", source="x").is_file()
    (tmp_path / "hub" / "secret").write_text("x")
    (snapshot / "other").symlink_to(tmp_path / "hub" / "secret")  # out of the repo: refused
    with pytest.raises(UnsafePathError):
        join_inside(snapshot, "other", source="x")


# A scratch folder per module (hypothesis runs the body many times per fixture): links that
# stay inside it and that leave it.
_SCRATCH = Path(tempfile.mkdtemp(prefix="mobius-paths-"))
_ROOT = _SCRATCH / "root"
(_ROOT / "in").mkdir(parents=True)
(_ROOT / "link_in").symlink_to(_ROOT / "in")
(_ROOT / "link_out").symlink_to(_SCRATCH)
(_ROOT / "link_abs").symlink_to("/")

_PARTS = ["..", ".", "", "a", "in", "link_in", "link_out", "link_abs", "C:", "c:x", "\\\\h",
          "\\", "x\0", "é", "日本", " ", "~", "$HOME", "root"]  # fmt: skip
names = st.one_of(
    st.lists(st.sampled_from(_PARTS), max_size=5).flatmap(
        lambda parts: st.sampled_from(["/", "\\"]).map(lambda sep: sep.join(parts))
    ),
    st.text(max_size=12),
    st.text(alphabet="./\\:C\0a", max_size=10),
)


def _hub_refuses(name: str) -> bool:
    """Whether huggingface_hub refuses ``name`` as a repo file name (its own check)."""
    from huggingface_hub._local_folder import _validate_relative_filename

    try:
        _validate_relative_filename(name)
    except ValueError:
        return True
    return False


@settings(
    max_examples=300,
    deadline=30_000,  # ms: no hostile case may take over 30 s (issue 30)
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(names)
def test_join_inside_stays_inside_or_raises(name: str) -> None:
    """Either the path is strictly inside the root with every link followed, or the typed
    one-line error names the source; a name the hub refuses is refused here too."""
    real_root = os.path.realpath(_ROOT)
    try:
        path = join_inside(_ROOT, name, source="fuzz.json")
    except UnsafePathError as exc:
        assert str(exc).startswith("fuzz.json: ") and "\n" not in str(exc)
        # Refused only for the hub's reasons or mobius's few more.
        if not name or "\0" in name or _hub_refuses(name):
            return
        real = os.path.realpath(_ROOT / name)
        assert real == real_root or os.path.commonpath([real, real_root]) != real_root, name
        return
    assert path == _ROOT / name
    real = os.path.realpath(path)
    assert real != real_root and os.path.commonpath([real, real_root]) == real_root
    assert not _hub_refuses(name)
    assert check_name(name, source="fuzz.json") == name


# -- index shards ---------------------------------------------------------------------------


def shard(model_dir: Path, second: str, target: Path | None = None) -> None:
    """Split the checkpoint in two shards; the index names the second ``second``, whose
    tensors are written to ``target`` (default: ``model_dir / second``)."""
    tensors = load_file(model_dir / "model.safetensors")
    (model_dir / "model.safetensors").unlink()
    names = sorted(tensors)
    first, rest = names[: len(names) // 2], names[len(names) // 2 :]
    save_file({n: tensors[n] for n in first}, model_dir / "model-00001.safetensors")
    target = model_dir / second if target is None else target
    target.parent.mkdir(parents=True, exist_ok=True)
    save_file({n: tensors[n] for n in rest}, target)
    weight_map = {n: "model-00001.safetensors" for n in first} | {n: second for n in rest}
    (model_dir / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def test_an_absolute_shard_name_is_refused(capsys, model_dir, tmp_path, outputs) -> None:
    victim = tmp_path / "elsewhere" / "other.safetensors"
    shard(model_dir, str(victim), victim)
    assert_fails_cleanly(
        capsys, model_dir, outputs / "out",
        "model.safetensors.index.json", "unsafe file name", repr(str(victim)), "absolute",
    )  # fmt: skip


def test_a_dotdot_shard_name_is_refused(capsys, model_dir, tmp_path, outputs) -> None:
    shard(model_dir, "../victim.safetensors", tmp_path / "victim.safetensors")
    assert_fails_cleanly(
        capsys, model_dir, outputs / "out",
        "model.safetensors.index.json", "'../victim.safetensors'", "'..' segment",
    )  # fmt: skip


def test_a_shard_linked_out_of_the_folder_is_refused(capsys, model_dir, tmp_path, outputs):
    shard(model_dir, "model-00002.safetensors", tmp_path / "elsewhere" / "shard.safetensors")
    (model_dir / "model-00002.safetensors").symlink_to(tmp_path / "elsewhere" / "shard.safetensors")
    assert_fails_cleanly(
        capsys, model_dir, outputs / "out", "'model-00002.safetensors'", "outside", "symlink"
    )


def test_a_pickle_index_shard_outside_is_refused(capsys, model_dir, outputs) -> None:
    (model_dir / "model.safetensors").unlink()
    (model_dir / "pytorch_model-00001.bin").write_bytes(b"")
    weight_map = {"lm_head.weight": "pytorch_model-00001.bin", "model.norm.weight": "../x.bin"}
    index = {"weight_map": weight_map}
    (model_dir / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    line = assert_user_error_build(capsys, model_dir, outputs / "out", "--allow-pickle")
    assert "pytorch_model.bin.index.json" in line and "'../x.bin'" in line


def assert_user_error_build(capsys, model: Path, out: Path, *options: str) -> str:
    """``mobius build`` fails with one error line (notes aside), exit 1, and leaves no output
    and nothing new beside it."""
    before = sorted(os.listdir(out.parent))
    code = main(["build", "--model", str(model), str(out), "-q", *options])
    err = capsys.readouterr().err
    assert code == 1, err
    lines = [line for line in err.splitlines() if not line.startswith("mobius: note: ")]
    assert len(lines) == 1 and lines[0].startswith("mobius: error: "), err
    assert not out.exists() and sorted(os.listdir(out.parent)) == before
    return lines[0]


# -- files copied into the package ----------------------------------------------------------


def test_a_tokenizer_file_linked_out_of_the_folder_is_not_copied(
    capsys, model_dir, tmp_path, outputs
) -> None:
    """``tokenizer.json -> ~/.ssh/id_rsa`` would put that file into the package."""
    secret = tmp_path / "secret"
    secret.write_text("PRIVATE KEY")
    (model_dir / "tokenizer.json").symlink_to(secret)
    assert_fails_cleanly(capsys, model_dir, outputs / "out", "'tokenizer.json'", "outside")


def test_package_names_never_write_outside_the_output(tmp_path: Path) -> None:
    """The last guard: a package's own file names go through the same join when saved."""
    out = tmp_path / "outputs" / "out"
    escapes = (
        {"text_files": {"../escaped.txt": "x"}},
        {"binary_files": {str(tmp_path / "escaped.bin"): b"x"}},
    )
    for files in escapes:
        package = ModelPackage(models={}, **files)
        with pytest.raises(UnsafePathError, match="escaped"):
            package.save(out, progress=False)
        assert [p for p in tmp_path.rglob("*") if not p.is_dir()] == []


# -- diffusers pipelines --------------------------------------------------------------------


#: The tiny llama stands in for a pipeline's text encoder, a decoder: its hidden states.
PIPELINE_OPTIONS = ("--hidden-states", "-2")


def pipeline_with(tmp_path: Path, components: dict[str, str]) -> Path:
    """A pipeline folder whose index lists ``components`` (name -> class); every model is
    the tiny llama, written where its name leads (a name may leave the folder)."""
    pipeline = tmp_path / "pipeline"
    pipeline.mkdir()
    index = {"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0"}
    for name, class_name in components.items():
        index[name] = ["transformers", class_name]
        folder = Path(os.path.normpath(pipeline / name))
        if class_name == "LlamaModel":
            write_tiny_llama(folder)
    (pipeline / "model_index.json").write_text(json.dumps(index))
    return pipeline


def snapshot_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_pipeline_component_outside_the_folder_is_not_read(capsys, tmp_path, outputs):
    pipeline = pipeline_with(tmp_path, {"text_encoder": "LlamaModel", "../src": "LlamaModel"})
    line = assert_user_error_build(capsys, pipeline, outputs / "out", *PIPELINE_OPTIONS)
    assert "model_index.json" in line and "'../src'" in line and "'..' segment" in line


def test_a_pipeline_component_never_writes_outside_out(capsys, tmp_path, outputs) -> None:
    """``"../evilvae"`` would be written beside OUT, over what is there."""
    pipeline = pipeline_with(tmp_path, {"text_encoder": "LlamaModel", "../evilvae": "LlamaModel"})
    precious = outputs / "evilvae"
    precious.mkdir()
    (precious / "model.onnx").write_text("precious")
    before = snapshot_of(tmp_path)
    line = assert_user_error_build(capsys, pipeline, outputs / "out", *PIPELINE_OPTIONS)
    assert "'../evilvae'" in line and "'..' segment" in line
    assert snapshot_of(tmp_path) == before


def test_a_pipeline_folder_linked_elsewhere_is_not_copied(capsys, tmp_path, outputs) -> None:
    """A tokenizer "component" linked to another folder would copy that folder's files."""
    pipeline = pipeline_with(tmp_path, {"text_encoder": "LlamaModel"})
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "id_rsa").write_text("PRIVATE KEY")
    (pipeline / "tokenizer").symlink_to(secrets)
    index = json.loads((pipeline / "model_index.json").read_text())
    index["tokenizer"] = ["transformers", "CLIPTokenizer"]
    (pipeline / "model_index.json").write_text(json.dumps(index))
    line = assert_user_error_build(capsys, pipeline, outputs / "out", *PIPELINE_OPTIONS)
    assert "'tokenizer'" in line and "outside" in line and "symlink" in line
