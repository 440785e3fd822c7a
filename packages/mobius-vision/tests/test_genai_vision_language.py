"""onnxruntime-genai runs a split vision–language package mobius writes, with its genai_config.json.

Tiny random Mistral 3, Qwen2.5-VL, Qwen2-VL, Qwen3.5 and Qwen3.5-MoE models are built
with ``--ep cpu`` (``--runtime auto`` writes the generator config for the families the
generator runs; Qwen2-VL runs as its ``qwen2_5_vl`` class; Qwen3.5's hybrid decoders
carry their Gated DeltaNet states through it); the generator's greedy tokens for a text
prompt equal transformers' ``generate``. For the Qwen families the build also writes
the generator's ``processor_config.json``: a random image through the generator's own
processor gives transformers' pixels, prompt and, step by step, logits. Mistral 3 gets
none (the generator resizes Pixtral images differently). Gemma 3 and 4, LFM2-VL, Qwen3-VL and
the families the generator has no class for get no generator config, with the reason.
"""

from __future__ import annotations

import importlib
import json
import sys

import numpy as np
import pytest
from vl_parity_cases.mistral3 import CASES

from mobius.testing import build_with_cli, genai_greedy, torch_greedy
from mobius_vision.testing import make_random_vl_model, random_images

if sys.version_info < (3, 11):
    # Not a dev dependency there: onnxruntime-genai 0.18 needs onnxruntime >= 1.31,
    # which ships no Python 3.10 wheels.
    pytest.skip("onnxruntime-genai needs Python >= 3.11", allow_module_level=True)

import onnxruntime_genai as og  # noqa: E402


def test_genai_runs_a_mistral3_package(tmp_path, capsys):
    _, make_config, _processor, *_ = CASES["mistral3-mistral"]
    torch_model = make_random_vl_model(make_config())
    torch_model.save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx", "--ep", "cpu")
    assert not (out / "processor_config.json").exists()
    assert "no processor_config.json (text prompts only)" in capsys.readouterr().err
    config = json.loads((out / "genai_config.json").read_text())["model"]
    assert config["type"] == "mistral3"
    assert config["decoder"]["filename"] == "decoder/model.onnx"
    assert config["decoder"]["inputs"]["inputs_embeds"] == "inputs_embeds"
    assert config["vision"]["inputs"] == {
        "pixel_values": "pixel_values",
        "image_sizes": "image_sizes",
    }
    prompt = [1, 6, 7, 9, 10, 12, 8]
    expected = torch_greedy(torch_model, prompt, 12, eos="suppress")
    assert genai_greedy(og.Model(str(out)), prompt, 12) == expected


def _bpe_tokenizer(vocab_size: int, special_tokens: dict[str, int], directory):
    """A byte-level BPE tokenizer (ids 0-2 pad, bos, eos) that the generator can read too.

    onnxruntime-extensions reads no word-level ``tokenizer.json`` (the kit's
    ``tiny_tokenizer``), so the vocabulary is lower-case letters, digits, ``:`` and the
    byte-level space ``Ġ``, with one merge. Saved to ``directory`` with
    ``tokenizer_class`` ``Qwen2Tokenizer``, a class the extensions know.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    free = [i for i in range(3, vocab_size) if i not in special_tokens.values()]
    pieces = [*"abcdefghijklmnopqrstuvwxyz0123456789:", "Ġ", "Ġw"]
    vocab = {piece: free[i] for i, piece in enumerate(pieces)}
    vocab.update({"<pad>": 0, "<s>": 1, "</s>": 2}, **special_tokens)
    backend = Tokenizer(models.BPE(vocab, [("Ġ", "w")]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(special_tokens)})
    tokenizer.save_pretrained(directory)
    path = directory / "tokenizer_config.json"
    path.write_text(
        json.dumps(dict(json.loads(path.read_text()), tokenizer_class="Qwen2Tokenizer"))
    )
    return tokenizer


def _genai_steps(model, inputs, prompt_length: int, new_tokens: int):
    """The generator's greedy tokens after the processor's ``inputs``, and each step's logits."""
    params = og.GeneratorParams(model)
    total = prompt_length + new_tokens
    params.set_search_options(do_sample=False, max_length=total, min_length=total)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    logits = []
    while not generator.is_done():
        logits.append(np.asarray(generator.get_logits()).reshape(-1))  # the next token's
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)][prompt_length:], logits


QWEN_CASES = {  # the case (module:name), its images-only processor class, the generator's class
    "vl_parity_cases.qwen2_5_vl:qwen2_5_vl-all-windows-gelu-tied": (
        "vl_parity_cases.qwen2_5_vl:ImageQwen2_5_VLProcessor",
        "qwen2_5_vl",
    ),
    "vl_parity_cases.qwen2_vl:qwen2_vl-two-sizes": (
        "vl_parity_cases.qwen2_vl:ImageQwen2VLProcessor",
        "qwen2_5_vl",
    ),
    # hybrid decoders: the generator carries the Gated DeltaNet layers' states
    "vl_parity_cases.qwen3_5:qwen3_5-hybrid-two-sizes": (
        "vl_parity_cases.qwen3_vl:ImageQwen3VLProcessor",
        "qwen3_5",
    ),
    "vl_parity_cases.qwen3_5:qwen3_5_moe-default-rope-tied": (
        "vl_parity_cases.qwen3_vl:ImageQwen3VLProcessor",
        "qwen3_5_moe",
    ),
}


def _imported(spec: str):
    module, name = spec.split(":")
    return importlib.import_module(module), name


@pytest.fixture(scope="module", params=sorted(QWEN_CASES))
def qwen_package(request, tmp_path_factory):
    """(transformers model, transformers processor, built package) of a Qwen-VL family.

    The source holds the PIL image processor and a byte-level BPE tokenizer the
    generator's processor can read, so the build writes its processor_config.json.
    """
    from vl_parity_cases.qwen2_vl import SPECIAL_TOKENS

    cases, case = _imported(request.param)
    _, make_config, make_processor, *_ = cases.CASES[case]
    processor_class = getattr(*_imported(QWEN_CASES[request.param][0]))
    tmp = tmp_path_factory.mktemp(case.split("-")[0])
    config = make_config()
    for part in (config, config.text_config):  # the defaults are the real vocabulary's ids
        part.bos_token_id, part.eos_token_id, part.pad_token_id = 1, 2, 0
    torch_model = make_random_vl_model(config)
    torch_model.save_pretrained(tmp / "hf")
    image_processor = make_processor(config).image_processor  # the PIL one
    image_processor.save_pretrained(tmp / "hf")
    tokenizer = _bpe_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS, tmp / "hf")
    processor = processor_class(image_processor=image_processor, tokenizer=tokenizer)
    out = build_with_cli(tmp / "hf", tmp / "onnx", "--ep", "cpu")
    return torch_model, processor, out, QWEN_CASES[request.param][1]


def test_genai_runs_a_qwen_vl_package(qwen_package):
    """The decoder takes M-RoPE's [3, batch, sequence] positions; the generator makes them."""
    torch_model, _, out, genai_type = qwen_package
    genai = json.loads((out / "genai_config.json").read_text())["model"]
    assert genai["type"] == genai_type
    assert genai["vision"]["inputs"] == {
        "pixel_values": "pixel_values",
        "image_grid_thw": "image_grid_thw",
    }
    assert (genai["vision"]["patch_size"], genai["vision"]["spatial_merge_size"]) == (4, 2)
    prompt = [1, 6, 7, 9, 10, 12, 8]
    expected = torch_greedy(torch_model, prompt, 12, eos="suppress")
    assert genai_greedy(og.Model(str(out)), prompt, 12) == expected


def test_genai_runs_an_image_prompt_through_a_qwen_vl_package(qwen_package, tmp_path):
    """The written processor_config.json makes the generator's pixels, prompt and logits transformers'.

    37x45 is enlarged to 40x48 and 50x70 shrunk to 40x56 (both resampled, bicubic) by
    ``smart_resize`` within the tiny ``max_pixels`` of 48x48.
    """
    import torch
    from PIL import Image
    from vl_parity_cases.qwen2_vl import START, VIDEO

    torch_model, processor, out, _ = qwen_package
    genai = json.loads((out / "genai_config.json").read_text())["model"]
    assert (genai["vision_start_token_id"], genai["video_token_id"]) == (START, VIDEO)
    assert (out / "processor_config.json").is_file()

    model = og.Model(str(out))
    og_processor = model.create_multimodal_processor()
    prompt = "ab <|vision_start|><|image_pad|><|vision_end|> w3 xyz:"
    new_tokens = 8
    for seed, size in enumerate(((37, 45), (50, 70))):
        path = tmp_path / f"image{seed}.png"
        Image.fromarray(random_images(1, size, seed)[0]).save(path)
        expected = processor(text=[prompt], images=[Image.open(path)], return_tensors="pt")
        inputs = og_processor(prompt, images=og.Images.open(str(path)))
        np.testing.assert_array_equal(inputs["input_ids"].as_numpy(), expected["input_ids"])
        np.testing.assert_array_equal(
            inputs["image_grid_thw"].as_numpy(), expected["image_grid_thw"]
        )
        pixels = inputs["pixel_values"].as_numpy()
        assert pixels.shape == expected["pixel_values"].shape
        assert np.abs(pixels - expected["pixel_values"].numpy()).max() <= 1e-4

        with torch.inference_mode():
            reference = torch_model.generate(
                **expected,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
            )
        prompt_length = expected["input_ids"].shape[1]
        tokens, logits = _genai_steps(model, inputs, prompt_length, new_tokens)
        assert tokens == reference.sequences[0, prompt_length:].tolist()
        for step, (got, want) in enumerate(zip(logits, reference.logits, strict=True)):
            diff = np.abs(got - want[0].numpy()).max()
            assert diff <= 1e-4, f"image {size}, step {step}: max abs diff {diff}"


def test_genai_resizes_pixtral_images_unlike_transformers(tmp_path):
    """Why a Mistral 3 package gets no processor_config.json.

    The generator's Pixtral path runs mobius's graphs exactly: with a hand-written
    pipeline (the Qwen resize, channels first, ``PixtralImageSizes``) a 37x45 image,
    which both resizes take to 40x48, gives transformers' prompt, pixels and logits.
    But extensions' only size-dependent resize rounds to the *nearest* multiple of
    ``patch_size * merge`` where Pixtral rounds up: 33x41 becomes 32x40, not 40x48.
    """
    import torch
    from PIL import Image
    from transformers.models.pixtral.image_processing_pil_pixtral import (
        PixtralImageProcessorPil,
    )
    from vl_parity_cases.mistral3 import SPECIAL_TOKENS, PixtralProcessor

    _, make_config, *_ = CASES["mistral3-mistral"]
    config = make_config()
    torch_model = make_random_vl_model(config)
    torch_model.save_pretrained(tmp_path / "hf")
    tokenizer = _bpe_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS, tmp_path / "hf")
    image_processor = PixtralImageProcessorPil(size={"longest_edge": 64})
    processor = PixtralProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=config.vision_config.patch_size,
        spatial_merge_size=config.spatial_merge_size,
    )
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx", "--ep", "cpu")
    resize = dict(smart_resize=1, min_pixels=64, max_pixels=64 * 64, patch_size=4, merge_size=2)
    steps = [
        ("DecodeImage", {"color_space": "RGB"}),
        ("Resize", resize),
        ("Rescale", {"rescale_factor": image_processor.rescale_factor}),
        ("Normalize", {"mean": image_processor.image_mean, "std": image_processor.image_std}),
        ("Permute3D", {"dims": [2, 0, 1]}),
        ("PixtralImageSizes", None),
    ]
    transforms = [
        {"operation": {"name": kind.lower(), "type": kind, **({"attrs": a} if a else {})}}
        for kind, a in steps
    ]
    processor_config = {"processor": {"name": "pixtral", "transforms": transforms}}
    (out / "processor_config.json").write_text(json.dumps(processor_config))
    model = og.Model(str(out))
    og_processor = model.create_multimodal_processor()
    prompt = "ab [IMG] w3 xyz:"

    def both(size, seed):
        path = tmp_path / f"image{seed}.png"
        Image.fromarray(random_images(1, size, seed)[0]).save(path)
        expected = processor(text=[prompt], images=[Image.open(path)], return_tensors="pt")
        return expected, og_processor(prompt, images=og.Images.open(str(path)))

    expected, inputs = both((37, 45), 0)
    np.testing.assert_array_equal(inputs["input_ids"].as_numpy(), expected["input_ids"])
    pixels = inputs["pixel_values"].as_numpy()
    assert np.abs(pixels - expected["pixel_values"].numpy()).max() <= 1e-4
    with torch.inference_mode():
        reference = torch_model.generate(
            **expected,
            max_new_tokens=4,
            min_new_tokens=4,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    prompt_length = expected["input_ids"].shape[1]
    tokens, logits = _genai_steps(model, inputs, prompt_length, 4)
    assert tokens == reference.sequences[0, prompt_length:].tolist()
    for got, want in zip(logits, reference.logits, strict=True):
        assert np.abs(got - want[0].numpy()).max() <= 1e-4

    expected, inputs = both((33, 41), 1)
    assert expected["image_sizes"].tolist() == [[40, 48]]
    assert inputs["image_sizes"].as_numpy().tolist() == [[32, 40]]


@pytest.mark.parametrize(
    "family, case, why",
    [
        ("llava", "llava-llama", "no vision–language class for 'llava'"),
        ("gemma3", "gemma3", "cannot run 'gemma3' packages: its decoder takes token_type_ids"),
        ("lfm2_vl", "lfm2_vl-two-grids", "cannot run 'lfm2_vl' packages: its SigLIP 2 tower"),
        (
            "qwen3_vl",
            "qwen3_vl-deepstack-two-sizes",
            "cannot run 'qwen3_vl' packages: its DeepStack features",
        ),
    ],
)
def test_no_genai_config_for_families_the_generator_cannot_run(family, case, why, tmp_path, capsys):

    _, make_config, *_ = importlib.import_module(f"vl_parity_cases.{family}").CASES[case]
    make_random_vl_model(make_config()).save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    assert not (out / "genai_config.json").exists()
    assert why in capsys.readouterr().err


@pytest.mark.parametrize("form", ["split", "single"])
def test_core_text_runner_refuses_a_vision_language_package(tmp_path, form):
    """Core's causal-LM runner alone meets a VL package with a contract error, not a crash.

    (``mobius generate`` hands VL packages to mobius-vision's runner: test_vl_generate.py.)
    """
    from vl_parity_cases.llava import CASES as LLAVA

    from mobius.generate import PackageError, open_generator

    _, make_config, _processor = LLAVA["llava-llama"]
    make_random_vl_model(make_config()).save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx", "--form", form)
    with pytest.raises(PackageError):
        open_generator(out)


@pytest.mark.parametrize(
    ("cases", "case", "genai_type"),
    [
        ("lfm2_vl", "lfm2_vl-two-grids", "lfm2"),
        ("qwen3_5", "qwen3_5-hybrid-two-sizes", "qwen3_5_text"),
    ],
)
def test_text_part_of_a_hybrid_wrapper_runs_in_the_generator(cases, case, genai_type, tmp_path):
    """``--part text`` of a wrapper whose decoder mixes attention with state layers: the
    generator carries the states (LFM2-VL's whole package it cannot feed images to)."""
    _, make_config, *_ = importlib.import_module(f"vl_parity_cases.{cases}").CASES[case]
    config = make_config()
    for part in (config, config.text_config):
        part.bos_token_id, part.eos_token_id, part.pad_token_id = 1, 2, 0
    config.text_config.initializer_range = 0.2  # logits spread enough not to repeat one token
    torch_model = make_random_vl_model(config)
    torch_model.save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "text", "--part", "text", "--ep", "cpu")
    genai = json.loads((out / "genai_config.json").read_text())["model"]
    assert genai["type"] == genai_type
    assert "full_attention" in genai["decoder"]["layer_types"]
    prompt = [1, 6, 7, 9, 10, 12, 8]
    expected = torch_greedy(torch_model, prompt, 12, eos="suppress")
    assert len(set(expected)) > 3  # a degenerate reference a broken state could match
    assert genai_greedy(og.Model(str(out)), prompt, 12) == expected
