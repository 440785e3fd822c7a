"""A tiny random Granite Speech saved as the hub lays it out, with its processor's files.

16 mel bins (32 stacked features); a two-block conformer whose attention blocks hold 8
frames (0.5 s of audio makes 25 frames: a padded last block); a Q-Former projector of 2
queries per window of 6 frames; a two-layer Granite decoder with every µP multiplier
away from 1. The tokenizer is mobius's word-level one with ``<|audio|>`` and a small
Granite-like chat template; every parameter is perturbed. The head is untied: tied to
the embedding, a model this small only repeats the prompt's last token.

transformers' ``GraniteSpeechFeatureExtractor`` needs torchaudio, which this workspace
does not install: :func:`transformers_processor` runs transformers' own extractor and
processor code with :class:`TorchMelSpectrogram` (torchaudio's ``MelSpectrogram``
written in torch from its documented definition) in its place.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
from _qwen2_audio_tiny import RATE, clip, write_wav  # the same 16 kHz test clips

from mobius.testing import perturb_parameters, tiny_tokenizer

__all__ = ["RATE", "clip", "write_wav"]

VOCAB = 128
SPECIAL = {"<|audio|>": 100, "<|start_of_role|>": 101, "<|end_of_role|>": 102,
           "<|end_of_text|>": 103}  # fmt: skip
N_MELS = 16
MAX_NEW_TOKENS = 8
TEMPLATE = (
    "{% for m in messages %}<|start_of_role|>{{ m['role'] }}<|end_of_role|> {{ m['content'] }} "
    "<|end_of_text|> {% endfor %}{% if add_generation_prompt %}<|start_of_role|>assistant"
    "<|end_of_role|>{% endif %}"
)
EXTRACTOR = dict(n_mels=N_MELS, projector_window_size=6, projector_downsample_rate=3)


def hf_config():
    from transformers import GraniteSpeechConfig

    encoder = dict(
        input_dim=2 * N_MELS, num_layers=2, hidden_dim=32, feedforward_mult=2, num_heads=2,
        dim_head=16, output_dim=12, context_size=8, max_pos_emb=10, dropout=0.0,
        conv_kernel_size=5, conv_expansion_factor=2,
    )  # fmt: skip
    projector = dict(
        model_type="blip_2_qformer", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, cross_attention_frequency=1, encoder_hidden_size=32,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    text = dict(
        model_type="granite", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, embedding_multiplier=2.0, residual_multiplier=0.5,
        attention_multiplier=0.2, logits_scaling=3.0, eos_token_id=SPECIAL["<|end_of_text|>"],
    )  # fmt: skip
    return GraniteSpeechConfig(
        encoder_config=encoder, projector_config=projector, text_config=text,
        audio_token_index=SPECIAL["<|audio|>"], has_lora_adapter=False, window_size=6,
        downsample_rate=3, tie_word_embeddings=False,
    )  # fmt: skip


def tokenizer():
    made = tiny_tokenizer(VOCAB, SPECIAL)
    made.chat_template = TEMPLATE
    return made


class TorchMelSpectrogram:
    """torchaudio ``MelSpectrogram(sample_rate, n_fft, win_length, hop_length, n_mels)``:
    ``torch.stft`` (centred, reflect, periodic Hann) power 2, HTK filters, no norm."""

    def __init__(self, sample_rate, n_fft, win_length, hop_length, n_mels):
        import torch

        self.n_fft, self.win_length, self.hop_length = n_fft, win_length, hop_length
        self.window = torch.hann_window(win_length)
        freqs = torch.linspace(0, sample_rate // 2, n_fft // 2 + 1)
        mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
        m = torch.linspace(mel(0.0), mel(sample_rate / 2), n_mels + 2)
        points = 700.0 * (10 ** (m / 2595.0) - 1.0)
        diff = points[1:] - points[:-1]
        slopes = points.unsqueeze(0) - freqs.unsqueeze(1)
        down, up = -slopes[:, :-2] / diff[:-1], slopes[:, 2:] / diff[1:]
        self.filters = torch.clamp(torch.min(down, up), min=0)

    def to(self, device):
        return self

    def __call__(self, audio):
        import torch

        spec = torch.stft(
            audio, self.n_fft, self.hop_length, self.win_length, self.window, center=True,
            pad_mode="reflect", normalized=False, onesided=True, return_complex=True,
        ).abs().pow(2.0)  # fmt: skip
        return torch.matmul(spec.transpose(-1, -2), self.filters).transpose(-1, -2)


def transformers_extractor(monkeypatch):
    """transformers' ``GraniteSpeechFeatureExtractor`` with :class:`TorchMelSpectrogram`
    for torchaudio's (its ``requires_backends`` checks patched off by ``monkeypatch``)."""
    from transformers.models.granite_speech import feature_extraction_granite_speech as module

    monkeypatch.setattr(module, "requires_backends", lambda *a, **k: None)
    transforms = SimpleNamespace(MelSpectrogram=TorchMelSpectrogram)
    monkeypatch.setattr(module, "torchaudio", SimpleNamespace(transforms=transforms), raising=False)
    return module.GraniteSpeechFeatureExtractor(sampling_rate=RATE, **EXTRACTOR)


def transformers_processor(monkeypatch):
    from transformers import GraniteSpeechProcessor

    return GraniteSpeechProcessor(transformers_extractor(monkeypatch), tokenizer())


def save_model(directory: Path, extractor, model_class=None, config=None):
    """The tiny model (float32, eval, perturbed), saved with its processor files; returned.

    ``model_class`` and ``config`` default to Granite Speech's (a variant passes its own)."""
    import torch

    if model_class is None:
        from transformers import GraniteSpeechForConditionalGeneration as model_class
    torch.manual_seed(0)
    model = model_class(config or hf_config()).float().eval()
    perturb_parameters(model, seed=0)
    model.generation_config.eos_token_id = SPECIAL["<|end_of_text|>"]
    model.generation_config.pad_token_id = 0
    model.save_pretrained(directory)
    tokenizer().save_pretrained(directory)
    extractor.save_pretrained(directory)
    return model


#: The tiny adapter: ranks and alphas that differ by module (rank_pattern, alpha_pattern);
#: ``mlp.down_proj``, as the conformer has a ``down_proj`` too.
LORA = dict(
    r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "mlp.down_proj"], lora_dropout=0.0,
    rank_pattern={"v_proj": 2}, alpha_pattern={"down_proj": 3}, bias="none",
)  # fmt: skip
#: peft's names for transformers 5's module tree -> the hub's (``language_model.model.*``).
HUB_ADAPTER_NAMES = {"model.language_model.": "language_model.model."}


def save_adapted_model(
    directory: Path, extractor, lora_scale: float = 0.2, model_class=None, config=None
):
    """:func:`save_model` with ``has_lora_adapter`` and a random PEFT LoRA adapter for the
    text decoder saved beside it as the hub keeps one (``adapter_config.json``,
    ``adapter_model.safetensors``, peft's names for the hub's module tree); returned is the
    model with the adapter injected and on, which is what transformers runs with audio.

    ``lora_B`` is noise of ``lora_scale`` (peft starts it at zero): the adapter must change
    the answers for a test of it to be able to fail. ``model_class`` and ``config`` default
    to Granite Speech's (a variant passes its own).
    """
    import torch
    from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model
    from safetensors.torch import save_file

    if model_class is None:
        from transformers import GraniteSpeechForConditionalGeneration as model_class
    config = config or hf_config()
    config.has_lora_adapter = True
    torch.manual_seed(0)
    model = model_class(config).float().eval()
    perturb_parameters(model, seed=0)
    model.generation_config.eos_token_id = SPECIAL["<|end_of_text|>"]
    model.generation_config.pad_token_id = 0
    model.save_pretrained(directory)  # the base weights, before the adapter is injected
    tokenizer().save_pretrained(directory)
    extractor.save_pretrained(directory)
    lora = LoraConfig(**LORA)
    inject_adapter_in_model(lora, model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, tensor in sorted(model.named_parameters()):
            if ".lora_" in name:
                scale = lora_scale if ".lora_B." in name else 0.05
                tensor.add_(torch.randn(tensor.shape, generator=generator) * scale)
    state = get_peft_model_state_dict(model)
    hub = {}
    for name, tensor in state.items():
        old = next((p for p in HUB_ADAPTER_NAMES if name.startswith(p)), None)
        assert old is not None, name
        hub["base_model.model." + HUB_ADAPTER_NAMES[old] + name[len(old) :]] = tensor.contiguous()
    save_file(hub, str(directory / "adapter_model.safetensors"), metadata={"format": "pt"})
    lora.save_pretrained(directory)
    return model.eval()
