"""SeamlessM4T (v1) speech output against transformers: the unit model, the vocoder, and ``mobius generate``.

Tiny random ``SeamlessM4TForTextToSpeech`` and ``...ForSpeechToSpeech`` models
(every parameter perturbed; the text-to-text test's character tokenizer; a
generation config mapping ``fra``/``eng`` for text, units and vocoder) are built
with the CLI once each. Each new graph is compared at fp32 (<= 1e-4) on a batch of
two of different lengths: the decoder's ``last_hidden_state``, the unit encoder
(masked states), the unit decoder's logits through its cache, and the vocoder's
waveform and lengths (the shorter row padded with ``t2u_pad_token_id``). Then
``mobius generate ... --output x.wav`` must print transformers' text and write its
waveform (``generate(..., tgt_lang="fra", spkr_id=1)``, greedy as transformers'
defaults are: text, then units up to ``t2u_max_new_tokens``) within 1e-4, with the
same units. The seeds are ones whose units are all speech units: a random unit
model that emits a control unit makes transformers' vocoder index out of range
(the runner refuses it). Bad input gives one-line errors.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from _cli import broken_config_error, one_line_error
from test_seamless_m4t_parity import CASES, TINY
from test_seamless_m4t_text_generate import LANGUAGES, char_tokenizer
from test_whisper_end_to_end import reference_audio, write_wav
from transformers import AutoConfig, SeamlessM4TFeatureExtractor

from mobius.cli import main
from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters
from mobius_audio.generate import extract_inputs
from mobius_audio.seamless_speech_generate import open_speech_translator

TEXT = "hello world"
MAX_NEW_TOKENS = 10
SPEAKER = 1
#: The unit model and vocoder, tiny: two upsamplers (2, 3) and two resblock kernels.
SPEECH = dict(
    upsample_initial_channel=16, upsample_rates=[2, 3], upsample_kernel_sizes=[4, 5],
    resblock_kernel_sizes=[3, 5], resblock_dilation_sizes=[[1, 3], [1, 2]],
    unit_hifi_gan_vocab_size=12, unit_embed_dim=8, lang_embed_dim=4, spkr_embed_dim=6,
    vocoder_num_langs=3, vocoder_num_spkrs=2, t2u_encoder_attention_heads=2,
    t2u_decoder_attention_heads=2, t2u_encoder_ffn_dim=24, t2u_decoder_ffn_dim=24,
    t2u_max_new_tokens=20, tie_word_embeddings=False,
)  # fmt: skip
SPEECH_MAPS = dict(
    text_decoder_lang_to_code_id=LANGUAGES,
    t2u_lang_code_to_id={"fra": 5, "eng": 6},  # no deu: the text model translates into it only
    vocoder_lang_code_to_id={"fra": 1, "eng": 2},
)


def make_model(kind: str, overrides: dict, seed: int):
    import torch
    import transformers

    config = AutoConfig.for_model("seamless_m4t", **dict(overrides, **SPEECH))
    torch.manual_seed(seed)
    model = getattr(transformers, f"SeamlessM4TFor{kind}")(config).eval()
    perturb_parameters(model, seed)
    with torch.no_grad():  # units of 1 to ~10 frames (tiny random ones all last one)
        duration = model.vocoder.dur_predictor.proj
        duration.weight.mul_(20)
        duration.bias.add_(1.5)
    for key, table in SPEECH_MAPS.items():
        setattr(model.generation_config, key, table)
    return model


def reference(model, speaker_key: str = "spkr_id", **inputs) -> dict:
    """transformers' text sequence, units, and waveform cut at its length (v2's generate names
    the speaker ``speaker_id``)."""
    import torch

    with torch.no_grad():
        out = model.generate(
            **inputs, tgt_lang="fra", **{speaker_key: SPEAKER}, return_intermediate_token_ids=True,
            text_max_new_tokens=MAX_NEW_TOKENS, text_num_beams=1, text_do_sample=False,
        )  # fmt: skip
    length = int(out.waveform_lengths.reshape(-1)[0])
    return dict(
        sequence=out.sequences[0].tolist(),
        units=out.unit_sequences[0].tolist(),
        waveform=out.waveform[0, :length].numpy(),
    )


@pytest.fixture(scope="module")
def text_to_speech(tmp_path_factory):
    """(package, transformers model, tokenizer, reference)."""
    tmp = tmp_path_factory.mktemp("seamless_t2st")
    model = make_model("TextToSpeech", TINY, seed=7)
    tokenizer = char_tokenizer()
    for part in (model, tokenizer):
        part.save_pretrained(tmp / "hf")
    expected = reference(model, input_ids=tokenizer(TEXT, return_tensors="pt")["input_ids"])
    assert len(set(expected["units"][2:])) > 1, (
        "a degenerate reference: the test would prove little"
    )
    return build_with_cli(tmp / "hf", tmp / "onnx"), model, tokenizer, expected


@pytest.fixture(scope="module")
def speech_to_speech(tmp_path_factory):
    """(package, wav, tokenizer, reference): the speech-to-text test's relative-position model."""
    tmp = tmp_path_factory.mktemp("seamless_s2st")
    _, overrides, _ = CASES["seamless_m4t-relative"]
    model = make_model("SpeechToSpeech", overrides, seed=7)
    extractor = SeamlessM4TFeatureExtractor()
    tokenizer = char_tokenizer()
    for part in (model, extractor, tokenizer):
        part.save_pretrained(tmp / "hf")
    wav = tmp / "speech.wav"
    write_wav(wav)
    rate = extractor.sampling_rate
    feeds = extract_inputs(extractor, reference_audio(wav, rate), rate, mask=True)
    import torch

    expected = reference(model, **{k: torch.from_numpy(v) for k, v in feeds.items()})
    return build_with_cli(tmp / "hf", tmp / "onnx"), wav, tokenizer, expected


class Graph:
    """One graph of the package in ONNX Runtime, run by output name."""

    def __init__(self, package, name: str) -> None:
        import onnxruntime as ort

        path = str(package / name / "model.onnx")
        self.session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    def __call__(self, **feeds) -> dict[str, np.ndarray]:
        names = [o.name for o in self.session.get_outputs()]
        return dict(zip(names, self.session.run(names, feeds), strict=True))

    def empty_cache(self, batch: int) -> dict[str, np.ndarray]:
        """The decoder's self-attention cache with no past positions."""
        return {
            i.name: np.zeros((batch, i.shape[1], 0, i.shape[3]), np.float32)
            for i in self.session.get_inputs()
            if ".decoder." in i.name
        }


def cross_cache(encoded: dict) -> dict[str, np.ndarray]:
    """An encoder graph's ``present.{i}.encoder.*`` as the decoder's ``past_key_values`` feeds."""
    return {
        name.replace("present.", "past_key_values."): value
        for name, value in encoded.items()
        if ".encoder." in name
    }


def next_cache(outputs: dict) -> dict[str, np.ndarray]:
    """A decoder run's ``present.{i}.decoder.*`` as the next step's feeds."""
    return {
        name.replace("present.", "past_key_values."): value
        for name, value in outputs.items()
        if ".decoder." in name
    }


def assert_close(actual, expected) -> None:
    expected = np.asarray(expected)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, atol=PARITY_ATOL, rtol=0)


def prompted(rng, first: int, language: int, vocab: int, steps: int) -> np.ndarray:
    """Two rows: ``first``, ``language``, then ``steps`` random ids from 4 up."""
    prompt = np.tile([first, language], (2, 1))
    return np.concatenate([prompt, rng.integers(4, vocab, (2, steps))], axis=1)


def test_unit_graphs_match_transformers_on_a_padded_batch(text_to_speech):
    """Decoder states, unit encoder, unit decoder (prefill then cached steps): a batch of two."""
    import torch

    package, model, _, _ = text_to_speech
    rng = np.random.default_rng(0)
    # the text encoder over two sources (5 and 3 tokens), the decoder's states over two sequences
    source = rng.integers(4, 64, (2, 5))
    source_mask = np.array([[1] * 5, [1, 1, 1, 0, 0]])
    source[1, 3:] = 0
    encoded = Graph(package, "encoder")(input_ids=source, attention_mask=source_mask)
    sequences = prompted(rng, 3, 5, 64, steps=4)
    decoder = Graph(package, "decoder")
    states = decoder(
        input_ids=sequences, encoder_attention_mask=source_mask,
        **cross_cache(encoded), **decoder.empty_cache(2),
    )["last_hidden_state"]  # fmt: skip
    with torch.no_grad():
        hidden = model.text_encoder(
            input_ids=torch.from_numpy(source), attention_mask=torch.from_numpy(source_mask)
        ).last_hidden_state
        expected = model.text_decoder(
            input_ids=torch.from_numpy(sequences), encoder_hidden_states=hidden,
            encoder_attention_mask=torch.from_numpy(source_mask),
        ).last_hidden_state  # fmt: skip
    assert_close(states, expected)

    # the unit encoder over those states, the second row's last two masked
    mask = np.array([[1] * 6, [1, 1, 1, 1, 0, 0]])
    encoded = Graph(package, "t2u_encoder")(inputs_embeds=states, attention_mask=mask)
    t2u = model.t2u_model
    with torch.no_grad():
        hidden = t2u.model.encoder(
            inputs_embeds=torch.from_numpy(states), attention_mask=torch.from_numpy(mask)
        ).last_hidden_state
    assert_close(encoded["last_hidden_state"], hidden)

    # the unit decoder: the prompt, then three cached steps, teacher-forced
    units = prompted(rng, 2, 5, 16, steps=3)
    with torch.no_grad():
        expected = t2u(
            encoder_outputs=(hidden,), attention_mask=torch.from_numpy(mask),
            decoder_input_ids=torch.from_numpy(units),
        ).logits.numpy()  # fmt: skip
    decoder = Graph(package, "t2u_decoder")
    cache = decoder.empty_cache(2)
    for start, end in ((0, 2), (2, 3), (3, 4), (4, 5)):
        outputs = decoder(
            input_ids=units[:, start:end], encoder_attention_mask=mask,
            **cross_cache(encoded), **cache,
        )  # fmt: skip
        assert_close(outputs["logits"], expected[:, start:end])
        cache = next_cache(outputs)


def test_vocoder_matches_transformers_on_a_padded_batch(text_to_speech):
    check_vocoder(*text_to_speech[:2])


def check_vocoder(package, model) -> None:
    """The vocoder graph against ``model.vocoder`` (v1's or v2's) on a batch of two, one padded."""
    import torch

    units = np.array([[3, 7, 11, 0, 5, 9, 2], [4, 8, 10, 1, 1, 1, 1]])  # row two: padded with 1
    speakers, languages = np.array([1, 0]), np.array([2, 1])
    outputs = Graph(package, "vocoder")(unit_ids=units, speaker_id=speakers, language_id=languages)
    waveform, lengths = outputs["waveform"], outputs["waveform_lengths"]
    with torch.no_grad():
        expected, expected_lengths = model.vocoder(  # v1 names the speaker spkr_id, v2 speaker_id
            torch.from_numpy(units), torch.from_numpy(speakers)[:, None],
            torch.from_numpy(languages)[:, None],
        )  # fmt: skip
    assert_close(waveform, expected)
    assert lengths.tolist() == expected_lengths.tolist()
    assert lengths[0] != lengths[1], "both rows as long: the padding would be untested"


def test_generate_speaks_the_translation(text_to_speech, tmp_path, capsys):
    package, _, tokenizer, expected = text_to_speech
    translator = open_speech_translator(package)
    translator.target_language = "fra"
    tokens = list(
        translator.generate_ids(translator.encode_prompt(TEXT), max_new_tokens=MAX_NEW_TOKENS)
    )
    sequence = translator.translated_sequence(tokens)
    assert sequence == expected["sequence"]
    states = translator.text_states(sequence)
    units = translator.units(states, translator.unit_source_mask(sequence), 5)
    t2u_eos, t2u_pad = 2, 1
    assert units == [t2u_pad if u == t2u_eos else u for u in expected["units"][2:]]

    assert_speaks(capsys, tmp_path, package, TEXT, [], tokenizer, expected)


def assert_speaks(capsys, tmp_path, package, prompt, flags, tokenizer, expected) -> None:
    """``mobius generate PACKAGE PROMPT FLAGS --language fra ...`` prints transformers' text
    and writes its waveform (16 kHz, within 1e-4)."""
    import soundfile

    out = tmp_path / "out.wav"
    flags += ["--language", "fra", "--speaker", SPEAKER, "--max-new-tokens", MAX_NEW_TOKENS]
    capsys.readouterr()
    assert main(["generate", str(package), prompt, *map(str, flags), "--output", str(out)]) == 0
    text = tokenizer.decode(expected["sequence"][2:], skip_special_tokens=True)
    assert capsys.readouterr().out == text + "\n"
    waveform, rate = soundfile.read(out, dtype="float32")
    assert rate == 16000
    assert_close(waveform, expected["waveform"])


@pytest.mark.parametrize("audio_flag", [True, False], ids=["--audio", "PROMPT"])
def test_generate_speaks_the_translation_of_speech(speech_to_speech, tmp_path, capsys, audio_flag):
    """The clip given with --audio (PROMPT empty), or as PROMPT as speech-to-text takes it."""
    package, wav, tokenizer, expected = speech_to_speech
    prompt, flags = ("", ["--audio", wav]) if audio_flag else (str(wav), [])
    assert_speaks(capsys, tmp_path, package, prompt, flags, tokenizer, expected)


@pytest.mark.parametrize(
    "flags, message",
    [
        ([], "SeamlessM4T translates into a target language: give it, e.g. --language fra"),
        (["--language", "deu"], "--language 'deu' is not a language this package speaks (2 known: eng, fra)"),
        (["--language", "fra", "--speaker", "2"], "--speaker 2 is not a speaker of this package (0 to 1)"),
        (["--language", "fra", "--do-sample"], "--do-sample: SeamlessM4T speech output decodes greedily, as transformers' generate does by default"),
        (["--language", "fra", "--audio", "x.wav"], "{package} translates text (a text-to-speech package): drop --audio"),
    ],
)  # fmt: skip
def test_generate_refuses_bad_input(text_to_speech, tmp_path, capsys, flags, message):
    package = text_to_speech[0]
    line = one_line_error(capsys, "generate", package, TEXT, *flags, "--output", tmp_path / "x.wav")
    assert line == f"mobius: error: {message.format(package=package)}"


def test_generate_names_a_missing_vocoder(text_to_speech, tmp_path, capsys):
    broken = tmp_path / "no-vocoder"
    shutil.copytree(text_to_speech[0], broken)
    shutil.rmtree(broken / "vocoder")
    line = one_line_error(capsys, "generate", broken, TEXT, "--language", "fra")
    assert line == (
        f"mobius: error: no vocoder/model.onnx in {broken}: not a SeamlessM4T speech-output "
        "package built by mobius"
    )


def test_build_refuses_a_duration_kernel_transformers_cannot_run(text_to_speech, tmp_path, capsys):
    source = text_to_speech[0].parent / "hf"

    def change(config):
        config["variance_predictor_kernel_size"] = 5

    line = broken_config_error(capsys, source, tmp_path, change)
    assert line.endswith(
        "variance_predictor_kernel_size=5; transformers' duration predictor runs with 3 only"
    ), line


def test_build_refuses_v2_speech_output_under_a_v1_key(text_to_speech, tmp_path, capsys):
    """v2's unit model is another architecture: refused by name, not built as v1's."""
    source = text_to_speech[0].parent / "hf"

    def change(config):
        config["model_type"] = "seamless_m4t_v2"

    line = broken_config_error(capsys, source, tmp_path, change)
    assert line.endswith(
        "seamless_m4t_v2: these speech-output classes are built for seamless_m4t (v1) only; "
        "build v2 with --model-type SeamlessM4Tv2ForTextToSpeech (or SeamlessM4Tv2ForSpeechToSpeech)"
    ), line
