"""Tokenizer files (``tokenizer.json``, ``tokenizer_config.json``, ``generation_config.json``)
made from a GGUF file's ``tokenizer.*`` metadata.

A GGUF file carries its vocabulary as metadata under llama.cpp's key names:
``tokenizer.ggml.model`` names the algorithm, ``tokens`` / ``token_type`` /
``scores`` / ``merges`` hold the vocabulary, ``tokenizer.ggml.pre`` names the
pre-tokenizer of a byte-level vocabulary, and the ``*_token_id`` and
``add_*_token`` keys the special tokens. Two algorithms are rebuilt here with the
``tokenizers`` library (no transformers tokenizer class, no torch):

- ``gpt2``: byte-level BPE with explicit merges; the split regex follows
  ``tokenizer.ggml.pre`` as llama.cpp does.
- ``llama``: SentencePiece-style BPE over ``▁``-marked words with ``<0xNN>`` byte
  fallback; merges are the file's, or derived from the scores as SentencePiece
  ranks pieces (Gemma ranks by position instead, its scores do not order merges).

Other vocabularies raise :class:`UnsupportedTokenizerError`: guessing one would
make a package that tokenizes wrongly without saying so.

Every value is read through :class:`~mobius.weights.GGUFMetadata`'s typed reads: a
token list that is not strings, a score that is not a number, a token type out of
range or a merge that is not two tokens of the vocabulary is a one-line
:class:`~mobius.errors.CheckpointError` naming the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mobius.errors import CheckpointError, MobiusError
from mobius.weights import GGUFMetadata

# llama.cpp's token types (``tokenizer.ggml.token_type``); 0 is its UNDEFINED.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_TOKENS, _TYPES = "tokenizer.ggml.tokens", "tokenizer.ggml.token_type"
_SCORES, _MERGES = "tokenizer.ggml.scores", "tokenizer.ggml.merges"

SPIECE_SPACE = "\u2581"  # "▁", SentencePiece's word marker

# Split regexes of byte-level vocabularies, by ``tokenizer.ggml.pre``.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# pre name -> (kind, regex): "gpt2" is ByteLevel's own GPT-2 regex, "digits" splits every
# digit off first (llama.cpp's STARCODER group, SmolLM's), "split" is one regex.
_PRE_TOKENIZERS: dict[str, tuple[str, str | None]] = {
    "default": ("gpt2", None),
    "gpt2": ("gpt2", None),
    "gpt-2": ("gpt2", None),
    "mpt": ("gpt2", None),
    "olmo": ("gpt2", None),
    "smollm": ("digits", None),
    "starcoder": ("digits", None),
    "refact": ("digits", None),
    "llama3": ("split", _LLAMA3_SPLIT),
    "llama-v3": ("split", _LLAMA3_SPLIT),
    "llama-bpe": ("split", _LLAMA3_SPLIT),
    "qwen2": ("split", _QWEN2_SPLIT),
    "deepseek-r1-qwen": ("split", _QWEN2_SPLIT),
}
# llama.cpp takes a whole word that is in the vocabulary before merging for these
# (a Llama 3 tokenizer.json says the same with ``ignore_merges``).
_IGNORE_MERGES = {"llama3", "llama-v3", "llama-bpe"}
# Qwen2's own tokenizer NFC-normalizes before splitting.
_NFC = {"qwen2", "deepseek-r1-qwen"}

_GEMMA = {"gemma", "gemma2", "gemma3"}

_SPECIAL_IDS = {
    "bos_token": "bos_token_id",
    "eos_token": "eos_token_id",
    "unk_token": "unknown_token_id",
    "pad_token": "padding_token_id",
}


class UnsupportedTokenizerError(MobiusError):
    """The GGUF file's vocabulary is of a kind mobius cannot rebuild as tokenizer files."""


def gguf_tokenizer_files(metadata: Mapping[str, Any]) -> dict[str, str]:
    """The tokenizer files of a GGUF file, as ``{file name: JSON text}``.

    ``metadata`` is :attr:`GGUFFile.metadata`. ``tokenizer.json`` and
    ``tokenizer_config.json`` are always written; ``generation_config.json``
    (:func:`gguf_generation_config`) when the file names a BOS, EOS or padding token.

    Raises:
        UnsupportedTokenizerError: No vocabulary, or one of a kind not supported
            (``tokenizer.ggml.model`` other than ``gpt2`` / ``llama``, or a byte-level
            vocabulary with an unknown ``tokenizer.ggml.pre``).
        CheckpointError: A ``tokenizer.*`` value has the wrong type or range.
    """
    metadata = GGUFMetadata.of(metadata)
    tokenizer = build_tokenizer(metadata)
    files = {
        "tokenizer.json": tokenizer.to_str(pretty=True),
        "tokenizer_config.json": _dump(tokenizer_config(metadata)),
    }
    generation = gguf_generation_config(metadata)
    if generation:
        files["generation_config.json"] = _dump(generation)
    return files


# Token texts llama.cpp ends generation at, whatever their type (llama-vocab.cpp, its
# ``special_eog_ids``: Llama 3, ChatML, Phi-3, Gemma, GPT-OSS, Granite, Kimi...).
EOG_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
    }
)
# Fill-in-the-middle tokens llama.cpp also ends generation at: the metadata id, else the
# first token spelled one of these ways.
_FIM_EOG = {
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
# llama.cpp's exceptions: "<|end|>" ends a message, not generation, beside GPT-OSS's
# "<|return|>"/"<|call|>" (and Solar's "<|calls|>"/"<|flush|>"); "</s>" does not beside
# Gemma 4's "<|tool_response>".
_EOG_EXCEPTIONS = [
    (("<|return|>", "<|call|>"), "<|end|>"),
    (("<|calls|>", "<|flush|>"), "<|end|>"),
    (("<|tool_response>",), "</s>"),
]


def _token_id(metadata: GGUFMetadata, key: str, n_tokens: int | None) -> int | None:
    """A ``tokenizer.ggml.<key>`` id, if it names a token of the vocabulary.

    An id outside the vocabulary is ignored, as llama.cpp ignores it; one that is not
    an integer is refused.
    """
    name = f"tokenizer.ggml.{key}"
    value = metadata.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise metadata.error(name, value, "a token id (an integer)")
    return value if value >= 0 and (n_tokens is None or value < n_tokens) else None


def _tokens(metadata: GGUFMetadata) -> list[str]:
    """``tokenizer.ggml.tokens``, checked to be strings; empty when absent."""
    return metadata.get_str_list(_TOKENS) or []


def end_of_generation_ids(metadata: Mapping[str, Any]) -> list[int]:
    """Every id llama.cpp ends generation at: EOS first, then EOT, EOM, the FIM
    pad/repo/separator tokens and the tokens spelled as :data:`EOG_TEXTS`, by id."""
    metadata = GGUFMetadata.of(metadata)
    tokens = _tokens(metadata)
    n_tokens = len(tokens) or None
    ids = [_token_id(metadata, f"{key}_token_id", n_tokens) for key in ("eos", "eot", "eom")]
    wanted = EOG_TEXTS.union(*_FIM_EOG.values())
    by_text: dict[str, int] = {}  # the first id of each wanted spelling
    for index, token in enumerate(tokens):
        if token in wanted:
            by_text.setdefault(token, index)
    for key, texts in _FIM_EOG.items():
        found = _token_id(metadata, f"{key}_token_id", n_tokens)
        if found is None:
            found = next((by_text[t] for t in texts if t in by_text), None)
        ids.append(found)
    ids += sorted(by_text[t] for t in EOG_TEXTS if t in by_text)
    for present, dropped in _EOG_EXCEPTIONS:
        if all(t in by_text for t in present) and dropped in by_text:
            ids = [i for i in ids if i != by_text[dropped]]
    return list(dict.fromkeys(i for i in ids if i is not None))


def gguf_generation_config(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The ``generation_config.json`` content: BOS, every end-of-generation id, padding.

    ``eos_token_id`` is a list when llama.cpp would stop at more than one token (a
    chat model's end of turn beside its EOS), as HF's generation configs write it.
    """
    metadata = GGUFMetadata.of(metadata)
    n_tokens = len(_tokens(metadata)) or None
    generation: dict[str, Any] = {}
    bos = _token_id(metadata, "bos_token_id", n_tokens)
    if bos is not None:
        generation["bos_token_id"] = bos
    eos = end_of_generation_ids(metadata)
    if eos:
        generation["eos_token_id"] = eos[0] if len(eos) == 1 else eos
    pad = _token_id(metadata, "padding_token_id", n_tokens)
    if pad is not None:
        generation["pad_token_id"] = pad
    return generation


def build_tokenizer(metadata: Mapping[str, Any]):
    """A ``tokenizers.Tokenizer`` equivalent to the GGUF file's vocabulary."""
    metadata = GGUFMetadata.of(metadata)
    kind = metadata.get_str("tokenizer.ggml.model")
    tokens = _tokens(metadata)
    if kind is None or not tokens:
        raise UnsupportedTokenizerError("the GGUF file has no tokenizer vocabulary")
    if kind == "gpt2":
        tokenizer = _byte_level(metadata)
    elif kind == "llama":
        tokenizer = _sentencepiece(metadata)
    else:
        raise UnsupportedTokenizerError(
            f"GGUF tokenizer model {kind!r} is not supported (supported: gpt2, llama)"
        )
    _add_special_tokens(tokenizer, metadata)
    post_processor = _post_processor(metadata)
    if post_processor is not None:
        tokenizer.post_processor = post_processor
    return tokenizer


def tokenizer_config(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The ``tokenizer_config.json`` content: special tokens, BOS/EOS flags, chat template."""
    metadata = GGUFMetadata.of(metadata)
    tokens = _tokens(metadata)
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    for name, key in _SPECIAL_IDS.items():
        token_id = _token_id(metadata, key, len(tokens))
        if token_id is not None:
            config[name] = tokens[token_id]
    config["add_bos_token"], config["add_eos_token"] = _add_bos_eos(metadata)
    arch = metadata.get_str("general.architecture")
    context = metadata.get_int(f"{arch}.context_length") if arch else None
    if context:
        config["model_max_length"] = context
    config["clean_up_tokenization_spaces"] = False
    template = metadata.get_str("tokenizer.chat_template")
    if template:
        config["chat_template"] = template
    return config


def _dump(data: dict) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _add_bos_eos(metadata: GGUFMetadata) -> tuple[bool, bool]:
    # llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise.
    default_bos = metadata.get_str("tokenizer.ggml.model") == "llama"
    add_bos = metadata.get_bool("tokenizer.ggml.add_bos_token", default_bos)
    add_eos = metadata.get_bool("tokenizer.ggml.add_eos_token", False)
    return add_bos, add_eos


def _token_types(metadata: GGUFMetadata) -> list[int]:
    """One llama.cpp token type per token (all NORMAL when the file has none)."""
    n = len(_tokens(metadata))
    types = metadata.get_int_list(_TYPES, min=0, max=BYTE, length=n)
    return [NORMAL] * n if types is None else types


def _merges(metadata: GGUFMetadata, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """``tokenizer.ggml.merges`` as pairs, each checked against the vocabulary.

    A merge is split at its first space after the first character, as llama.cpp
    splits it (so a part may itself be a space). Both parts and the token they make
    must be in the vocabulary: ``tokenizers`` fails on (or panics at) any other.
    """
    pairs = []
    for index, merge in enumerate(metadata.get_str_list(_MERGES) or ()):
        cut = merge.find(" ", 1)
        left, right = merge[:cut], merge[cut + 1 :]
        if cut < 0 or not right or not all(t in vocab for t in (left, right, left + right)):
            raise CheckpointError(
                f"{metadata.source}: metadata {_MERGES}[{index}] = {merge[:60]!r} is not two "
                "tokens of the vocabulary, joined by a space, that make a third"
            )
        pairs.append((left, right))
    return pairs


def _byte_level(metadata: GGUFMetadata):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    pre = metadata.get_str("tokenizer.ggml.pre", "default")
    if pre not in _PRE_TOKENIZERS:
        raise UnsupportedTokenizerError(
            f"GGUF byte-level pre-tokenizer {pre!r} is not supported "
            f"(supported: {', '.join(sorted(_PRE_TOKENIZERS))})"
        )
    alphabet = _byte_alphabet()
    spelled = set(alphabet.values())
    vocab: dict[str, int] = {}
    for index, (token, kind) in enumerate(
        zip(_tokens(metadata), _token_types(metadata), strict=True)
    ):
        # A normal token is stored in the byte alphabet; one that is not was written as
        # plain text, so spell its UTF-8 bytes. Added tokens match as they are written.
        if kind == NORMAL and not set(token) <= spelled:
            token = "".join(alphabet[b] for b in token.encode("utf-8"))
        vocab.setdefault(token, index)
    merges = _merges(metadata, vocab)
    tokenizer = Tokenizer(
        models.BPE(
            vocab,
            merges,
            fuse_unk=False,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            ignore_merges=pre in _IGNORE_MERGES,
        )
    )
    kind, regex = _PRE_TOKENIZERS[pre]
    if kind == "gpt2":
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif kind == "digits":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(regex), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    if pre in _NFC:
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's printable spelling of each byte (printable Latin-1 as itself, others shifted past 255)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    spelling = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in spelling:
            spelling[b] = chr(256 + extra)
            extra += 1
    return spelling


def _sentencepiece(metadata: GGUFMetadata):
    from tokenizers import Tokenizer, decoders, models, normalizers

    arch = metadata.get_str("general.architecture")
    types = _token_types(metadata)
    tokens = list(_tokens(metadata))
    if arch in _GEMMA:
        # Gemma files store whitespace-run tokens with real spaces; the text they match
        # has its spaces turned into "▁" first.
        known = set(tokens)
        tokens = [
            SPIECE_SPACE * len(t)
            if t and not t.strip(" ") and SPIECE_SPACE * len(t) not in known
            else t
            for t in tokens
        ]
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    if _MERGES in metadata:
        merges = _merges(metadata, vocab)
    else:
        if arch in _GEMMA:
            ranks = [-float(i) for i in range(len(tokens))]
        else:
            scores = metadata.get_float_list(_SCORES, length=len(tokens))
            if scores is None:
                # Without merges the scores are what orders them; no guessing.
                raise UnsupportedTokenizerError(
                    "the GGUF SentencePiece vocabulary has neither merges nor a score per token"
                )
            ranks = [float(score) for score in scores]
        merges = _merges_from_ranks(tokens, types, ranks, vocab)
    byte_fallback = all(f"<0x{b:02X}>" in vocab for b in range(256))
    unk_id = _token_id(metadata, "unknown_token_id", len(tokens))
    unk = None if unk_id is None else tokens[unk_id]
    tokenizer = Tokenizer(
        models.BPE(vocab, merges, unk_token=unk, fuse_unk=True, byte_fallback=byte_fallback)
    )
    steps = [decoders.Replace(SPIECE_SPACE, " ")]
    if byte_fallback:
        steps.append(decoders.ByteFallback())
    steps.append(decoders.Fuse())
    if metadata.get_bool("tokenizer.ggml.add_space_prefix", True):
        # SentencePiece's dummy prefix: "▁" before the text, even one that starts with a
        # space, and (as llama.cpp does) after each special token. A normalizer runs on
        # every piece of text between added tokens, so Prepend does both; the decoder
        # takes the first one off again.
        normalizer = [normalizers.Prepend(SPIECE_SPACE)]
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    else:
        normalizer = []
    tokenizer.normalizer = normalizers.Sequence(
        [*normalizer, normalizers.Replace(" ", SPIECE_SPACE)]
    )
    tokenizer.decoder = decoders.Sequence(steps)
    return tokenizer


def _merges_from_ranks(
    tokens: list[str], types: list[int], ranks: list[float], vocab: dict[str, int]
) -> list[tuple[str, str]]:
    """BPE merges implied by a SentencePiece vocabulary: every split of a piece into two
    pieces, best-ranked result first (longer left part first among equals).

    Control, unknown and byte tokens are neither merged nor merge parts: SentencePiece
    never builds them from text.

    Only cuts where both parts have the length of some piece are tried: trying every
    cut of every piece is quadratic in a piece's length, and a small file with one
    long token would take hours.
    """
    mergeable = {
        token
        for token, kind in zip(tokens, types, strict=True)
        if kind not in (UNKNOWN, CONTROL, BYTE)
    }
    lengths = sorted({len(token) for token in mergeable})
    has_length = set(lengths)
    candidates = []
    for token, rank in zip(tokens, ranks, strict=True):
        size = len(token)
        if token not in mergeable or size < 2:
            continue
        splits = []
        for cut in lengths:
            if cut >= size:
                break
            if size - cut in has_length and token[:cut] in mergeable and token[cut:] in mergeable:
                splits.append((token[:cut], token[cut:]))
        splits.sort(key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        candidates.extend((rank, left, right) for left, right in splits)
    # A stable sort, best first: ties keep the vocabulary's order.
    candidates.sort(key=lambda c: (c[0], len(c[1]), len(c[2])), reverse=True)
    return [(left, right) for _, left, right in candidates]


def _add_special_tokens(tokenizer, metadata: GGUFMetadata) -> None:
    """Control and unknown tokens as special added tokens, user-defined ones as plain
    added tokens: all are matched whole in the text before the model splits it."""
    from tokenizers import AddedToken

    tokens = _tokens(metadata)
    types = _token_types(metadata)
    vocab = tokenizer.get_vocab()
    special = [
        t for t, k in zip(tokens, types, strict=True) if k in (CONTROL, UNKNOWN) and t in vocab
    ]
    # The named special tokens are special whatever their type says.
    for key in _SPECIAL_IDS.values():
        token_id = _token_id(metadata, key, len(tokens))
        if token_id is not None and tokens[token_id] not in special:
            special.append(tokens[token_id])
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    chosen = set(special)
    user = [
        t
        for t, k in zip(tokens, types, strict=True)
        if k == USER_DEFINED and t in vocab and t not in chosen
    ]
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])


def _post_processor(metadata: GGUFMetadata):
    """BOS / EOS around each sequence as the file's ``add_*_token`` flags say, or none."""
    from tokenizers import processors

    add_bos, add_eos = _add_bos_eos(metadata)
    tokens = _tokens(metadata)

    def token(key: str) -> tuple[str, int] | None:
        token_id = _token_id(metadata, key, len(tokens))
        return None if token_id is None else (tokens[token_id], token_id)

    bos = token("bos_token_id") if add_bos else None
    eos = token("eos_token_id") if add_eos else None
    if bos is None and eos is None:
        return None
    head = [f"{bos[0]}:0"] if bos else []
    tail = [f"{eos[0]}:0"] if eos else []
    pair_head = [f"{bos[0]}:1"] if bos else []
    pair_tail = [f"{eos[0]}:1"] if eos else []
    return processors.TemplateProcessing(
        single=[*head, "$A:0", *tail],
        pair=[*head, "$A:0", *tail, *pair_head, "$B:1", *pair_tail],
        special_tokens=list(dict.fromkeys(t for t in (bos, eos) if t is not None)),
    )
