"""A tiny Bark: three 2-layer GPT stages over vocabularies laid out as Bark's, a 4-codebook EnCodec.

Bark's token layout, scaled down (``suno/bark``'s numbers in brackets):

- semantic stage: semantic tokens 0..39 [0..9 999], its end (and pad) token 40 [10 000],
  48 outputs [10 048]; the text ids moved up by 48 [10 048], text padding 80 [129 595],
  the infer token 81 [129 599];
- coarse stage: semantic tokens, then codebook 0's 16 codes at 40..55 and codebook 1's at
  56..71 [10 000 + 1 024 each], the semantic pad 72 [12 048], the infer token 74 [12 050];
- fine stage: 4 codebooks [8], 16 codes each and the pad code 16 [1 024].

The windows are small enough that a few seconds of tokens cross each of them: the
coarse stage's 6-token windows [60] over at most 24 tokens of history [630], the
fine stage's 16-frame blocks [1 024] moving by 8 [512].
"""

from __future__ import annotations

import json
from pathlib import Path

from codec_cases.encodec import ENCODEC

TEXT_WORDS = ["hello", "there", "my", "dog", "is", "cute", "a", "b", "c", "d", "e", "f"]


def _stage(**sizes) -> dict:
    return dict(hidden_size=16, num_heads=2, num_layers=2, **sizes)


BARK = dict(
    semantic_config=_stage(block_size=64, input_vocab_size=84, output_vocab_size=48, bias=True),
    # suno/bark's stages have no biases (bias=False); the semantic one has them here.
    coarse_acoustics_config=_stage(
        block_size=96, input_vocab_size=76, output_vocab_size=76, bias=False
    ),
    fine_acoustics_config=_stage(  # its LayerNorms keep their biases all the same
        block_size=32,
        input_vocab_size=20,
        output_vocab_size=20,
        n_codes_total=4,
        n_codes_given=1,
        bias=False,
    ),
    codec_config=dict(model_type="encodec", **ENCODEC),
)

#: Sampling on by default (as the runner's tests check), the fine stage at temperature 0.5.
GENERATION = dict(
    semantic_config=dict(
        eos_token_id=40,
        max_new_tokens=24,
        text_encoding_offset=48,
        text_pad_token=80,
        semantic_infer_token=81,
        semantic_vocab_size=40,
        max_input_semantic_length=8,
        semantic_rate_hz=49.9,
        do_sample=True,
        temperature=0.7,
    ),
    coarse_acoustics_config=dict(
        coarse_semantic_pad_token=72,
        coarse_rate_hz=75,
        n_coarse_codebooks=2,
        coarse_infer_token=74,
        max_coarse_input_length=12,
        max_coarse_history=24,
        sliding_window_len=6,
        do_sample=True,
        temperature=0.7,
    ),
    fine_acoustics_config=dict(
        temperature=0.5, max_fine_history_length=8, max_fine_input_length=16, n_fine_codebooks=4
    ),
    sample_rate=6000,
    codebook_size=16,
)


def make_tiny_bark(directory: Path, seed: int = 0):
    """A tiny ``BarkModel`` (every parameter perturbed), saved with its generation config
    and a BERT tokenizer over :data:`TEXT_WORDS` to ``directory``; returns the model."""
    import torch
    from transformers import BarkConfig, BarkModel, BertTokenizer, GenerationConfig
    from transformers.models.bark.generation_configuration_bark import BarkGenerationConfig

    from mobius.testing import perturb_parameters

    torch.manual_seed(seed)
    model = BarkModel(BarkConfig(**BARK)).eval()
    perturb_parameters(model, seed)
    model.save_pretrained(directory)
    # BarkGenerationConfig cannot save itself (it skips GenerationConfig's __init__):
    # written as the hub's generation_config.json holds it.
    text = json.dumps(BarkGenerationConfig(**GENERATION).to_dict(), indent=2)
    (directory / "generation_config.json").write_text(text)
    # As from_pretrained reads it: each stage's settings a dict (BarkModel.generate wants that).
    model.generation_config = GenerationConfig.from_pretrained(directory)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TEXT_WORDS]) + "\n")
    BertTokenizer(str(vocab), do_lower_case=True).save_pretrained(directory)
    return model
