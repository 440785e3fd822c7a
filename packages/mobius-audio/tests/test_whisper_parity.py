"""Whisper's encoder and cached decoder against PyTorch, on features from the real extractor.

A tiny random WhisperForConditionalGeneration (every parameter perturbed) is built
with the CLI path; a batch of two random waveforms (0.6 s and 1 s) goes through the
real WhisperFeatureExtractor's numpy path; the decoder prefills Whisper's prompt
(start, language, task, no-timestamps), then takes 8 greedy steps through both
caches; max abs <= 1e-4 and the tokens equal transformers' ``generate``.
The ``--ep cpu`` build runs its unmasked attentions as ``MultiHeadAttention``.
"""

from __future__ import annotations

import onnx
import pytest
from _whisper_tiny import PROMPT, WHISPER, feature_extractor, set_generation_config
from transformers import AutoConfig

from mobius_audio.testing import check_speech_to_text_parity

CASES = {
    "whisper": (WHISPER, {}),
    "whisper-untied-relu-128mel": (
        dict(WHISPER, tie_word_embeddings=False, activation_function="relu", num_mel_bins=128,
             decoder_layers=3, decoder_attention_heads=2, encoder_layers=1),
        {},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_whisper_parity(case, tmp_path):
    overrides, options = CASES[case]
    hf_config = AutoConfig.for_model("whisper", **overrides)
    results = check_speech_to_text_parity(
        hf_config, feature_extractor(overrides["num_mel_bins"]), tmp_path, prompt=PROMPT,
        prepare=set_generation_config, **options,
    )  # fmt: skip
    for result in results:
        assert len(result.decode_diffs) == 8
        tokens = {t for step in result.onnx_tokens for t in step}
        assert len(tokens) > 1, "degenerate greedy streams: the check would prove little"
    # --ep cpu: the encoder's self-attention and the decoder's cross-attention run ONNX
    # Runtime's MultiHeadAttention (the faster kernel); --ep default stays standard ONNX.
    mha = ("com.microsoft", "MultiHeadAttention")
    assert _op_types(tmp_path, "cpu", "encoder").count(mha) == overrides["encoder_layers"]
    assert ("", "Attention") not in _op_types(tmp_path, "cpu", "encoder")
    assert _op_types(tmp_path, "cpu", "decoder").count(mha) == overrides["decoder_layers"]
    assert mha not in _op_types(tmp_path, "default", "encoder")
    assert mha not in _op_types(tmp_path, "default", "decoder")


def _op_types(workdir, ep: str, graph: str) -> list[tuple[str, str]]:
    """``(domain, op_type)`` of each node of the ``--ep ep`` build's ``graph``."""
    model = onnx.load(workdir / f"onnx-{ep}" / graph / "model.onnx", load_external_data=False)
    return [(node.domain, node.op_type) for node in model.graph.node]
