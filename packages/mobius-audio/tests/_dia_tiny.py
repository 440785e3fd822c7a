"""A tiny random Dia (every parameter perturbed) and the tiny DAC its codes decode with.

Decoder vocabulary 20: codes 0..15 are the DAC's 16 codebook rows, then eos 16,
pad 18 and bos 19 (the hub's layout: 1024 rows, eos 1024, pad 1025, bos 1026).
Three channels (the tiny DAC's three codebooks) delayed by 0, 2 and 3 frames;
grouped self-attention heads (4 over 2) and a cross-attention of its own layout.
"""

from __future__ import annotations

from codec_cases.dac import DAC

DIA = dict(
    encoder_config=dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, head_dim=8, vocab_size=256,
    ),
    decoder_config=dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, cross_num_attention_heads=4, cross_head_dim=8,
        cross_num_key_value_heads=2, cross_hidden_size=16, vocab_size=20,
        num_channels=DAC["n_codebooks"], eos_token_id=16, pad_token_id=18, bos_token_id=19,
    ),
    delay_pattern=[0, 2, 3],
)  # fmt: skip

#: The hub's sampling settings (nari-labs' generation_config.json), top_k cut to the tiny vocabulary.
GENERATION = dict(
    do_sample=True, guidance_scale=3.0, temperature=1.8, top_k=6, top_p=0.9,
    bos_token_id=19, eos_token_id=16, pad_token_id=18, max_length=3072,
)  # fmt: skip


def make_random_dia(directory, seed: int = 0):
    """A float32 ``DiaForConditionalGeneration``, every parameter perturbed, saved to ``directory``."""
    import torch
    from transformers import DiaConfig, DiaForConditionalGeneration, GenerationConfig

    from mobius.testing import perturb_parameters

    torch.manual_seed(seed)
    model = DiaForConditionalGeneration(DiaConfig(**DIA)).to(torch.float32)
    perturb_parameters(model, seed, scale=0.3)
    model.generation_config = GenerationConfig(**GENERATION)
    model.eval().save_pretrained(directory)
    return model
