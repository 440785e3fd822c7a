"""SeamlessM4T v2 speech output against transformers: the non-autoregressive unit model and ``mobius generate``.

Tiny random ``SeamlessM4Tv2ForTextToSpeech`` and ``...ForSpeechToSpeech`` models
(every parameter perturbed; the unit model's durations scaled to last 1 to ~5
frames; the text-to-text test's character tokenizer; a generation config with
``id_to_text`` and a ``char_to_id`` that leaves some characters unknown) are built
with the CLI once each. The two unit graphs are compared at fp32 (<= 1e-4) on a
batch of two of different lengths (states, characters and frames padded); the
character counting against transformers' own helper on pieces with punctuation
and an unknown token. Then ``mobius generate ... --output x.wav`` must print
transformers' text and write its waveform within 1e-4
(``generate(..., tgt_lang="fra", speaker_id=1)``, greedy), with the same units.
"""

from __future__ import annotations

import numpy as np
import pytest
from _cli import broken_config_error, one_line_error
from test_seamless_m4t_parity import CASES, TINY
from test_seamless_m4t_speech import (
    SPEECH,
    SPEECH_MAPS,
    Graph,
    assert_close,
    assert_speaks,
    check_vocoder,
)
from test_seamless_m4t_speech import reference as v1_reference
from test_seamless_m4t_text_generate import char_tokenizer
from test_whisper_end_to_end import reference_audio, write_wav
from transformers import AutoConfig, SeamlessM4TFeatureExtractor

from mobius.errors import MobiusError
from mobius.testing import build_with_cli, perturb_parameters
from mobius_audio.generate import extract_inputs
from mobius_audio.seamless_speech_generate import open_speech_translator
from mobius_audio.seamless_v2_speech_generate import character_counts

pytestmark = pytest.mark.filterwarnings(  # torch's, about its reference's kernel-4 convs
    "ignore:Using padding='same' with even kernel lengths:UserWarning"
)
TEXT = "hello world"
MAX_NEW_TOKENS = 10
CHARS = "▁abcdefghijklmnopqrstuvwxy"  # no z, no capitals: unknown characters
V2_SPEECH = dict(
    char_vocab_size=len(CHARS) + 4, t2u_variance_predictor_embed_dim=TINY["hidden_size"],
    t2u_variance_predictor_hidden_dim=16, t2u_variance_predictor_kernel_size=4,
    variance_predictor_kernel_size=5,  # the vocoder's: v1 runs 3 only, v2 any ("same" pads)
)  # fmt: skip


def make_model(kind: str, overrides: dict, seed: int, tokenizer):
    import torch
    import transformers

    settings = {k: v for k, v in SPEECH.items() if k != "t2u_max_new_tokens"}
    config = AutoConfig.for_model("seamless_m4t_v2", **dict(overrides, **settings, **V2_SPEECH))
    torch.manual_seed(seed)
    model = getattr(transformers, f"SeamlessM4Tv2For{kind}")(config).eval()
    perturb_parameters(model, seed)
    with torch.no_grad():  # characters of 1 to ~5 frames, units of 1 to ~10 (tiny random: all 1)
        characters = model.t2u_model.model.decoder.duration_predictor.proj
        characters.weight.mul_(3)
        characters.bias.add_(1.0)
        units = model.vocoder.dur_predictor.proj
        units.weight.mul_(20)
        units.bias.add_(1.5)
    generation = model.generation_config
    for key, table in SPEECH_MAPS.items():
        setattr(generation, key, table)
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    generation.id_to_text = {str(i): piece for i, piece in enumerate(pieces)}
    generation.char_to_id = {char: i + 4 for i, char in enumerate(CHARS)}
    return model


def reference(model, **inputs) -> dict:
    """transformers' text sequence, units, and waveform cut at its length."""
    return v1_reference(model, speaker_key="speaker_id", **inputs)


@pytest.fixture(scope="module")
def text_to_speech(tmp_path_factory):
    """(package, transformers model, tokenizer, reference)."""
    tmp = tmp_path_factory.mktemp("seamless_v2_t2st")
    tokenizer = char_tokenizer()
    model = make_model("TextToSpeech", dict(TINY, tie_word_embeddings=False), 10, tokenizer)
    for part in (model, tokenizer):
        part.save_pretrained(tmp / "hf")
    expected = reference(model, input_ids=tokenizer(TEXT, return_tensors="pt")["input_ids"])
    assert len(set(expected["units"])) > 2, "a degenerate reference: the test would prove little"
    return build_with_cli(tmp / "hf", tmp / "onnx"), model, tokenizer, expected


@pytest.fixture(scope="module")
def speech_to_speech(tmp_path_factory):
    """(package, wav, tokenizer, reference): the speech-to-text test's chunked v2 model."""
    import torch

    tmp = tmp_path_factory.mktemp("seamless_v2_s2st")
    _, overrides, _ = CASES["seamless_m4t_v2"]
    tokenizer = char_tokenizer()
    model = make_model("SpeechToSpeech", overrides, 13, tokenizer)
    extractor = SeamlessM4TFeatureExtractor()
    for part in (model, extractor, tokenizer):
        part.save_pretrained(tmp / "hf")
    wav = tmp / "speech.wav"
    write_wav(wav)
    rate = extractor.sampling_rate
    feeds = extract_inputs(extractor, reference_audio(wav, rate), rate, mask=True)
    expected = reference(model, **{k: torch.from_numpy(v) for k, v in feeds.items()})
    assert len(set(expected["units"])) > 2, "a degenerate reference: the test would prove little"
    return build_with_cli(tmp / "hf", tmp / "onnx"), wav, tokenizer, expected


def test_unit_graphs_match_transformers_on_a_padded_batch(text_to_speech):
    """The unit encoder over masked states; the decoder over padded characters of two rows."""
    import torch

    package, model, _, _ = text_to_speech
    rng = np.random.default_rng(0)
    states = rng.standard_normal((2, 6, TINY["hidden_size"])).astype(np.float32)
    mask = np.array([[1] * 6, [1, 1, 1, 1, 0, 0]])
    encoded = Graph(package, "t2u_encoder")(inputs_embeds=states, attention_mask=mask)
    t2u = model.t2u_model
    with torch.no_grad():
        hidden = t2u.model.encoder(
            inputs_embeds=torch.from_numpy(states), attention_mask=torch.from_numpy(mask)
        ).last_hidden_state
    assert_close(encoded["last_hidden_state"], hidden)

    counts = np.array([[0, 2, 3, 1, 2, 0], [0, 1, 2, 0, 0, 0]])  # 8 and 3 characters
    chars = rng.integers(1, len(CHARS) + 4, (2, 8))
    chars[1, 3:] = 0
    outputs = Graph(package, "t2u_decoder")(
        encoder_hidden_states=hidden.numpy(), char_input_ids=chars, char_count_per_id=counts
    )
    with torch.no_grad():
        expected = t2u(
            char_input_ids=torch.from_numpy(chars), char_count_per_id=torch.from_numpy(counts),
            encoder_outputs=(hidden,),
        )  # fmt: skip
    assert outputs["padding_mask"].tolist() == expected.padding_mask.long().tolist()
    assert_close(outputs["logits"], expected.last_hidden_state)
    real = outputs["padding_mask"].sum(1)
    upsampled = (real > counts.sum(1)).any()
    assert real[0] != real[1] and upsampled, "no padding or no upsampling tested"


def test_vocoder_matches_transformers_on_a_padded_batch(text_to_speech):
    """v1's vocoder graph with v2's kernel-5 "same" duration convs."""
    check_vocoder(*text_to_speech[:2])


def test_character_counts_match_transformers():
    """Spaces go with the next piece, a punctuation piece before a word takes its space; unk is 1."""
    import torch

    pieces = ["▁Hello", ",", "▁world", "!", "▁it", "<unk>", "'", "s", "▁ok", ".", "<pad>", "x"]
    ids = [10, 11, 12, 13, 14, 1, 15, 16, 17, 18, 0, 19]
    model = object.__new__(__import__("transformers").SeamlessM4Tv2PreTrainedModel)
    expected = model._count_character_length_in_subword(
        torch.tensor([ids]), [pieces], pad_token_id=0
    )
    assert character_counts(ids, pieces, pad=0) == expected[0].tolist()


def test_generate_speaks_the_translation(text_to_speech, tmp_path, capsys):
    package, _, tokenizer, expected = text_to_speech
    translator = open_speech_translator(package)
    translator.target_language = "fra"
    tokens = list(
        translator.generate_ids(translator.encode_prompt(TEXT), max_new_tokens=MAX_NEW_TOKENS)
    )
    sequence = translator.translated_sequence(tokens)
    assert sequence == expected["sequence"]
    logits, _ = translator.unit_logits(sequence)
    assert logits.argmax(-1).tolist() == expected["units"]

    assert_speaks(capsys, tmp_path, package, TEXT, [], tokenizer, expected)


def test_generate_speaks_the_translation_of_speech(speech_to_speech, tmp_path, capsys):
    package, wav, tokenizer, expected = speech_to_speech
    assert_speaks(capsys, tmp_path, package, "", ["--audio", wav], tokenizer, expected)


def test_refuses_a_translation_padded_inside(text_to_speech):
    """transformers' character ids overflow their counts there (it raises): refused in one line."""
    translator = open_speech_translator(text_to_speech[0])
    with pytest.raises(MobiusError, match=r"^the translation holds the padding token \(0\) before"):
        translator.unit_logits([3, 5, 10, 0, 11, 12, 3])


def test_generate_names_a_missing_character_map(text_to_speech, tmp_path, capsys):
    import json
    import shutil

    broken = tmp_path / "no-chars"
    shutil.copytree(text_to_speech[0], broken)
    path = broken / "generation_config.json"
    generation = json.loads(path.read_text())
    del generation["char_to_id"]
    path.write_text(json.dumps(generation))
    line = one_line_error(capsys, "generate", broken, TEXT, "--language", "fra")
    assert line == (
        f"mobius: error: generation_config.json in {broken} has no char_to_id map (v2's unit "
        "model reads the text's characters)"
    )


def test_build_refuses_a_v1_config_under_a_v2_key(text_to_speech, tmp_path, capsys):
    source = text_to_speech[0].parent / "hf"

    def change(config):
        config["model_type"] = "seamless_m4t"

    line = broken_config_error(capsys, source, tmp_path, change)
    assert "seamless_m4t: the SeamlessM4Tv2 speech-output classes build seamless_m4t_v2" in line, (
        line
    )
