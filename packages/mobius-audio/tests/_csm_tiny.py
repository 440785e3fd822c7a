"""A tiny random CSM (every parameter perturbed) over the tiny Mimi of ``codec_cases/mimi.py``.

Four codebooks of 16 codes (the Mimi's four quantizers of 16 rows, as the hub's CSM
reads all 32 of its Mimi's), a 64-token text vocabulary with the hub's special tokens at
60..63, grouped key/value heads in both stacks and the hub's llama3 rotary schedule.
The generation config is the hub's shape (sampling for both stages, temperature 0.9),
top-k cut to the tiny vocabulary.
"""

from __future__ import annotations

from codec_cases.mimi import MIMI

BOS, EOS, AUDIO, AUDIO_EOS = 60, 61, 62, 63
SPECIAL_TOKENS = {"<|begin_of_text|>": BOS, "<|end_of_text|>": EOS, "<|AUDIO|>": AUDIO, "<|audio_eos|>": AUDIO_EOS}  # fmt: skip
ROPE = dict(
    rope_type="llama3", rope_theta=500000.0, factor=32.0, high_freq_factor=4.0,
    low_freq_factor=1.0, original_max_position_embeddings=16,
)  # fmt: skip

CSM = dict(
    num_codebooks=4, vocab_size=16, text_vocab_size=64, hidden_size=32, intermediate_size=48,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    bos_token_id=BOS, pad_token_id=AUDIO, audio_token_id=AUDIO, audio_eos_token_id=AUDIO_EOS,
    codebook_pad_token_id=15, codebook_eos_token_id=0, rope_parameters=ROPE,
    depth_decoder_config=dict(
        num_codebooks=4, vocab_size=16, backbone_hidden_size=32, hidden_size=16,
        intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        max_position_embeddings=5, rope_parameters=dict(ROPE, original_max_position_embeddings=2),
    ),
    codec_config=dict(MIMI, model_type="mimi"),
)  # fmt: skip

SAMPLING = dict(do_sample=True, temperature=0.9, top_k=5)


def tiny_csm_tokenizer():
    """A word-level tokenizer (``w0 .. w59``) with CSM's bos/eos and audio tokens."""
    from mobius.testing import tiny_tokenizer

    tokenizer = tiny_tokenizer(64, SPECIAL_TOKENS)
    tokenizer.bos_token, tokenizer.eos_token = "<|begin_of_text|>", "<|end_of_text|>"
    return tokenizer


def make_random_csm(directory, seed: int = 0):
    """A float32 ``CsmForConditionalGeneration``, every parameter perturbed, saved with its tokenizer."""
    import torch
    from transformers import CsmConfig, CsmForConditionalGeneration, GenerationConfig

    from mobius.testing import perturb_parameters

    torch.manual_seed(seed)
    model = CsmForConditionalGeneration(CsmConfig(**CSM)).to(torch.float32)
    for name, part in model.named_children():  # the codec as the codec tests perturb it
        perturb_parameters(part, seed, scale=0.05 if name == "codec_model" else 0.3)
    model.generation_config = GenerationConfig(**SAMPLING)
    model.depth_decoder.generation_config.update(**SAMPLING)
    model.eval().save_pretrained(directory)
    tiny_csm_tokenizer().save_pretrained(directory)
    return CsmForConditionalGeneration.from_pretrained(directory).eval()
