"""``mobius generate`` and :mod:`mobius.generate`: ONNX Runtime decode loops on built packages.

A tiny random llama with a small byte-level tokenizer made here is built with both
attention back ends (``--ep default``: the ONNX Attention op; ``--ep cpu``:
GroupQueryAttention); its greedy tokens must equal transformers' ``generate``. The
real SmolLM2-135M-Instruct then runs through the CLI.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.generate import PackageError, TextGenerator
from mobius.testing import build_with_cli, make_random_model, torch_greedy

NEW_TOKENS = 24
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)
CORPUS = [
    "The capital of France is Paris. Paris is a city on the Seine.",
    "Héllo wörld, ça va? 東京は日本の首都です。 Ünïcödé text splits across tokens.",
    "def generate(prompt): return model(prompt)  # tokens per second",
] * 20


def make_tokenizer(directory: Path):
    """A byte-level BPE tokenizer trained on a few lines (no download) saved in ``directory``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(directory)
    return wrapped


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A saved tiny random llama with a tokenizer, and its PyTorch model."""
    from transformers import LlamaConfig

    directory = tmp_path_factory.mktemp("tiny-llama") / "hf"
    tokenizer = make_tokenizer(directory)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = make_random_model(config, seed=0)
    model.save_pretrained(directory)
    return directory, model, tokenizer


@pytest.fixture(scope="module", params=["default", "cpu"])
def tiny_package(request, tiny_llama, tmp_path_factory):
    source, model, tokenizer = tiny_llama
    out = build_with_cli(
        source, tmp_path_factory.mktemp(f"gen-{request.param}") / "out", "--ep", request.param
    )
    return TextGenerator(out, threads=2), model, tokenizer


def test_greedy_tokens_match_transformers(tiny_package):
    generator, model, tokenizer = tiny_package
    prompt = generator.encode_prompt("The capital of France is", chat_template=False)
    assert prompt == tokenizer("The capital of France is")["input_ids"]

    # EOS never stops either side, so all NEW_TOKENS are compared.
    expected = torch_greedy(model, prompt, NEW_TOKENS, eos="ignore")
    got = list(generator.generate_ids(prompt, max_new_tokens=NEW_TOKENS, eos_token_ids=[]))
    assert got == expected
    assert len(set(expected)) > 3  # not a degenerate stream a broken cache could also match
    stats = generator.stats
    assert (stats.prompt_tokens, stats.new_tokens) == (len(prompt), NEW_TOKENS)
    assert stats.stop_reason == "max_new_tokens" and stats.decode_tokens_per_s > 0


def test_cpu_builds_update_the_cache_in_place(tiny_package):
    """An --ep cpu build keeps its cache inside GroupQueryAttention, so the runner binds one
    buffer per cache tensor as both past and present (no copy per step); its tokens equal
    those of separate buffers and of transformers."""
    generator, model, tokenizer = tiny_package
    in_place = "gen-cpu" in str(generator.package_dir)
    assert generator._share_buffers is in_place
    prompt = [1] + [3 + i % (len(tokenizer) - 3) for i in range(100)]
    shared = list(generator.generate_ids(prompt, max_new_tokens=8, eos_token_ids=[]))
    generator._share_buffers = False
    try:
        copied = list(generator.generate_ids(prompt, max_new_tokens=8, eos_token_ids=[]))
    finally:
        generator._share_buffers = in_place
    assert shared == copied == torch_greedy(model, prompt, 8, eos="ignore")


def test_stops_at_eos(tiny_package):
    generator, model, _ = tiny_package
    prompt = [1, 40, 50, 60]
    reference = torch_greedy(model, prompt, 12, eos="ignore")
    # Declare the 6th greedy token the end of sequence: generation stops before it.
    stop = reference[5]
    got = list(generator.generate_ids(prompt, max_new_tokens=12, eos_token_ids=[stop]))
    assert got == reference[: reference.index(stop)]
    assert generator.stats.stop_reason == "eos"
    # By default the package's own EOS ids (config.json: 2) stop it, as transformers.
    assert generator.eos_token_ids == [2]
    assert list(generator.generate_ids(prompt, max_new_tokens=12)) == torch_greedy(
        model, prompt, 12
    )


def test_stops_at_the_context_length(tiny_package):
    generator, _, _ = tiny_package  # max_position_embeddings 256
    got = list(generator.generate_ids([1] + [40] * 249, max_new_tokens=20, eos_token_ids=[]))
    assert (len(got), generator.stats.stop_reason) == (6, "context_length")
    with pytest.raises(MobiusError, match="at most 256"):
        list(generator.generate_ids([1] * 257))


def test_sampling_is_reproducible_per_seed(tiny_package):
    generator, _, _ = tiny_package
    prompt = [1, 40, 50, 60]

    def sample(seed):
        options = dict(do_sample=True, temperature=1.5, top_k=100, top_p=0.95, seed=seed)
        return list(generator.generate_ids(prompt, max_new_tokens=20, eos_token_ids=[], **options))

    first = sample(0)
    assert sample(0) == first
    assert sample(1) != first
    assert first != list(generator.generate_ids(prompt, max_new_tokens=20, eos_token_ids=[]))


def test_state_space_caches_run(tmp_path):
    """Mamba caches fixed-size conv_state / ssm_state tensors, not keys and values."""
    from transformers import MambaConfig

    from mobius.testing import perturb_parameters

    config = MambaConfig(
        vocab_size=128,
        hidden_size=32,
        state_size=4,
        num_hidden_layers=2,
        intermediate_size=64,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = make_random_model(config, seed=0)
    perturb_parameters(model, seed=1, scale=0.3)  # the default noise leaves a token repeating
    model.save_pretrained(tmp_path / "hf")
    generator = TextGenerator(build_with_cli(tmp_path / "hf", tmp_path / "out"), threads=2)
    assert {p.name.rsplit(".", 1)[1] for p in generator._past} == {"conv_state", "ssm_state"}
    prompt = [1, 17, 42, 99, 5, 63, 8, 120, 33, 77]
    expected = torch_greedy(model, prompt, 16, eos="ignore")
    assert list(generator.generate_ids(prompt, max_new_tokens=16, eos_token_ids=[])) == expected
    assert len(set(expected)) > 3


def test_streamed_text_is_the_decode_of_the_tokens(tiny_package):
    """Random byte-level tokens split multi-byte characters: pieces never end inside one,
    and together they are the decode of all tokens."""
    generator, _, tokenizer = tiny_package
    pieces = list(
        generator.stream(
            "Héllo 東京", chat_template=False, max_new_tokens=40, do_sample=True, seed=3
        )
    )
    ids = list(
        generator.generate_ids(
            generator.encode_prompt("Héllo 東京", chat_template=False),
            max_new_tokens=40,
            do_sample=True,
            seed=3,
        )
    )
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=True)
    assert all(not p.endswith("\ufffd") for p in pieces[:-1])


def test_chat_template_and_system_message(tiny_package):
    generator, _, tokenizer = tiny_package
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert generator.encode_prompt("Hi", system="Be brief.") == expected
    with pytest.raises(MobiusError, match="chat template"):
        generator.encode_prompt("Hi", system="Be brief.", chat_template=False)


def test_cli_streams_greedy_text(tiny_package, capsys):
    generator, model, tokenizer = tiny_package
    prompt = "The capital of France is"
    tokens = torch_greedy(model, tokenizer(prompt)["input_ids"], 16)
    expected = tokenizer.decode(tokens, skip_special_tokens=True)
    argv = ["generate", str(generator.package_dir), prompt, "--max-new-tokens", "16"]
    assert main([*argv, "--no-chat-template", "--threads", "2"]) == 0
    captured = capsys.readouterr()
    assert captured.out == expected + "\n"
    assert re.search(r"decode [\d.]+ tokens/s", captured.err)


def test_cli_sampling_options_and_seed(tiny_package, capsys):
    generator, _, _ = tiny_package
    argv = ["generate", str(generator.package_dir), "Paris", "--max-new-tokens", "12"]
    runs = []
    for seed in ("5", "5", "6"):
        assert main([*argv, "--temperature", "2", "--top-k", "0", "--seed", seed]) == 0
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1] != runs[2]
    assert main([*argv, "--top-p", "1.5"]) == 1
    assert "--top-p" in capsys.readouterr().err


def test_bad_packages_are_clear_errors(tiny_package, tmp_path, capsys):
    assert main(["generate", str(tmp_path / "missing"), "hi"]) == 1
    assert "no package directory" in capsys.readouterr().err

    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "model.onnx").write_bytes(b"not a protobuf")
    with pytest.raises(PackageError, match="cannot load"):
        TextGenerator(tmp_path / "corrupt")

    # A package without its tokenizer runs token ids, but not text.
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("model.onnx", "model.onnx.data", "config.json"):
        shutil.copyfile(tiny_package[0].package_dir / name, bare / name)
    assert len(list(TextGenerator(bare).generate_ids([1, 40], max_new_tokens=3))) <= 3
    assert main(["generate", str(bare), "hi"]) == 1
    assert "no tokenizer files" in capsys.readouterr().err

    # An audio file given to a text package: said as such, for every format speech runners read.
    for audio in ("speech.wav", "talk.MP3", "a.flac", "b.ogg"):
        assert main(["generate", str(tiny_package[0].package_dir), audio]) == 1
        assert f"not a speech-to-text package: it cannot transcribe {audio}" in (
            capsys.readouterr().err
        )


def test_non_causal_lm_package_is_refused(tmp_path):
    """A feature-extraction graph (input_ids -> last_hidden_state, no cache) is not a causal LM."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["input_ids"], ["last_hidden_state"], to=TensorProto.FLOAT)],
        "features",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])],
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence"]
            )
        ],
    )
    (tmp_path / "pkg").mkdir()
    onnx.save(helper.make_model(graph), tmp_path / "pkg" / "model.onnx")
    with pytest.raises(PackageError, match="not a causal-LM package"):
        TextGenerator(tmp_path / "pkg")


# --- SmolLM2-135M-Instruct, the real checkpoint ------------------------------------

SMOLLM2_TOKENS = 32


@pytest.mark.slow  # ~30 s to write the checkpoint (shared), a 135M-parameter build, 3 runs
def test_smollm2_cli_matches_pytorch(smollm2_dir, tmp_path, capsys):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = build_with_cli(smollm2_dir, tmp_path / "out", "--ep", "cpu")
    capsys.readouterr()  # the build's own output
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()

    prompt = "The capital of France is"
    # Both sides stop at EOS: transformers' generate (its own EOS handling) and mobius.
    tokens = torch_greedy(model, tokenizer(prompt)["input_ids"], SMOLLM2_TOKENS)
    argv = ["generate", str(out), prompt, "--max-new-tokens", str(SMOLLM2_TOKENS)]
    assert main([*argv, "--no-chat-template"]) == 0
    captured = capsys.readouterr()
    assert captured.out == tokenizer.decode(tokens, skip_special_tokens=True) + "\n"
    figure = re.search(r"decode ([\d.]+) tokens/s", captured.err)
    assert figure and float(figure[1]) > 0

    # With the chat template: the same greedy answer as PyTorch on the templated prompt.
    question = "What is the capital of France?"
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )
    chat_ids = tokenizer(chat, add_special_tokens=False)["input_ids"]
    answer = tokenizer.decode(
        torch_greedy(model, chat_ids, SMOLLM2_TOKENS), skip_special_tokens=True
    )
    assert main(["generate", str(out), question, "--max-new-tokens", str(SMOLLM2_TOKENS)]) == 0
    printed = capsys.readouterr().out
    assert printed == answer + "\n"
    assert "Paris" in printed

    # The CLI run above may stop at EOS first: through the API, with EOS off, all 32 tokens.
    prompt_ids = tokenizer(prompt)["input_ids"]
    full = torch_greedy(model, prompt_ids, SMOLLM2_TOKENS, eos="ignore")
    generator = TextGenerator(out)
    assert list(generator.generate_ids(prompt_ids, max_new_tokens=32, eos_token_ids=[])) == full
