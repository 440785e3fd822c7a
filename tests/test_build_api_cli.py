"""``mobius.build(src).save(out)`` and ``mobius build --model src out`` write the same files.

Both go through one build path (options, source, build, then the package
finished inside ``build()``: genai_config.json, --no-weights), so the two outputs
must agree byte for byte: on the real SmolLM2 checkpoint (with the
onnxruntime-genai config) and on a tiny diffusers pipeline (several components,
tokenizers and scheduler copied).

The build record ``mobius.json`` is compared like every other file, with no field
excluded: it holds no timestamp, host or cache path (only the source path as
given, the same here), and the CLI's default plugin options are recorded as the
API's absent ones (``mobius._record.options_record``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import mobius
from mobius.cli import main


def files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def assert_same_files(cli_out: Path, api_out: Path) -> None:
    cli, api = files(cli_out), files(api_out)
    assert "mobius.json" in cli
    assert sorted(cli) == sorted(api)
    different = [name for name in cli if cli[name] != api[name]]
    assert different == []


@pytest.mark.slow
def test_smollm2_api_and_cli_write_the_same_files(smollm2_dir, tmp_path):
    cli_out, api_out = tmp_path / "cli", tmp_path / "api"
    assert (
        main(
            [
                "build",
                "--model",
                str(smollm2_dir),
                str(cli_out),
                "--ep",
                "cpu",
                "--dtype",
                "f16",
                "-q",
            ]
        )
        == 0
    )
    mobius.build(smollm2_dir, ep="cpu", dtype="f16").save(api_out, progress=False)
    assert (api_out / "genai_config.json").is_file()  # written by build(), not by the CLI
    assert_same_files(cli_out, api_out)


def test_no_weights_api_and_cli_write_the_same_files(smollm2_dir, tmp_path):
    cli_out, api_out = tmp_path / "cli", tmp_path / "api"
    assert main(["build", "--model", str(smollm2_dir), str(cli_out), "--no-weights", "-q"]) == 0
    mobius.build(smollm2_dir, load_weights=False).save(api_out, progress=False)
    assert_same_files(cli_out, api_out)


def test_pipeline_api_and_cli_write_the_same_files(tmp_path):
    from pipeline_cases import make_sd_pipeline

    source = tmp_path / "sd"
    make_sd_pipeline(source)
    cli_out, api_out = tmp_path / "cli", tmp_path / "api"
    assert main(["build", "--model", str(source), str(cli_out), "-q"]) == 0
    mobius.build(source).save(api_out, progress=False)
    assert (api_out / "unet" / "model.onnx").is_file()
    assert_same_files(cli_out, api_out)
