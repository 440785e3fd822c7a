"""onnxruntime-genai runs a Whisper package mobius writes, with its genai_config.json.

A tiny random Whisper over the released checkpoints' 30 s window (1500 encoder
positions: the generator's Whisper class takes exactly 3000 feature frames) is built
with the CLI (``--runtime auto`` writes the generator config). Its vocabulary ends at
``<|notimestamps|>``, so transformers' ``generate`` sees no timestamp tokens, and the
generation config suppresses nothing: the generator applies no ``suppress_tokens``.
The features come from transformers' ``WhisperFeatureExtractor`` and are fed to the
generator as ``input_features``; its greedy tokens equal transformers' ``generate``.

The generator's own log-mel pipeline is not written into the package:
:func:`test_generator_log_mel_differs_from_transformers` shows where it differs.
"""

from __future__ import annotations

import json
import sys
import wave

import numpy as np
import pytest
from transformers import AutoConfig, WhisperFeatureExtractor

from mobius.testing import build_with_cli, make_random_seq2seq
from mobius_audio.testing import save_whisper_bpe_tokenizer

if sys.version_info < (3, 11):
    # Not a dev dependency there: onnxruntime-genai 0.18 needs onnxruntime >= 1.31,
    # which ships no Python 3.10 wheels.
    pytest.skip("onnxruntime-genai needs Python >= 3.11", allow_module_level=True)

import onnxruntime_genai as og  # noqa: E402

RATE = 16000
# Whisper's special tokens at the end of a 64-token vocabulary, <|notimestamps|> last.
SPECIAL = {
    "<|endoftext|>": 54,
    "<|startoftranscript|>": 55,
    "<|en|>": 56,
    "<|de|>": 57,
    "<|translate|>": 58,
    "<|transcribe|>": 59,
    "<|startoflm|>": 60,
    "<|startofprev|>": 61,
    "<|nospeech|>": 62,
    "<|notimestamps|>": 63,
}
PROMPT = [55, 56, 59, 63]  # start, English, transcribe, no timestamps
WHISPER = dict(
    vocab_size=64,
    d_model=32,
    encoder_layers=3,  # unlike the decoder's: the cross cache follows the decoder
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=4,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    num_mel_bins=80,
    max_source_positions=1500,  # 3000 frames, 30 s
    max_target_positions=40,
    pad_token_id=54,
    bos_token_id=54,
    eos_token_id=54,
    decoder_start_token_id=55,
    suppress_tokens=None,
    begin_suppress_tokens=None,
    init_std=0.4,  # varied greedy streams (at 0.02 a tiny decoder repeats one token)
)
NEW_TOKENS = 12


def _tiny_whisper(**overrides):
    """A perturbed tiny Whisper whose generation config transcribes English and suppresses nothing."""
    hf_config = AutoConfig.for_model("whisper", **dict(WHISPER, **overrides))
    model = make_random_seq2seq(hf_config, seed=3, auto_class="AutoModelForSpeechSeq2Seq")
    generation = model.generation_config
    generation.lang_to_id = {"<|en|>": 56, "<|de|>": 57}
    generation.task_to_id = {"translate": 58, "transcribe": 59}
    generation.no_timestamps_token_id = 63
    generation.decoder_start_token_id = 55
    generation.eos_token_id = generation.pad_token_id = 54
    generation.is_multilingual = True
    generation.forced_decoder_ids = None
    generation.suppress_tokens = generation.begin_suppress_tokens = None
    return model


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    """(transformers model, built package) shared by the tests."""
    tmp = tmp_path_factory.mktemp("whisper")
    model = _tiny_whisper()
    model.save_pretrained(tmp / "hf")
    WhisperFeatureExtractor(feature_size=80).save_pretrained(tmp / "hf")
    return model, build_with_cli(tmp / "hf", tmp / "onnx")


def _clip(seconds: float, seed: int, lead_silence: int = 0) -> np.ndarray:
    """A float32 16 kHz clip: a warbling tone in noise, after ``lead_silence`` zero samples."""
    t = np.arange(int(seconds * RATE)) / RATE
    rng = np.random.default_rng(seed)
    tone = 0.3 * np.sin(2 * np.pi * (200 + 150 * seed) * t) * np.sin(2 * np.pi * 1.3 * t)
    sound = tone + 0.05 * rng.standard_normal(t.shape)
    return np.concatenate([np.zeros(lead_silence), sound]).astype(np.float32)


def _features(audio: np.ndarray) -> np.ndarray:
    """transformers' log-mel features of ``audio`` (numpy path), [1, 80, 3000]."""
    extractor = WhisperFeatureExtractor(feature_size=80)
    return extractor(audio, sampling_rate=RATE, return_tensors="np").input_features


def _genai_tokens(model, features: np.ndarray) -> list[int]:
    """The generator's greedy tokens after ``PROMPT`` for ``features``, EOS suppressed."""
    params = og.GeneratorParams(model)
    total = len(PROMPT) + NEW_TOKENS
    params.set_search_options(do_sample=False, max_length=total, min_length=total)
    generator = og.Generator(model, params)
    inputs = og.NamedTensors()
    inputs["input_features"] = features
    generator.set_inputs(inputs)
    generator.append_tokens(np.array([PROMPT], dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)][len(PROMPT) :]


def test_genai_config_names_the_whisper_graphs(whisper):
    _, out = whisper
    config = json.loads((out / "genai_config.json").read_text())["model"]
    assert config["type"] == "whisper"
    assert config["encoder"]["inputs"] == {"audio_features": "input_features"}
    assert config["encoder"]["outputs"]["cross_present_key_names"] == "present.%d.encoder.key"
    assert config["decoder"]["inputs"]["cross_past_key_names"] == "past_key_values.%d.encoder.key"
    encoder, decoder = config["encoder"], config["decoder"]
    assert (encoder["num_hidden_layers"], decoder["num_hidden_layers"]) == (3, 2)
    assert (encoder["num_attention_heads"], decoder["num_attention_heads"]) == (2, 4)
    assert decoder["head_size"] == 8
    assert (config["eos_token_id"], config["context_length"]) == (54, 40)
    assert not (out / "audio_processor_config.json").exists()


def test_genai_transcribes_as_transformers_generate(whisper):
    import torch

    torch_model, out = whisper
    model = og.Model(str(out))
    streams = []
    for seed, seconds in enumerate((2.5, 7.0)):
        features = _features(_clip(seconds, seed))
        with torch.no_grad():
            expected = torch_model.generate(
                input_features=torch.from_numpy(features),
                decoder_input_ids=torch.tensor([PROMPT]),
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,  # EOS suppressed, as the generator's min_length does
                do_sample=False,
            )[0].tolist()[-NEW_TOKENS:]
        assert len(set(expected)) > 1, "a degenerate reference: the test would prove little"
        assert _genai_tokens(model, features) == expected
        streams.append(expected)
    assert streams[0] != streams[1], "the audio does not steer the tokens: the test proves little"


def test_no_genai_config_for_another_window(tmp_path, capsys):
    _tiny_whisper(max_source_positions=50).save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    assert not (out / "genai_config.json").exists()
    assert "Whisper takes 3000 feature frames (30 s); this model's window is 100" in (
        capsys.readouterr().err
    )


def test_no_genai_config_for_speech_families_the_generator_lacks(tmp_path, capsys):
    from transformers import Speech2TextForConditionalGeneration

    hf_config = AutoConfig.for_model(
        "speech_to_text", vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37,
        decoder_ffn_dim=37, conv_channels=24, input_feat_per_channel=80,
        max_source_positions=60, max_target_positions=40,
    )  # fmt: skip
    Speech2TextForConditionalGeneration(hf_config).save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    assert not (out / "genai_config.json").exists()
    assert "no speech-to-text class for 'speech_to_text'" in capsys.readouterr().err


def _bpe_tokenizer(directory) -> None:
    """Letters and Whisper's special tokens, in a form onnxruntime-extensions reads."""
    vocab = {piece: i for i, piece in enumerate("abcdefghijklmnopqrstuvwxyz")}
    save_whisper_bpe_tokenizer(directory, {**vocab, **SPECIAL}, list(SPECIAL))


def _write_wav(path, audio: np.ndarray) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes((np.clip(audio, -1, 1) * 32767).round().astype("<i2").tobytes())


def test_generator_log_mel_differs_from_transformers(whisper, tmp_path):
    """Why a Whisper package gets no audio_processor_config.json.

    The onnxruntime-extensions pipeline of the genai builder (``AudioDecoder``,
    ``STFTNorm``, ``LogMelSpectrum``) computes transformers' log-mel features on a
    30 s clip that starts with silence. But it pads the first STFT window otherwise
    than transformers' reflection (frames 0 and 1 differ when the clip starts with
    sound), and it takes the STFT of the clip alone, then pads the frames, where
    transformers zero-pads the waveform to 30 s first (the frames where a shorter clip
    ends differ).
    """
    import shutil

    _, built = whisper
    out = shutil.copytree(built, tmp_path / "package")
    _bpe_tokenizer(out)
    stft = {"n_fft": 400, "frame_length": 400, "hop_length": 160}
    log_mel = {"chunk_size": 30, "hop_length": 160, "n_fft": 400, "n_mel": 80}
    steps = [("AudioDecoder", None), ("STFTNorm", stft), ("LogMelSpectrum", log_mel)]
    sequence = [
        {"operation": {"name": kind.lower(), "type": kind, **({"attrs": a} if a else {})}}
        for kind, a in steps
    ]
    config = {"feature_extraction": {"sequence": sequence}}
    (out / "audio_processor_config.json").write_text(json.dumps(config))
    processor = og.Model(str(out)).create_multimodal_processor()
    prompt = "".join(list(SPECIAL)[i - 54] for i in PROMPT)

    def both(audio, name):
        _write_wav(tmp_path / name, audio)
        with wave.open(str(tmp_path / name)) as wav:  # what the generator reads, 16-bit
            samples = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
        inputs = processor(prompt, audios=og.Audios.open(str(tmp_path / name)))
        assert inputs["input_ids"].as_numpy().tolist() == [PROMPT]
        expected = _features(samples.astype(np.float32) / 32768)[0]
        return np.abs(inputs["audio_features"].as_numpy()[0] - expected).max(axis=0)

    silent_start = _clip(2.5, 0, lead_silence=400)
    full_window = np.concatenate([silent_start, np.zeros(30 * RATE - len(silent_start))])
    assert both(full_window, "full.wav").max() <= 1e-5

    per_frame = both(_clip(2.5, 0), "short.wav")  # sound from the first sample, 2.5 s
    end = int(2.5 * RATE) // 160  # the frame where the clip ends
    assert per_frame[:2].min() > 1e-3
    assert per_frame[end - 1 : end + 2].max() > 1e-2
    assert per_frame[2 : end - 3].max() <= 1e-5
    assert per_frame[end + 3 :].max() <= 1e-6  # the floor value on both sides
