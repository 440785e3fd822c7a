"""A tiny random DiT pipeline saved as the hub holds facebook/DiT-XL-2-256 (a legacy
``Transformer2DModel`` config, ``norm_type`` ada_norm_zero): built whole with ``mobius build``,
run by mobius's numpy runner and by diffusers from the same latents, 2 DDIM steps with
guidance against the null class; the images agree to 1e-3 (measured ~1.1e-6).

Every parameter is perturbed; the transformer has a learned sigma and 1000 classes (the
null class is row 1000, as diffusers' DiTPipeline names it). Also: classes by name
(``id2label``) and by ``--class-label``, and the one-line refusals.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from transformer_pipeline_cases import make_dit_pipeline, write_legacy_transformer_config

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.testing import build_with_cli

SIZE = 16  # sample_size 8 latents, the VAE doubles them
OPTIONS = dict(num_inference_steps=2, guidance_scale=3.0)


@pytest.fixture(scope="module")
def dit(tmp_path_factory):
    """(diffusers pipeline, the pipeline directory, built package directory)."""
    root = tmp_path_factory.mktemp("dit")
    pipe = make_dit_pipeline(root / "hf")
    write_legacy_transformer_config(root / "hf", "ada_norm_zero")
    return pipe, root / "hf", build_with_cli(root / "hf", root / "onnx")


def _diffusers_image(pipe, class_labels, seed, **options):
    """diffusers' image and the latents it drew (its generator's, given to mobius as they are)."""
    import torch
    from diffusers.utils.torch_utils import randn_tensor

    shape = (len(class_labels), 4, 8, 8)
    latents = randn_tensor(shape, generator=torch.Generator().manual_seed(seed)).numpy()
    with torch.no_grad():
        images = pipe(
            class_labels=class_labels,
            generator=torch.Generator().manual_seed(seed),
            output_type="np",
            **options,
        ).images
    return images, latents


@pytest.mark.parametrize("guidance_scale", [3.0, 1.0], ids=["guided", "unguided"])
def test_dit_image_matches_diffusers(dit, guidance_scale):
    from mobius_diffusion.pipeline import DiTRunner, open_pipeline

    pipe, hf, out = dit
    assert json.loads((hf / "transformer" / "config.json").read_text())["_class_name"] == (
        "Transformer2DModel"
    )
    options = dict(OPTIONS, guidance_scale=guidance_scale)
    expected, latents = _diffusers_image(pipe, [1, 2], seed=0, **options)
    runner = open_pipeline(out)
    assert isinstance(runner, DiTRunner)
    got = runner(class_labels=[1, 2], latents=latents, **options)
    assert got.shape == expected.shape == (2, SIZE, SIZE, 3)
    diff = float(np.abs(got - expected).max())
    print("dit", guidance_scale, "max abs diff", diff)
    assert diff <= 1e-3
    assert float(np.abs(expected[0] - expected[1]).max()) > 1e-3, "the class changes nothing"


def test_classes_by_name_and_by_id(dit):
    from mobius_diffusion.pipeline import open_pipeline

    pipe, _, out = dit
    runner = open_pipeline(out)
    assert runner.labels() == pipe.labels  # id2label read as diffusers reads it
    by_name = runner(["white shark", "Tinca tinca"], seed=4, **OPTIONS)
    assert np.array_equal(by_name, runner(class_labels=[2, 0], seed=4, **OPTIONS))
    with pytest.raises(ConfigError, match="no class named 'unicorn'"):
        runner("unicorn", seed=0)
    with pytest.raises(ConfigError, match="class ids run from 0 to 999"):
        runner(class_labels=[1000], seed=0)


def test_generate_cli_draws_the_class(dit, tmp_path):
    from PIL import Image

    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, _, out = dit
    args = ["generate", str(out), "--steps", "2", "--seed", "3", "--guidance-scale", "3"]
    by_id, by_name = tmp_path / "by-id.png", tmp_path / "by-name.png"
    assert main([*args[:2], "", *args[2:], "--class-label", "2", "--output", str(by_id)]) == 0
    assert main([*args[:2], "white shark", *args[2:], "--output", str(by_name)]) == 0
    expected = open_pipeline(out)(class_labels=[2], seed=3, **OPTIONS)
    for image in (by_id, by_name):
        assert np.array_equal(np.asarray(Image.open(image)), np.asarray(to_pil(expected)[0]))


def _refused(capsys, argv, expected):
    """The CLI fails with one ``mobius: error:`` line holding ``expected``."""
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("mobius: error: "), err
    assert expected in err, err


def test_refusals_are_one_line(dit, tmp_path, capsys):
    _, hf, out = dit
    image = str(tmp_path / "x.png")
    base = ["generate", str(out)]
    _refused(capsys, [*base, "goldfish", "--class-label", "1", "--output", image], "not both")
    _refused(capsys, [*base, "goldfish", "--height", "32", "--output", image], "sample_size")
    _refused(
        capsys,
        [*base, "goldfish", "--negative-prompt", "cat", "--output", image],
        "a DiTPipeline takes no negative prompt",
    )
    # the legacy transformer folder alone builds as DiT; one that is neither DiT nor PixArt
    # (the plain spatial transformer) is refused by name
    assert main(["build", "--model", str(hf / "transformer"), str(tmp_path / "t"), "-q"]) == 0
    plain = tmp_path / "plain"
    shutil.copytree(hf / "transformer", plain)
    config = json.loads((plain / "config.json").read_text())
    (plain / "config.json").write_text(json.dumps(dict(config, norm_type="layer_norm")))
    expected = "Transformer2DModel with norm_type 'layer_norm' is not built"
    _refused(capsys, ["build", "--model", str(plain), str(tmp_path / "o"), "-q"], expected)
