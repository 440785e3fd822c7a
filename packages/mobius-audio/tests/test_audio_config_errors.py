"""Wav2vec2-family options that are not built are refused with a ConfigError, never approximated.

The refusal of a head transformers does not have for the type goes through the real CLI: one ``mobius: error:`` line, exit 1, and
no output directory (nor staging directory) left behind. The checkpoint is a config
plus a placeholder safetensors file: the config is refused before any tensor is read.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from transformers import AutoConfig

from mobius.cli import main
from mobius.errors import ConfigError
from mobius_audio.models.hubert import HubertConfig
from mobius_audio.models.wav2vec2 import Wav2Vec2Config

TINY = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)


@pytest.mark.parametrize(
    ("model_type", "architecture", "head"),
    [
        ("hubert", "HubertForXVector", "xvector"),
        ("unispeech", "UniSpeechForAudioFrameClassification", "audio-frame-classification"),
        ("sew", "SEWForXVector", "xvector"),
    ],
)
def test_head_the_type_lacks_is_refused_by_the_cli(
    model_type, architecture, head, tmp_path: Path, capsys
):
    """transformers has no such class for the type: a config naming one is not built."""
    model = tmp_path / "model"
    AutoConfig.for_model(model_type, architectures=[architecture], **TINY).save_pretrained(model)
    save_file({"placeholder": np.zeros(1, np.float32)}, model / "model.safetensors")
    outputs = tmp_path / "outputs"
    outputs.mkdir()

    code = main(["build", "--model", str(model), str(outputs / "out"), "-q"])

    out, err = capsys.readouterr()
    assert code == 1
    assert "Traceback" not in err and "wrote" not in out
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("mobius: error: "), lines[0]
    assert f"{model_type} has no {head} head in transformers" in lines[0]
    assert os.listdir(outputs) == []  # no output, no staging directory


def test_adapter_is_a_config_error():
    hf_config = AutoConfig.for_model("wav2vec2", add_adapter=True, **TINY)
    with pytest.raises(ConfigError, match="add_adapter"):
        Wav2Vec2Config.from_hf(hf_config)


def test_hubert_conv_pos_batch_norm_is_a_config_error():
    hf_config = AutoConfig.for_model("hubert", conv_pos_batch_norm=True, **TINY)
    with pytest.raises(ConfigError, match="conv_pos_batch_norm"):
        HubertConfig.from_hf(hf_config)


def test_xvector_tdnn_layers_must_agree():
    """One kernel and one dilation per TDNN layer, as transformers zips them."""
    hf_config = AutoConfig.for_model(
        "wav2vec2", tdnn_dim=(8, 8), tdnn_kernel=(3,), tdnn_dilation=(1, 1), **TINY
    )
    with pytest.raises(ConfigError, match="tdnn_dim, tdnn_kernel, tdnn_dilation"):
        Wav2Vec2Config.from_hf(hf_config)
