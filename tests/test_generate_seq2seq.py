"""``mobius generate`` on seq2seq packages: the tokens equal transformers' ``generate``.

A tiny random BART and T5 (every parameter perturbed) with a locally trained
tokenizer are built with the CLI; the API's greedy tokens, the forced target-language
and end tokens, seeded sampling and the CLI's streamed text are checked.
"""

from __future__ import annotations

import pytest
from test_generate_cli import make_tokenizer

from mobius.cli import main
from mobius.generate import PackageError, Seq2SeqGenerator, open_generator
from mobius.testing import build_with_cli
from mobius.testing._seq2seq_parity import make_random_seq2seq

PROMPT = "The capital of France is Paris."
NEW_TOKENS = 12


def _config(model_type: str, vocab_size: int, **extra):
    from transformers import AutoConfig

    sizes = {
        "bart": dict(
            d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37,
            max_position_embeddings=64, forced_eos_token_id=None,
        ),
        "t5": dict(d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4),
    }[model_type]  # fmt: skip
    ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=0)
    return AutoConfig.for_model(model_type, vocab_size=vocab_size, **sizes, **ids, **extra)


def _hf_tokens(model, ids, **options):
    """transformers' new tokens, the start token and anything from the first EOS left out."""
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, **options)
    tokens = out[0, 1:].tolist()
    return tokens[: tokens.index(2)] if 2 in tokens else tokens


@pytest.fixture(scope="module", params=["bart", "t5"])
def seq2seq_package(request, tmp_path_factory):
    """A built tiny seq2seq package (``--ep cpu``), its PyTorch model and tokenizer."""
    directory = tmp_path_factory.mktemp(f"s2s-{request.param}") / "hf"
    tokenizer = make_tokenizer(directory)
    model = make_random_seq2seq(_config(request.param, len(tokenizer)), seed=0)
    model.save_pretrained(directory)
    out = build_with_cli(directory, directory.parent / "out", "--ep", "cpu")
    return out, model, tokenizer


def test_greedy_tokens_match_generate(seq2seq_package):
    out, model, tokenizer = seq2seq_package
    ids = tokenizer(PROMPT)["input_ids"]
    generator = open_generator(out, threads=2)
    assert isinstance(generator, Seq2SeqGenerator)
    tokens = list(generator.generate_ids(ids, max_new_tokens=NEW_TOKENS))
    assert tokens == _hf_tokens(model, ids, do_sample=False)
    assert generator.stats.prompt_tokens == len(ids)


def test_cli_streams_the_decoded_tokens(seq2seq_package, capsys):
    out, model, tokenizer = seq2seq_package
    code = main(
        ["generate", str(out), PROMPT, "--no-chat-template", "--max-new-tokens", str(NEW_TOKENS)]
    )
    assert code == 0
    captured = capsys.readouterr()
    expected = tokenizer.decode(
        _hf_tokens(model, tokenizer(PROMPT)["input_ids"], do_sample=False),
        skip_special_tokens=True,
    )
    assert captured.out == expected + "\n"
    assert "tokens/s" in captured.err


def test_sampling_is_reproducible_per_seed(seq2seq_package):
    out, _, tokenizer = seq2seq_package
    generator = Seq2SeqGenerator(out)
    ids = tokenizer(PROMPT)["input_ids"]
    options = dict(max_new_tokens=NEW_TOKENS, do_sample=True, temperature=1.5, eos_token_ids=[])
    first = list(generator.generate_ids(ids, seed=3, **options))
    assert first == list(generator.generate_ids(ids, seed=3, **options))
    assert len(first) == NEW_TOKENS


def test_forced_start_and_end_tokens(tmp_path):
    """forced_bos_token_id (a target language) and forced_eos_token_id, as generate forces them."""
    tokenizer = make_tokenizer(tmp_path / "hf")
    model = make_random_seq2seq(_config("bart", len(tokenizer)), seed=1)
    model.generation_config.forced_bos_token_id = 7  # saved in generation_config.json
    model.generation_config.forced_eos_token_id = 2
    model.save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "out")
    ids = tokenizer(PROMPT)["input_ids"]
    tokens = list(Seq2SeqGenerator(out).generate_ids(ids, max_new_tokens=NEW_TOKENS))
    assert tokens[0] == 7
    assert tokens == _hf_tokens(model, ids, do_sample=False)
    assert len(tokens) < NEW_TOKENS  # the last step was the forced end


def test_incomplete_seq2seq_package_is_refused(seq2seq_package, tmp_path):
    import shutil

    out, _, _ = seq2seq_package
    broken = tmp_path / "pkg"
    shutil.copytree(out, broken)
    shutil.rmtree(broken / "encoder")
    with pytest.raises(PackageError, match="no encoder/model.onnx"):
        open_generator(broken)
