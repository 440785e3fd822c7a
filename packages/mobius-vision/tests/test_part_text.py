"""``mobius build --part text``: a wrapper checkpoint's text decoder alone, against transformers.

Each wrapper is a tiny random model of its own transformers class (every parameter
perturbed), saved with ``save_pretrained``: Gemma 3 and Cohere2-Vision (whose text head
scale the wrapper does not apply), Gemma 3n, Llama 4 and Qwen3.5; and the Gemma 3
checkpoint renamed to a wrapper type nobody registers, for the path of wrappers no
package builds whole. The package, built through the CLI, is compared with the wrapper's
own forward on ``input_ids`` alone: prefill and 8 cached decode steps, batch of two
with left padding, at the usual tolerance. The note that lists the towers left out,
the refusal of a stray tensor, and what ``mobius info`` says are checked on the same
checkpoints.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from pathlib import Path
from unittest import mock

import pytest
import torch
from transformers import AutoConfig, AutoModelForImageTextToText
from transformers.modeling_outputs import MoeCausalLMOutputWithPast
from vl_parity_cases.cohere2_vision import cohere2_config
from vl_parity_cases.gemma3 import gemma3_config

from mobius import registry
from mobius.cli import main
from mobius.testing import OnnxCausalLM, build_with_cli, perturb_parameters, text_forward
from mobius.testing._parity import compare_causal_lm

TEXT = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=96,
    max_position_embeddings=64,
)
GEMMA3N_TEXT = dict(
    TEXT,
    head_dim=16,
    num_hidden_layers=3,
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    sliding_window=4,
    num_kv_shared_layers=1,
    hidden_size_per_layer_input=8,
    vocab_size_per_layer_input=96,
    laurel_rank=4,
    activation_sparsity_pattern=[0.95, 0.0, 0.0],
    final_logit_softcapping=3.0,
)
LLAMA4_TEXT = dict(
    TEXT,
    head_dim=16,
    intermediate_size_mlp=64,
    num_local_experts=4,
    attention_chunk_size=4,
    no_rope_layer_interval=2,
    interleave_moe_layer_step=2,
    floor_scale=2,
    attn_scale=0.5,
)
QWEN3_5_TEXT = dict(
    TEXT,
    num_hidden_layers=3,
    layer_types=["linear_attention", "full_attention", "linear_attention"],
    head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
    # 16 of 32 channels rotate: 8 pairs, the M-RoPE sections of the whole build
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "mrope_section": [2, 3, 3],
    },
)
QWEN3_5_MOE_TEXT = dict(
    QWEN3_5_TEXT,
    num_hidden_layers=2,
    layer_types=["full_attention", "linear_attention"],
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    shared_expert_intermediate_size=48,
)
GEMMA4_TEXT = dict(
    TEXT,
    num_hidden_layers=3,
    head_dim=8,
    global_head_dim=16,
    num_global_key_value_heads=1,
    layer_types=["sliding_attention", "full_attention", "full_attention"],
    sliding_window=4,
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
        "full_attention": {
            "rope_type": "proportional",
            "partial_rotary_factor": 0.25,
            "rope_theta": 10_000.0,
        },
    },
    num_kv_shared_layers=1,
    hidden_size_per_layer_input=8,
    vocab_size_per_layer_input=96,
)
TOWER = dict(hidden_size=16, intermediate_size=32, num_attention_heads=2, patch_size=4)

WRAPPERS = {
    "gemma3": lambda: gemma3_config()(),
    # Cohere2's logit_scale, which its text-only class applies and the wrapper's head does not
    "cohere2_vision": lambda: cohere2_config()(),
    "gemma3n": lambda: AutoConfig.for_model(
        "gemma3n",
        text_config=GEMMA3N_TEXT,
        # MobileNet-v5's 2048 output channels (the whole build checks them; no tower is made)
        vision_config=dict(hidden_size=2048, vocab_size=4, vocab_offset=96),
        audio_config=dict(
            hidden_size=16,
            vocab_size=4,
            vocab_offset=100,
            input_feat_size=8,
            conf_num_hidden_layers=1,
            conf_num_attention_heads=2,
            sscp_conv_channel_size=[4, 4],
        ),
    ),
    "llama4": lambda: AutoConfig.for_model(
        "llama4",
        text_config=LLAMA4_TEXT,
        vision_config=dict(
            TOWER,
            intermediate_size=64,  # the pixel shuffle's 4 x hidden
            num_hidden_layers=1,
            image_size=16,
            vision_output_dim=32,
            projector_input_dim=32,
            projector_output_dim=32,
        ),
    ),
    "qwen3_5": lambda: AutoConfig.for_model(
        "qwen3_5",
        text_config=QWEN3_5_TEXT,
        vision_config=dict(
            TOWER,
            depth=1,
            num_heads=2,
            out_hidden_size=32,
            spatial_merge_size=2,
            num_position_embeddings=9,
        ),
    ),
    "qwen3_5_moe": lambda: AutoConfig.for_model(
        "qwen3_5_moe",
        text_config=QWEN3_5_MOE_TEXT,
        vision_config=dict(
            TOWER,
            depth=1,
            num_heads=2,
            out_hidden_size=32,
            spatial_merge_size=2,
            num_position_embeddings=9,
        ),
    ),
    "gemma4": lambda: AutoConfig.for_model(
        "gemma4",
        text_config=GEMMA4_TEXT,
        vision_config=dict(
            TOWER,
            num_hidden_layers=1,
            num_key_value_heads=1,
            head_dim=8,
            pooling_kernel_size=2,
            position_embedding_size=32,
        ),
    ),
}
#: The towers each wrapper's note names (checkpoint prefixes).
LEFT_OUT = {
    "gemma3": ["multi_modal_projector.*", "vision_tower.*"],  # saved in the hub's layout
    "cohere2_vision": ["model.multi_modal_projector.*", "model.vision_tower.*"],
    "gemma3n": [
        "model.audio_tower.*",
        "model.embed_audio.*",
        "model.embed_vision.*",
        "model.vision_tower.*",
    ],
    "llama4": ["multi_modal_projector.*", "vision_model.*"],
    "qwen3_5": ["model.visual.*"],
    "qwen3_5_moe": ["model.visual.*"],
    "gemma4": ["model.embed_vision.*", "model.vision_tower.*"],
}


# transformers 5.24's Llama4ForConditionalGeneration.forward reads ``image_outputs`` off its
# language model's output, a MoeCausalLMOutputWithPast that has no such field, and so fails on
# every call; the field, absent, reads as None.
if not hasattr(MoeCausalLMOutputWithPast, "image_outputs"):
    MoeCausalLMOutputWithPast.image_outputs = None


class _TimmStandIn(torch.nn.Module):
    """Gemma 3n's MobileNet-v5 tower is a timm model, and timm is not installed here: a
    conv under timm's module name stands in (--part text leaves the tower out anyway)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.timm_model = torch.nn.Module()
        self.timm_model.conv_stem = torch.nn.Conv2d(3, 4, 3)


@contextlib.contextmanager
def _without_timm():
    from transformers.models.gemma3n import modeling_gemma3n

    made = modeling_gemma3n.AutoModel.from_config

    def from_config(config, **kwargs):
        if config.model_type == "gemma3n_vision":
            return _TimmStandIn(config)
        return made(config, **kwargs)

    with mock.patch.object(modeling_gemma3n.AutoModel, "from_config", from_config):
        yield


class _Notes(logging.Handler):
    """mobius's log messages while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class Built:
    """A wrapper checkpoint, its torch model and its ``--part text`` package."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        torch.manual_seed(0)
        with _without_timm():
            model = AutoModelForImageTextToText.from_config(
                WRAPPERS[name](), dtype=torch.float32, attn_implementation="eager"
            )
        perturb_parameters(model, seed=1)
        self.model = model.eval()
        self.checkpoint = root / name
        model.save_pretrained(self.checkpoint)
        notes = _Notes()
        logging.getLogger("mobius").addHandler(notes)
        try:
            self.package = build_with_cli(self.checkpoint, root / f"{name}-text", "--part", "text")
        finally:
            logging.getLogger("mobius").removeHandler(notes)
        self.notes = notes.messages


_BUILT: dict[str, Built] = {}


def _built(name: str, tmp_path_factory) -> Built:
    if name not in _BUILT:
        _BUILT[name] = Built(name, tmp_path_factory.mktemp("part-text"))
    return _BUILT[name]


@pytest.fixture(scope="module", params=sorted(WRAPPERS))
def built(request, tmp_path_factory) -> Built:
    return _built(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def unregistered(tmp_path_factory) -> Path:
    """The Gemma 3 checkpoint as a wrapper type nobody registers (nor transformers knows)."""
    gemma3 = _built("gemma3", tmp_path_factory)
    copy = tmp_path_factory.mktemp("unregistered") / "wrapper"
    shutil.copytree(gemma3.checkpoint, copy)
    config = json.loads((copy / "config.json").read_text())
    config.update(model_type="wrapper_nobody_registers", architectures=["NobodysWrapper"])
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def test_text_part_matches_the_wrappers_text_path(built):
    onnx_model = OnnxCausalLM(built.package / "model.onnx")
    result = compare_causal_lm(text_forward(built.model), onnx_model, lengths=(7, 4))
    result.assert_close()
    config = json.loads((built.package / "config.json").read_text())
    assert config["model_type"] == built.model.config.text_config.model_type
    record = json.loads((built.package / "mobius.json").read_text())
    assert record["task"] == "causal-lm"


def test_note_names_the_towers_left_out(built):
    notes = [m for m in built.notes if "ignored on purpose" in m]
    assert len(notes) == 1, built.notes
    for group in LEFT_OUT[built.name]:
        assert group in notes[0]


def test_a_stray_tensor_still_fails(built, tmp_path, capsys):
    from safetensors.numpy import load_file, save_file

    for stray in ("stray.weight", "model.language_model.stray.weight"):
        copy = tmp_path / stray
        shutil.copytree(built.checkpoint, copy)
        weights = load_file(copy / "model.safetensors")
        weights[stray] = next(iter(weights.values()))
        save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
        code = main(["build", "--model", str(copy), str(tmp_path / "out"), "--part", "text"])
        assert code == 1
        assert "stray.weight" in capsys.readouterr().err


def test_info_says_what_is_built(built, capsys):
    assert main(["info", str(built.checkpoint)]) == 0
    out = capsys.readouterr().out
    text_type = built.model.config.text_config.model_type
    assert f"--part text: the {text_type} text decoder alone" in out
    if built.name in registry:
        assert f"{built.name} whole: " in out
    else:
        assert f"{built.name} is not built whole yet; --part text builds its {text_type}" in out
        assert f"model type        {text_type}" in out


def test_a_wrapper_nobody_builds_whole_is_refused_with_the_way_out(unregistered, tmp_path, capsys):
    assert main(["build", "--model", str(unregistered), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "'wrapper_nobody_registers' is not built whole yet" in err
    assert "--part text builds its gemma3_text text decoder alone" in err


def test_a_wrapper_nobody_builds_whole_builds_its_text_part(unregistered, tmp_path_factory):
    gemma3 = _built("gemma3", tmp_path_factory)
    package = build_with_cli(unregistered, tmp_path_factory.mktemp("out") / "p", "--part", "text")
    result = compare_causal_lm(
        text_forward(gemma3.model), OnnxCausalLM(package / "model.onnx"), (7, 4)
    )
    result.assert_close()


def test_info_on_a_wrapper_nobody_builds_whole_describes_its_text_part(unregistered, capsys):
    assert main(["info", str(unregistered)]) == 0
    out = capsys.readouterr().out
    assert (
        "wrapper_nobody_registers is not built whole yet; --part text builds its gemma3_text" in out
    )
    assert "model type        gemma3_text" in out
    assert "task              causal-lm" in out


def test_part_text_refuses_a_checkpoint_without_text_config(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert main(["build", "--model", str(tmp_path), str(tmp_path / "out"), "--part", "text"]) == 1
    err = capsys.readouterr().err
    assert "--part text builds the text decoder of a multimodal checkpoint" in err


@pytest.mark.parametrize("name", ["gemma3", "qwen3_5"])
def test_validate_compares_the_text_part_with_the_wrapper(name, tmp_path_factory):
    """--validate on a --part text build: the reference is the wrapper run on text alone."""
    from mobius.validate import validate_package

    built = _built(name, tmp_path_factory)
    report = validate_package(built.package, built.checkpoint)
    assert report.passed and report.tokens_agree, report.summary()
    assert report.reference.startswith("transformers ") and max(report.diffs.values()) <= 1e-4
