"""Mllama (Llama 3.2 Vision) parity: the tiled ViT, the cross-attention cache, cached decode.

A tiny random ``MllamaForConditionalGeneration`` with every parameter perturbed and its
zero-initialised tanh gates opened (so the cross-attention and the tile embeddings
matter), a batch of two prompts with one random image each through the real
``MllamaProcessor`` (its PIL image processor): 16-pixel tiles of 4-pixel patches (17
tokens a tile, padded to 24), up to 2 tiles: a 16x30 image is two tiles side by side,
30x16 two stacked, and a 12x12 or 40x40 one a single tile with a padded second (the
padding tile's tokens are masked in the vision transformers and unseen by the text). The second prompt's image comes
after some text, whose tokens see no tile (their cross-attention rows are masked out).
Prefill logits and 8 greedy decode steps, at ``--ep default`` and ``cpu``.
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig
from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil
from transformers.models.mllama.processing_mllama import MllamaProcessor

from mobius.testing import build_with_cli, tiny_tokenizer
from mobius_vision.testing import check_cross_attention_vl_parity

VOCAB = 96
IMAGE, BOS = VOCAB, 3  # the image token sits past the head's vocabulary, as in Llama 3.2
PROMPTS = ("<|image|> w5 w7 w9 w11", "w20 w21 <|image|> w4 w8 w6 w10 w12")
VISION = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    num_global_layers=2,
    attention_heads=2,
    image_size=16,
    patch_size=4,
    max_num_tiles=2,
    supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]],
    intermediate_layers_indices=[0, 2],
    vision_output_dim=96,
)
TEXT = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=5,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    cross_attention_layers=[1, 3],
    max_position_embeddings=256,
    bos_token_id=BOS,
    eos_token_id=None,
    pad_token_id=None,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def mllama_config(text=TEXT, vision=VISION):
    return AutoConfig.for_model(
        "mllama", vision_config=dict(vision), text_config=dict(text), image_token_index=IMAGE
    )


def mllama_processor(config):
    vision = config.vision_config
    image_processor = MllamaImageProcessorPil(
        size={"height": vision.image_size, "width": vision.image_size},
        max_image_tiles=vision.max_num_tiles,
    )
    tokenizer = tiny_tokenizer(VOCAB, {"<|image|>": IMAGE, "<|begin_of_text|>": BOS})
    tokenizer.bos_token = "<|begin_of_text|>"
    return MllamaProcessor(image_processor=image_processor, tokenizer=tokenizer)


#: case -> (model_type, config, image sizes), the layout scripts/support_table.py reads
CASES = {
    "mllama": ("mllama", mllama_config(), ((16, 30), (12, 12))),
    "mllama-llama3-rope": (
        "mllama",
        mllama_config(text=dict(TEXT, rope_parameters=LLAMA3_ROPE)),
        ((30, 16), (40, 40)),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mllama_parity(case, tmp_path):
    _model_type, config, image_sizes = CASES[case]
    results = check_cross_attention_vl_parity(
        config, mllama_processor(config), tmp_path, prompts=PROMPTS, image_sizes=image_sizes
    )
    assert len(results) == 2
    print({r.ep: f"{r.max_diff:.1e}" for r in results})


def test_mllama_unused_checkpoint_tensor_fails(tmp_path, capsys):
    """A checkpoint tensor the graphs do not read fails the build, by name."""
    import torch
    from safetensors.torch import load_file, save_file

    from mobius_vision.testing import make_random_vl_model

    make_random_vl_model(CASES["mllama"][1]).save_pretrained(tmp_path / "hf")
    path = tmp_path / "hf" / "model.safetensors"
    tensors = load_file(path)
    tensors["model.vision_model.stray.weight"] = torch.zeros(2)
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(RuntimeError, match="exit code"):
        build_with_cli(tmp_path / "hf", tmp_path / "out")
    assert "vision_model.stray.weight" in capsys.readouterr().err
