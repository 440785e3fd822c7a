"""SpeechT5 text-to-speech parity: transformers' ``generate_speech`` on the runner's dropout masks.

transformers' speech decoder prenet always applies dropout, drawing a fresh
``torch.bernoulli`` mask over the whole output sequence at every step, of which
only the last row reaches the step's frame. :func:`feed_dropout_masks` replaces
that draw with the rows :func:`mobius_audio.speecht5_tts.draw_dropout_masks` gives
for the same seed, so both speak the same spectrogram.
"""

from __future__ import annotations

import numpy as np

from mobius.testing import perturb_parameters
from mobius_audio.speecht5_tts import StopRule, draw_dropout_masks


def make_random_speecht5_tts(hf_config, model_dir, seed: int = 0):
    """A ``SpeechT5ForTextToSpeech`` of ``hf_config``, every parameter perturbed, saved to ``model_dir``."""
    import torch
    from transformers import SpeechT5ForTextToSpeech

    torch.manual_seed(seed)
    model = SpeechT5ForTextToSpeech(hf_config).eval()
    perturb_parameters(model, seed)
    model.save_pretrained(model_dir)
    return model


def make_random_hifigan(hf_config, model_dir, seed: int = 0, hub_model_type: bool = True):
    """A ``SpeechT5HifiGan``, perturbed, saved; its ``config.json`` says ``"model_type":
    "hifigan"`` as ``microsoft/speecht5_hifigan``'s does when ``hub_model_type``."""
    import json

    import torch
    from transformers import SpeechT5HifiGan

    torch.manual_seed(seed)
    vocoder = SpeechT5HifiGan(hf_config).eval()
    perturb_parameters(vocoder, seed)
    vocoder.save_pretrained(model_dir)
    if hub_model_type:
        path = model_dir / "config.json"
        config = json.loads(path.read_text())
        path.write_text(json.dumps({**config, "model_type": "hifigan"}))
    return vocoder


def feed_dropout_masks(model, seed: int | None) -> None:
    """Make ``model``'s speech prenet drop what the runner drops for ``seed``."""
    import torch

    config = model.config
    layers, units = config.speech_decoder_prenet_layers, config.speech_decoder_prenet_units
    rng = np.random.default_rng(seed)

    def rows():
        while True:  # one draw per step, a row per prenet layer, as the runner draws them
            masks = draw_dropout_masks(rng, layers, units, config.speech_decoder_prenet_dropout)
            yield from (torch.from_numpy(mask[0]) for mask in masks)

    row = rows()

    def dropout(inputs_embeds, p):
        mask = torch.ones(inputs_embeds.shape[1:])  # earlier rows never reach the step's frame
        mask[-1] = next(row)
        return torch.where(mask == 1, inputs_embeds, 0) * 1 / (1 - p)

    model.speecht5.decoder.prenet._consistent_dropout = dropout


def speak_with_torch(model, feeds, speaker_embeddings, seed, stop: StopRule, vocoder=None):
    """``generate_speech(..., return_output_lengths=True)`` on the runner's masks for ``seed``:
    ``(padded spectrograms or waveforms, lengths)`` as numpy."""
    import torch

    feed_dropout_masks(model, seed)
    with torch.no_grad():
        outputs, lengths = model.generate(
            torch.from_numpy(feeds["input_ids"]),
            attention_mask=torch.from_numpy(feeds["attention_mask"]),
            speaker_embeddings=torch.from_numpy(np.asarray(speaker_embeddings, np.float32)),
            threshold=stop.threshold,
            minlenratio=stop.minlenratio,
            maxlenratio=stop.maxlenratio,
            vocoder=vocoder,
            return_output_lengths=True,
        )
    return outputs.numpy(), [int(n) for n in lengths]
