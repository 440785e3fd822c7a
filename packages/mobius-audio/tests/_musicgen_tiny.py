"""A tiny random MusicGen (T5 text encoder, 3-codebook decoder, tiny EnCodec) saved as the hub lays it out."""

from __future__ import annotations

import json
from pathlib import Path

from codec_cases.encodec import ENCODEC as CODEC_ENCODEC

from mobius.testing import perturb_parameters, tiny_tokenizer

TEXT_VOCAB = 40
CODES = 16  # the EnCodec codebook size and the decoder's vocab_size; the start / pad id is 16

T5 = dict(
    vocab_size=TEXT_VOCAB,
    d_model=16,
    d_kv=4,
    d_ff=24,
    num_layers=1,
    num_heads=4,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=16,
    pad_token_id=0,
    eos_token_id=1,
)
#: The codec tests' tiny EnCodec (strides 3 and 2: 6 samples a frame at 6 kHz, 16-row codebooks)
#: at 12 kbps: 1 000 frames/s of 4-bit codes, 3 stages.
ENCODEC = dict(CODEC_ENCODEC, target_bandwidths=[12.0], num_lstm_layers=1)
DECODER = dict(
    vocab_size=CODES,
    hidden_size=24,  # not the text encoder's 16: enc_to_dec_proj is built
    ffn_dim=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_codebooks=3,
    pad_token_id=CODES,
    bos_token_id=CODES,
    max_position_embeddings=64,
)
#: MusicGen-Melody's chroma extractor at the tiny EnCodec's 6 kHz (the hub's: 32 kHz, n_fft 16384).
CHROMA = dict(
    feature_extractor_type="MusicgenMelodyFeatureExtractor",
    feature_size=12,
    num_chroma=12,
    sampling_rate=6000,
    n_fft=512,
    hop_length=128,
    chunk_length=1,
    padding_value=0.0,
    padding_side="right",
    return_attention_mask=False,
    stem_indices=[3, 2],
)
#: The hub's MusicGen generation settings (facebook/musicgen-small), scaled down.
GENERATION = dict(
    decoder_start_token_id=CODES,
    pad_token_id=CODES,
    bos_token_id=CODES,
    do_sample=True,
    guidance_scale=3.0,
    top_k=250,
    max_length=1500,
)


def make_random_musicgen(out: Path, seed: int = 0, melody: bool = False, **decoder):
    """A ``MusicgenForConditionalGeneration`` (``melody``: ``MusicgenMelodyForConditionalGeneration``
    with 5 chroma frames) with every parameter perturbed, its tokenizer (``w0 .. w39``) and
    generation config saved to ``out``; returns the torch model (eval)."""
    import torch
    import transformers
    from transformers import EncodecConfig, GenerationConfig, T5Config

    family = "MusicgenMelody" if melody else "Musicgen"
    decoder_config = getattr(transformers, f"{family}DecoderConfig")(**{**DECODER, **decoder})
    config = getattr(transformers, f"{family}Config")(
        text_encoder=T5Config(**T5).to_dict(),
        audio_encoder=EncodecConfig(**ENCODEC).to_dict(),
        decoder=decoder_config.to_dict(),
        **({"chroma_length": 5} if melody else {}),
    )
    torch.manual_seed(seed)
    model = getattr(transformers, f"{family}ForConditionalGeneration")(config).eval()
    perturb_parameters(model, seed=seed)
    if melody:  # loud enough that the tune steers a tiny model's greedy codes
        with torch.no_grad():
            model.audio_enc_to_dec_proj.weight.mul_(30)
    model.generation_config = GenerationConfig(**GENERATION)
    model.save_pretrained(out)
    _add_position_table(out / "model.safetensors", model)
    tiny_tokenizer(TEXT_VOCAB, {"</s>": 1}).save_pretrained(out)
    if melody:  # written by hand: transformers' extractor class needs torchaudio to exist
        (out / "preprocessor_config.json").write_text(json.dumps(CHROMA))
    return model


def _add_position_table(path: Path, model) -> None:
    """The decoder's sinusoid table, saved as the hub's checkpoints hold it (a parameter once)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(path)
    table = model.decoder.model.decoder.embed_positions.weights
    tensors["decoder.model.decoder.embed_positions.weights"] = table.contiguous()
    save_file(tensors, path, metadata={"format": "pt"})
