"""What llama.cpp assumes where a GGUF header is silent, and every end-of-generation id.

The conventions are llama.cpp's (``llama-model.cpp``, ``load_hparams``): keyed on the
layer count (Gemma 2's 27B has 46 layers, Gemma 3's 62), with defaults for the
sliding window, its pattern and RoPE base, the soft-caps and the RoPE base of a
header without one. Headers here carry the real models' sizes over tiny tensors; a
build on the filled config is checked against PyTorch where a fact changes the
graph (Gemma 3's query scale at the 27B layer count).

End of generation is llama.cpp's ``special_eog_ids`` (``llama-vocab.cpp``): EOS, EOT,
EOM, the FIM pad/repo/separator tokens and tokens spelled like ``<end_of_turn>``.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from transformers import AutoConfig

import mobius
from mobius.errors import CheckpointError, ModelSourceError
from mobius.testing import OnnxCausalLM, make_random_model
from mobius.testing._parity import compare_causal_lm
from mobius.weights import GGUFFile
from mobius_text.gguf import end_of_generation_ids, gguf_config, gguf_generation_config
from mobius_text.testing import convert_to_gguf, write_gguf


def _header(arch: str, **facts) -> dict:
    """``{arch}.<key>`` metadata from keyword facts (``attention__head_count`` for dots)."""
    return {f"{arch}.{key.replace('__', '.')}": value for key, value in facts.items()}


def _config(tmp_path, arch: str, meta: dict, tensors: dict | None = None) -> dict:
    tensors = tensors or {"token_embd.weight": np.zeros((8, 4), np.float32)}
    path = write_gguf(tmp_path / f"{arch}.gguf", arch, meta, tensors)
    with GGUFFile.open(path) as file:
        return gguf_config(file)


# Gemma 3 270M and 27B as their GGUF headers have them (no query scale, window pattern
# or local RoPE base: the converter writes none of them).
GEMMA3_270M = dict(
    block_count=18,
    embedding_length=640,
    feed_forward_length=2048,
    attention__head_count=4,
    attention__head_count_kv=1,
    attention__key_length=256,
    attention__value_length=256,
    attention__sliding_window=512,
    attention__layer_norm_rms_epsilon=1e-6,
    rope__freq_base=1_000_000.0,
    context_length=32768,
)
GEMMA3_27B = dict(
    GEMMA3_270M,
    block_count=62,
    embedding_length=5376,
    feed_forward_length=21504,
    attention__head_count=32,
    attention__head_count_kv=16,
    attention__key_length=128,
    attention__value_length=128,
    attention__sliding_window=1024,
    rope__scaling__type="linear",
    rope__scaling__factor=8.0,
)


@pytest.mark.parametrize(
    ("facts", "scalar"),
    [(GEMMA3_270M, 256), (GEMMA3_27B, 168)],  # the HF configs of gemma-3-270m and -27b
    ids=["270m", "27b"],
)
def test_gemma3_conventions_by_size(tmp_path, facts, scalar):
    config = _config(tmp_path, "gemma3", _header("gemma3", **facts))
    layers = facts["block_count"]
    assert config["query_pre_attn_scalar"] == scalar
    # Five sliding layers, then a full one; the sliding layers' RoPE base is 10000.
    assert config["layer_types"] == [
        "full_attention" if i % 6 == 5 else "sliding_attention" for i in range(layers)
    ]
    assert config["rope_local_base_freq"] == 10_000.0 and config["rope_theta"] == 1_000_000.0
    assert config["final_logit_softcapping"] is None and "attn_logit_softcapping" not in config
    hf = AutoConfig.for_model(**config)  # transformers reads it as HF's own config
    assert hf.rope_parameters["sliding_attention"]["rope_theta"] == 10_000.0
    assert (
        hf.query_pre_attn_scalar == scalar
        and hf.sliding_window == facts["attention__sliding_window"]
    )
    if "rope__scaling__factor" in facts:  # the global layers' scaling only
        assert hf.rope_parameters["full_attention"]["factor"] == 8.0
        assert hf.rope_parameters["sliding_attention"]["rope_type"] == "default"


def test_gemma3_without_a_window_attends_everywhere(tmp_path):
    facts = {k: v for k, v in GEMMA3_270M.items() if k != "attention__sliding_window"}
    config = _config(tmp_path, "gemma3", _header("gemma3", **facts))
    assert config["layer_types"] == ["full_attention"] * 18 and config["sliding_window"] is None
    assert "rope_local_base_freq" not in config


@pytest.mark.parametrize(
    ("layers", "hidden", "heads", "scalar"),
    [(26, 2304, 8, 256), (46, 4608, 32, 144)],  # gemma-2-2b, gemma-2-27b
    ids=["2b", "27b"],
)
def test_gemma2_conventions_where_the_header_is_silent(tmp_path, layers, hidden, heads, scalar):
    meta = _header(
        "gemma2",
        block_count=layers,
        embedding_length=hidden,
        attention__head_count=heads,
        attention__key_length=128 if layers == 46 else 256,
        attention__layer_norm_rms_epsilon=1e-6,
    )
    config = _config(tmp_path, "gemma2", meta)
    assert config["query_pre_attn_scalar"] == scalar
    assert config["sliding_window"] == 4096  # llama.cpp's Gemma 2 default
    assert config["layer_types"][:4] == ["sliding_attention", "full_attention"] * 2
    assert (config["attn_logit_softcapping"], config["final_logit_softcapping"]) == (50.0, 30.0)
    assert config["rope_theta"] == 10000.0  # the Gemma 2 converter writes no base


def test_silent_sizes_and_rope_base_are_llama_cpps(tmp_path):
    """head_dim = hidden / heads (HF's Gemma default is 256), KV heads = heads, base 10000."""
    meta = _header("gemma", block_count=2, embedding_length=64, attention__head_count=4)
    config = _config(tmp_path, "gemma", meta)
    assert (config["head_dim"], config["num_key_value_heads"], config["rope_theta"]) == (
        16,
        4,
        10000.0,
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("block_count", -3, "is not a valid int"),
        ("context_length", 1 << 40, "is not a valid int"),
        ("block_count", True, "is not a valid int"),
        ("embedding_length", "64", "is not a valid int"),
        ("rope.freq_base", "big", "is not a valid float"),
        ("attention.head_count", [4, 8], "varies by layer"),
        ("rope.scaling.type", "magic", "unknown rope.scaling.type"),
        ("attention.head_count", 5, "do not divide 64"),
    ],
)
def test_bad_metadata_is_refused_by_name(tmp_path, key, value, message):
    meta = _header("llama", block_count=2, embedding_length=64, attention__head_count=4)
    meta["llama." + key] = value
    with pytest.raises(ModelSourceError, match=message):
        _config(tmp_path, "llama", meta)


def test_falcon_layout_from_the_tensors(tmp_path):
    meta = _header(
        "falcon",
        block_count=2,
        embedding_length=64,
        attention__head_count=4,
        attention__head_count_kv=2,
        attention__layer_norm_epsilon=1e-5,
    )
    one = np.zeros(64, np.float32)
    config = _config(tmp_path, "falcon", meta, {"blk.0.attn_norm_2.weight": one})
    assert config["new_decoder_architecture"] and config["num_ln_in_parallel_attn"] == 2
    assert (config["num_kv_heads"], config["ffn_hidden_size"], config["alibi"]) == (2, 256, False)


# -- Gemma 3 at the 27B layer count, built ----------------------------------------------


def test_gemma3_27b_query_scale_is_built(tmp_path):
    """62 tiny layers: the filled ``query_pre_attn_scalar`` (hidden / heads, not head_dim)
    is the one the graph uses; the HF model is configured as the real 27B is."""
    hf_config = AutoConfig.for_model(
        "gemma3_text",
        vocab_size=64,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=62,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        query_pre_attn_scalar=16,  # 32 / 2, as gemma-3-27b's 5376 / 32 = 168
        sliding_window=4,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    model = make_random_model(hf_config)
    model.save_pretrained(tmp_path / "hf")
    path = convert_to_gguf(tmp_path / "hf", tmp_path / "g.gguf", "gemma3")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "no tokenizer files written")
        out = mobius.build(path).save(tmp_path / "onnx", progress=False)
    saved = json.loads((out / "config.json").read_text())
    assert saved["query_pre_attn_scalar"] == 16 and saved["layer_types"][5] == "full_attention"
    result = compare_causal_lm(model, OnnxCausalLM(out / "model.onnx"), [6], 2)
    result.assert_close()


# -- end-of-generation ids ---------------------------------------------------------------

CHAT_TOKENS = ["<unk>", "<s>", "</s>", "<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<eom>"]


def _vocabulary(**ids) -> dict:
    tokens = [*CHAT_TOKENS, *(chr(ord("a") + i) for i in range(26))]
    meta = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * len(tokens),
        "tokenizer.ggml.token_type": [2, 3, 3, 3, 3, 3, 3] + [1] * 26,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }
    meta.update({f"tokenizer.ggml.{key}_token_id": value for key, value in ids.items()})
    return meta


def test_end_of_generation_ids_as_llama_cpp():
    # EOS first, then the header's EOT and EOM, then the tokens llama.cpp knows by name.
    assert end_of_generation_ids(_vocabulary(eot=3, eom=6)) == [2, 3, 6, 4, 5]
    assert end_of_generation_ids(_vocabulary()) == [2, 3, 4, 5]
    # An id outside the vocabulary is no token (llama.cpp ignores it); one that is not an
    # integer is a corrupt header.
    assert end_of_generation_ids(_vocabulary(eot=999)) == [2, 3, 4, 5]
    with pytest.raises(CheckpointError, match="eom_token_id = True is not a token id"):
        end_of_generation_ids(_vocabulary(eom=True))
    # GPT-OSS ends a message with <|end|>, not generation, beside <|return|> and <|call|>.
    harmony = {"tokenizer.ggml.tokens": ["<|end|>", "<|return|>", "<|call|>", "x"]}
    assert end_of_generation_ids(harmony) == [1, 2]
    assert end_of_generation_ids({"tokenizer.ggml.tokens": ["<|end|>", "x"]}) == [0]
    # Qwen's FIM pad / repo / file separator tokens also end generation.
    qwen = {"tokenizer.ggml.tokens": ["<|endoftext|>", "<|fim_pad|>", "<|repo_name|>", "x"]}
    assert end_of_generation_ids(qwen) == [1, 2, 0]


def test_generation_config_lists_every_end_id():
    assert gguf_generation_config(_vocabulary(eot=3)) == {
        "bos_token_id": 1,
        "eos_token_id": [2, 3, 4, 5],
    }
    only_eos = {"tokenizer.ggml.tokens": ["a", "b"], "tokenizer.ggml.eos_token_id": 1}
    assert gguf_generation_config(only_eos) == {"eos_token_id": 1}


def test_package_files_carry_the_end_ids_and_the_config(tmp_path):
    """generation_config.json and genai_config.json list every end id; config.json is the
    HF config the header describes, readable by transformers."""
    hf_config = AutoConfig.for_model(
        "llama",
        vocab_size=len(CHAT_TOKENS) + 26,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=64,
    )
    make_random_model(hf_config).save_pretrained(tmp_path / "hf")
    path = convert_to_gguf(tmp_path / "hf", tmp_path / "l.gguf", "llama", _vocabulary(eot=3))
    out = mobius.build(path).save(tmp_path / "out", progress=False)
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [2, 3, 4, 5]
    genai = json.loads((out / "genai_config.json").read_text())["model"]
    assert genai["eos_token_id"] == [2, 3, 4, 5] and genai["bos_token_id"] == 1
    config = AutoConfig.from_pretrained(out)
    assert (config.model_type, config.hidden_size, config.eos_token_id) == ("llama", 32, 2)
    assert json.loads((out / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
