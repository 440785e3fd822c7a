"""Generate text from a built causal-LM or seq2seq package with ONNX Runtime.

A package is the directory ``mobius build`` writes: ``model.onnx`` (+ its external
data), ``config.json``, ``generation_config.json`` and the tokenizer files. The loop
follows the causal-LM contract of :mod:`mobius.tasks._causal_lm`: prefill the prompt
with empty caches, then feed one token at a time with the ``present.*`` outputs
returned as the next ``past_key_values.*`` inputs. Names, dtypes and shapes are read
from the ONNX Runtime session, so every cache kind (``key``/``value``, ``conv_state``,
``ssm_state``...) and both attention back ends (``--ep default`` and ``--ep cpu``)
run the same way. A seq2seq package (``encoder/`` and ``decoder/`` graphs, the contract
of :mod:`mobius.tasks._seq2seq`) runs in :class:`Seq2SeqGenerator`: the source is
encoded once, then the decoder steps from its start token; :func:`open_generator`
picks the class from the package's layout. Every generator, a domain package's too,
runs its tokens through one loop, :func:`decode_loop`, with logits processors
(:func:`suppress_tokens`, :func:`begin_suppress_tokens`, :func:`force_token`).

Example::

    from mobius.generate import TextGenerator

    generator = TextGenerator("out/")
    for piece in generator.stream("The capital of France is", max_new_tokens=32):
        print(piece, end="", flush=True)
    print(generator.stats.summary())

Needs ONNX Runtime: ``pip install mobius-core[run]``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mobius.chat_template import render_chat_template
from mobius.errors import MobiusError
from mobius.weights._resolve import SENTENCEPIECE_FILES

__all__ = [
    "ORT_FLOAT_TYPES",
    "GenerationStats",
    "LogitsProcessor",
    "PackageError",
    "RuntimeMissingError",
    "Seq2SeqGenerator",
    "TextGenerator",
    "TextStream",
    "begin_suppress_tokens",
    "check_tokenizer_files",
    "decode_loop",
    "force_token",
    "generate_text",
    "load_session",
    "load_tokenizer",
    "open_generator",
    "read_graph",
    "sample_next_token",
    "stream_to_stdout",
    "suppress_tokens",
    "top_k_filter",
    "top_p_filter",
]

_CACHE_INPUT = re.compile(r"past_key_values\.(\d+)\.(\w+)")
_DECODER_CACHE = re.compile(r"past_key_values\.\d+\.decoder\.(key|value)")  # seq2seq self-attention
#: ONNX Runtime element type -> numpy type, for the float types its Python API feeds.
ORT_FLOAT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
# Files that hold a vocabulary; tokenizer_config.json alone does not.
_TOKENIZER_FILES = ("tokenizer.json", *SENTENCEPIECE_FILES, "vocab.json", "vocab.txt")


#: What ``mobius generate`` takes for an audio file, not a text prompt.
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")


class PackageError(MobiusError):
    """The directory is not a runnable causal-LM package (missing, corrupt or another task)."""


class RuntimeMissingError(MobiusError):
    """ONNX Runtime is not installed."""


# --- sampling (pure numpy) ------------------------------------------------------------


def top_k_filter(logits: np.ndarray, k: int | None) -> np.ndarray:
    """``logits`` with everything below the ``k``-th largest value set to ``-inf``.

    Ties with the ``k``-th value are kept. ``k`` of ``None`` or 0 keeps everything.
    """
    logits = np.asarray(logits, dtype=np.float32)
    if not k or k >= logits.shape[-1]:
        return logits
    kth = np.partition(logits, -k)[-k]
    return np.where(logits < kth, -np.inf, logits).astype(np.float32)


def top_p_filter(logits: np.ndarray, p: float | None) -> np.ndarray:
    """``logits`` restricted to the nucleus: the most likely tokens whose probability sums to ``p``.

    A token is kept when the probability of the tokens ranked above it is still below
    ``p``, so the most likely token always survives. ``p`` of ``None`` or >= 1 keeps all.
    """
    logits = np.asarray(logits, dtype=np.float32)
    if p is None or p >= 1.0:
        return logits
    order = np.argsort(-logits, kind="stable")
    probs = _softmax(logits[order])
    before = np.cumsum(probs) - probs
    keep = np.zeros(logits.shape, dtype=bool)
    keep[order] = before < p
    keep[order[0]] = True
    return np.where(keep, logits, -np.inf).astype(np.float32)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - np.max(logits))
    return shifted / shifted.sum()


def sample_next_token(
    logits: np.ndarray,
    rng: np.random.Generator | None = None,
    *,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> int:
    """Pick the next token from one row of logits [vocab].

    Greedy (argmax) unless ``do_sample``; sampling divides by ``temperature``, then
    applies ``top_k`` and ``top_p`` in that order (as transformers does) and draws from
    ``rng``. A temperature of 0 means greedy.
    """
    logits = np.asarray(logits, dtype=np.float32).reshape(-1)
    if not do_sample or temperature == 0:
        return int(np.argmax(logits))
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if rng is None:
        rng = np.random.default_rng()
    scaled = top_p_filter(top_k_filter(logits / temperature, top_k), top_p)
    probs = _softmax(scaled.astype(np.float64))
    return int(rng.choice(probs.shape[0], p=probs))


# --- streaming detokenisation ---------------------------------------------------------


class TextStream:
    """Turns a growing list of token ids into text pieces, never splitting a character.

    Each step decodes all ids so far and emits what was added since the last piece.
    A decode that ends in U+FFFD is an incomplete multi-byte character (its other
    bytes come with the next tokens), so that text is held back until it resolves.
    """

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self._decode = decode
        self.ids: list[int] = []
        self._emitted = 0  # characters of the decoded text already returned
        self._text = ""

    def push(self, token: int) -> str:
        """Add one token; returns the new text that is safe to print (maybe empty)."""
        self.ids.append(int(token))
        self._text = self._decode(self.ids)
        if self._text.endswith("\ufffd"):
            return ""
        return self._take()

    def flush(self) -> str:
        """The text held back at the end (a character that never completed stays U+FFFD)."""
        return self._take()

    def _take(self) -> str:
        # A decode can rewrite earlier characters (rare: merging clean-up rules); emit
        # only past what was printed, since printed text cannot be taken back.
        piece = self._text[self._emitted :]
        self._emitted = max(self._emitted, len(self._text))
        return piece


# --- the package and its runtime ------------------------------------------------------


@dataclass
class GenerationStats:
    """Timings of the last generation.

    ``decode_tokens_per_s`` counts the tokens after the first one over the time since
    the first one: the decode rate, the prompt's prefill left out (it is in
    ``time_to_first_token_s``).
    """

    prompt_tokens: int = 0
    new_tokens: int = 0
    time_to_first_token_s: float = 0.0
    decode_time_s: float = 0.0
    stop_reason: str = ""  # "eos", "max_new_tokens" or "context_length"

    @property
    def decode_tokens_per_s(self) -> float:
        if self.new_tokens < 2 or self.decode_time_s <= 0:
            return float("nan")
        return (self.new_tokens - 1) / self.decode_time_s

    def summary(self) -> str:
        """One line: prompt length, new tokens, time to first token and decode rate."""
        rate = self.decode_tokens_per_s
        decode = "n/a" if rate != rate else f"{rate:.1f}"
        return (
            f"{self.new_tokens} new tokens ({self.stop_reason}), prompt {self.prompt_tokens} "
            f"tokens; time to first token {self.time_to_first_token_s * 1000:.0f} ms; "
            f"decode {decode} tokens/s (tokens after the first)"
        )


def _as_ids(value) -> list[int]:
    """Token ids of a config value: None, one id or a list of ids."""
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


# --- the decode loop every generator shares -------------------------------------------

#: A logits processor: ``(step, last, logits) -> logits``, or an ``int``: the token forced
#: at this step, taken without sampling. ``step`` counts the new tokens (0: the first),
#: ``last`` is True for the last one ``max_new_tokens`` allows; ``logits`` [vocab] float32
#: may be changed in place.
LogitsProcessor = Callable[[int, bool, np.ndarray], "np.ndarray | int"]


def suppress_tokens(ids) -> LogitsProcessor:
    """Never generate ``ids`` (an id, a list of ids or None: the config's ``suppress_tokens``)."""
    ids = _as_ids(ids)

    def process(step: int, last: bool, logits: np.ndarray) -> np.ndarray:
        logits[ids] = -np.inf
        return logits

    return process


def begin_suppress_tokens(ids) -> LogitsProcessor:
    """Do not generate ``ids`` as the first new token (the config's ``begin_suppress_tokens``)."""
    ids = _as_ids(ids)

    def process(step: int, last: bool, logits: np.ndarray) -> np.ndarray:
        if step == 0:
            logits[ids] = -np.inf
        return logits

    return process


def force_token(token: int, *, at: str) -> LogitsProcessor:
    """Force ``token`` as the ``"first"`` or the ``"last"`` new token, as transformers
    applies ``forced_bos_token_id`` and ``forced_eos_token_id``; a forced token draws no
    random number."""
    if at not in ("first", "last"):
        raise ValueError(f"at must be 'first' or 'last', not {at!r}")
    token = int(token)

    def process(step: int, last: bool, logits: np.ndarray) -> np.ndarray | int:
        return token if (step == 0 if at == "first" else last) else logits

    return process


def decode_loop(
    step: Callable[[list[int]], np.ndarray],
    prompt_ids: Sequence[int],
    *,
    stats: GenerationStats,
    max_new_tokens: int = 128,
    room: int | None = None,
    eos_token_ids: Iterable[int] = (),
    processors: Sequence[LogitsProcessor] = (),
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    started: float | None = None,
) -> Iterator[int]:
    """Yield new token ids until an ``eos_token_ids`` id or ``max_new_tokens``: the token loop.

    ``step(ids)`` runs the model on ``ids`` after everything fed before (first the
    prompt, then each new token) and returns the last position's logits [vocab]
    float32. The ``processors`` then change them (or force the token), in order;
    the token is the argmax, or with ``do_sample`` drawn from
    ``numpy.random.default_rng(seed)`` after ``temperature``, ``top_k`` and ``top_p``
    (:func:`sample_next_token`). ``room`` caps ``max_new_tokens`` where the model's
    positions run out (the stop reason is then ``"context_length"``). The end token
    is not yielded. ``stats`` gets the stop reason, the new-token count and the
    timings, counted from ``started`` (default: the first ``next``).
    """
    if started is None:
        started = time.perf_counter()
    stats.stop_reason = "max_new_tokens"
    if room is not None and max_new_tokens > room:
        max_new_tokens = room
        stats.stop_reason = "context_length"
    stop = set(eos_token_ids)
    rng = np.random.default_rng(seed)
    sampling = dict(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p)
    ids, first_at = list(prompt_ids), None
    for index in range(max_new_tokens):
        logits, token = step(ids), None
        for process in processors:
            logits = process(index, index == max_new_tokens - 1, logits)
            if isinstance(logits, int):
                token = logits
                break
        if token is None:
            token = sample_next_token(logits, rng, **sampling)
        now = time.perf_counter()
        if first_at is None:
            first_at = now
            stats.time_to_first_token_s = now - started
        stats.new_tokens += 1
        stats.decode_time_s = now - first_at
        if token in stop:
            stats.stop_reason = "eos"
            return
        yield token
        ids = [token]


def _read_json(path: Path) -> dict:
    """A package's JSON object file, ``{}`` when absent; PackageError naming it otherwise."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise PackageError(f"unreadable {path}: {exc}") from None
    if not isinstance(data, dict):
        raise PackageError(f"{path} is not a JSON object")
    return data


def _import_onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise RuntimeMissingError(
            "running a package needs ONNX Runtime: pip install mobius-core[run]"
        ) from None
    return onnxruntime


class _Generator:
    """What every package runner shares: the package's graphs and configs, the tokenizer,
    stop ids, sampling defaults, streaming.

    A subclass names its graphs in ``GRAPHS`` (attribute -> path in the package; each
    becomes an ONNX Runtime session), checks them in ``_check_contract`` and
    implements ``generate_ids``. ``threads`` sets ONNX Runtime's intra-op threads
    (default: its own choice); ``providers`` its execution providers (default: CPU).
    """

    GRAPHS: dict[str, str] = {}
    #: What the package is, for errors: "not a <contract> package built by mobius".
    contract = ""

    def __init__(
        self,
        package_dir: str | os.PathLike,
        *,
        threads: int | None = None,
        providers: Sequence[str] | None = None,
    ) -> None:
        self.package_dir = Path(package_dir)
        if not self.package_dir.is_dir():
            raise PackageError(f"no package directory at {self.package_dir}")
        paths = {name: self.package_dir / path for name, path in self.GRAPHS.items()}
        for path in paths.values():
            if not path.is_file():
                raise PackageError(
                    f"no {path.relative_to(self.package_dir).as_posix()} in {self.package_dir}: "
                    f"not a {self.contract} package built by mobius"
                )
        self.config = _read_json(self.package_dir / "config.json")
        self.generation_config = _read_json(self.package_dir / "generation_config.json")
        for name, path in paths.items():
            setattr(self, name, self._open_session(path, threads, providers))
        self._check_contract()
        self.stats = GenerationStats()
        self._tokenizer = None

    def _check_contract(self) -> None:
        raise NotImplementedError

    def _open_session(self, model_path: Path, threads, providers):
        ort = _import_onnxruntime()
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
        return load_session(model_path, options, providers)

    @staticmethod
    def _cache_outputs(past: list) -> list[str]:
        """The ``present.*`` output of each ``past_key_values.*`` input, once its type is fed."""
        for value in past:
            if value.type not in ORT_FLOAT_TYPES:
                raise PackageError(
                    f"{value.name} is {value.type}: ONNX Runtime's Python API feeds only "
                    "float32 and float16 caches; build with --dtype f32 or f16"
                )
        return [value.name.replace("past_key_values.", "present.", 1) for value in past]

    def _run_loop(
        self, step, prompt: list[int], *, stats, started, room, eos_token_ids, **options
    ) -> Iterator[int]:
        """:func:`decode_loop` over ``step`` with the package's stop ids unless given."""
        if eos_token_ids is None:
            eos_token_ids = self.eos_token_ids
        return decode_loop(
            step,
            prompt,
            stats=stats,
            started=started,
            room=room,
            eos_token_ids=eos_token_ids,
            **options,
        )

    @property
    def tokenizer(self):
        """The package's tokenizer (``transformers.AutoTokenizer``), loaded on first use."""
        if self._tokenizer is None:
            if not any((self.package_dir / name).is_file() for name in _TOKENIZER_FILES):
                raise PackageError(
                    f"no tokenizer files in {self.package_dir} (tokenizer.json, "
                    "tokenizer.model, vocab.json...): build from a checkpoint that has them"
                )
            self._tokenizer = load_tokenizer(self.package_dir)
        return self._tokenizer

    @property
    def eos_token_ids(self) -> list[int]:
        """End-of-sequence ids: generation_config.json's and config.json's, else the tokenizer's."""
        ids = _as_ids(self.generation_config.get("eos_token_id"))
        ids += [i for i in _as_ids(self.config.get("eos_token_id")) if i not in ids]
        if not ids and self._tokenizer is not None and self._tokenizer.eos_token_id is not None:
            ids = [int(self._tokenizer.eos_token_id)]
        return ids

    def sampling_defaults(self) -> dict:
        """``do_sample``, ``temperature``, ``top_k`` and ``top_p`` from generation_config.json."""
        config = self.generation_config
        return {
            "do_sample": bool(config.get("do_sample", False)),
            "temperature": float(config.get("temperature", 1.0) or 1.0),
            "top_k": int(config.get("top_k", 50) or 0),
            "top_p": float(config.get("top_p", 1.0) or 1.0),
        }

    # -- prompts ---------------------------------------------------------------------

    def encode_prompt(
        self, prompt: str, *, chat_template: bool = True, system: str | None = None
    ) -> list[int]:
        """Token ids of ``prompt``: through the tokenizer's chat template when it has one.

        With ``chat_template=False`` (or a tokenizer without a template) the text is
        tokenized as is, with the tokenizer's special tokens (BOS). A ``system``
        message needs a chat template.
        """
        tokenizer = self.tokenizer
        if chat_template and getattr(tokenizer, "chat_template", None):
            messages = [{"role": "user", "content": prompt}]
            if system is not None:
                messages.insert(0, {"role": "system", "content": system})
            text = render_chat_template(
                tokenizer, messages, source=self.package_dir, add_generation_prompt=True
            )
            # The template writes the special tokens (BOS included) itself.
            return list(tokenizer(text, add_special_tokens=False)["input_ids"])
        if system is not None:
            raise MobiusError(
                "a system message needs a chat template"
                + ("" if chat_template else "; drop --no-chat-template")
                + ("" if getattr(tokenizer, "chat_template", None) else " (the tokenizer has none)")
            )
        return list(tokenizer(prompt)["input_ids"])

    def stream(
        self,
        prompt: str,
        *,
        chat_template: bool = True,
        system: str | None = None,
        **options,
    ) -> Iterator[str]:
        """Yield text pieces as they are generated from ``prompt``.

        Keyword ``options`` are those of :meth:`generate_ids`. Special tokens are left
        out of the text; a piece never ends inside a multi-byte character.
        """
        ids = self.encode_prompt(prompt, chat_template=chat_template, system=system)
        yield from self.text_pieces(self.generate_ids(ids, **options))

    def text_pieces(self, tokens: Iterable[int]) -> Iterator[str]:
        """The text of ``tokens`` as they come, special tokens left out: what every runner streams."""
        tokenizer = self.tokenizer
        text = TextStream(lambda new: tokenizer.decode(new, skip_special_tokens=True))
        for token in tokens:
            piece = text.push(token)
            if piece:
                yield piece
        rest = text.flush()
        if rest:
            yield rest


class TextGenerator(_Generator):
    """A causal-LM package (``model.onnx``) loaded in ONNX Runtime, ready to generate.

    ``package_dir`` is what ``mobius build`` wrote. The tokenizer is loaded on first
    use, so token-id generation (:meth:`generate_ids`) works without one.
    """

    GRAPHS = {"session": "model.onnx"}
    contract = "causal-LM"

    def _check_contract(self) -> None:
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        self._past = [i for name, i in inputs.items() if _CACHE_INPUT.fullmatch(name)]
        if "input_ids" not in inputs or "logits" not in outputs or not self._past:
            raise PackageError(
                f"{self.package_dir} is not a causal-LM package: its graph needs input_ids, "
                f"past_key_values.* inputs and a logits output (it has inputs "
                f"{sorted(inputs)[:6]} and outputs {outputs[:6]})"
            )
        known = {"input_ids", "attention_mask", "position_ids"} | {i.name for i in self._past}
        unknown = sorted(set(inputs) - known)
        if unknown:
            raise PackageError(
                f"the graph in {self.package_dir} has inputs a causal-LM loop cannot feed: "
                f"{unknown[:5]} (a --no-weights build, or another task)"
            )
        for past in self._past:
            present = past.name.replace("past_key_values.", "present.", 1)
            if present not in outputs:
                raise PackageError(f"the graph has {past.name} but no {present} output")
        self._inputs = set(inputs)
        self._present_names = self._cache_outputs(self._past)
        self._share_buffers = self._cache_shared_in_place()

    def _cache_shared_in_place(self) -> bool:
        """Whether the build marked the cache as updated in place (genai_config.json's
        ``past_present_share_buffer``: every cache tensor is read and written only by
        GroupQueryAttention) and each cache has a ``[batch, heads, length, head_size]``
        shape with fixed heads and head size."""
        search = _read_json(self.package_dir / "genai_config.json").get("search")
        if not (isinstance(search, dict) and search.get("past_present_share_buffer") is True):
            return False
        return all(
            len(past.shape) == 4 and all(isinstance(d, int) and d > 0 for d in past.shape[1::2])
            for past in self._past
        )

    # -- the loop --------------------------------------------------------------------

    def _empty_cache(self) -> dict[str, np.ndarray]:
        cache = {}
        for past in self._past:
            # Batch (the first dim) is 1; every other symbolic dim is the past length, 0.
            shape = [
                d if isinstance(d, int) else (1 if axis == 0 else 0)
                for axis, d in enumerate(past.shape)
            ]
            cache[past.name] = np.zeros(shape, dtype=ORT_FLOAT_TYPES[past.type])
        return cache

    def _step(self, ids: np.ndarray, start: int, cache: dict) -> tuple[np.ndarray, dict]:
        """Run ``ids`` [1, n] at positions ``start..start+n-1``; returns last logits and cache."""
        total = start + ids.shape[1]
        feeds = {"input_ids": ids, **cache}
        if "attention_mask" in self._inputs:
            feeds["attention_mask"] = np.ones((1, total), dtype=np.int64)
        if "position_ids" in self._inputs:
            feeds["position_ids"] = np.arange(start, total, dtype=np.int64)[None, :]
        logits, *present = self.session.run(["logits", *self._present_names], feeds)
        new_cache = {p.name: value for p, value in zip(self._past, present, strict=True)}
        return logits[0, -1].astype(np.float32), new_cache

    def generate_ids(
        self,
        prompt_ids: Sequence[int],
        *,
        max_new_tokens: int = 128,
        eos_token_ids: Iterable[int] | None = None,
        **sampling,
    ) -> Iterator[int]:
        """Yield new token ids one by one; stops after an end-of-sequence id or ``max_new_tokens``.

        The sequence never grows past config.json's ``max_position_embeddings``. The
        end-of-sequence token itself is not yielded. ``eos_token_ids`` overrides
        the package's (an empty list never stops early). ``sampling`` options are
        :func:`decode_loop`'s (``do_sample``, ``temperature``, ``top_k``, ``top_p``,
        ``seed``): the same seed gives the same tokens. Timings land in :attr:`stats`
        when the iterator finishes.
        """
        prompt = [int(token) for token in prompt_ids]
        if not prompt:
            raise MobiusError("the prompt is empty")
        stats = self.stats = GenerationStats(prompt_tokens=len(prompt))
        started = time.perf_counter()
        # Positions past max_position_embeddings are outside what the graph was built for.
        context = int(self.config.get("max_position_embeddings") or 0)
        if context and len(prompt) > context:
            raise MobiusError(
                f"the prompt has {len(prompt)} tokens; the model takes at most {context}"
            )
        cache, position = self._empty_cache(), 0
        if self._share_buffers:
            shared = _SharedCacheStep(self, capacity=len(prompt) + max(int(max_new_tokens), 1))

        def step(ids: list[int]) -> np.ndarray:
            nonlocal cache, position
            batch = np.asarray([ids], dtype=np.int64)
            if self._share_buffers:
                logits = shared(batch, position)
            else:
                logits, cache = self._step(batch, position, cache)
            position += len(ids)
            return logits

        yield from self._run_loop(
            step,
            prompt,
            stats=stats,
            started=started,
            room=context - len(prompt) if context else None,
            eos_token_ids=eos_token_ids,
            max_new_tokens=max_new_tokens,
            **sampling,
        )


class _SharedCacheStep:
    """Causal-LM steps with each cache tensor in one preallocated buffer, bound as both
    its ``past_key_values.*`` input and its ``present.*`` output.

    GroupQueryAttention then writes the new keys and values into the buffer in place,
    as onnxruntime-genai runs it (``past_present_share_buffer``): a step copies no
    cache and allocates no cache outputs. ``capacity`` is the most positions the
    generation fills (prompt plus new tokens).
    """

    def __init__(self, generator: TextGenerator, capacity: int) -> None:
        ort = _import_onnxruntime()
        self.generator = generator
        self.binding = generator.session.io_binding()
        self.binding.bind_output("logits")  # bound first: get_outputs()[0]
        self.buffers = []
        for past, present in zip(generator._past, generator._present_names, strict=True):
            _, heads, _, head_size = past.shape
            shape = (1, heads, capacity, head_size)
            buffer = ort.OrtValue.ortvalue_from_numpy(
                np.zeros(shape, dtype=ORT_FLOAT_TYPES[past.type])
            )
            self.binding.bind_ortvalue_input(past.name, buffer)
            self.binding.bind_ortvalue_output(present, buffer)
            self.buffers.append(buffer)  # the binding does not keep them alive

    def __call__(self, ids: np.ndarray, start: int) -> np.ndarray:
        """Run ``ids`` [1, n] at positions ``start..start+n-1``; returns the last logits."""
        total = start + ids.shape[1]
        feeds = {"input_ids": ids}
        if "attention_mask" in self.generator._inputs:
            feeds["attention_mask"] = np.ones((1, total), dtype=np.int64)
        if "position_ids" in self.generator._inputs:
            feeds["position_ids"] = np.arange(start, total, dtype=np.int64)[None, :]
        for name, value in feeds.items():
            self.binding.bind_cpu_input(name, value)
        self.binding.bind_output("logits")  # anew: the last run's shape would be kept
        try:
            self.generator.session.run_with_iobinding(self.binding)
        except Exception as exc:  # a graph whose cache is not GroupQueryAttention's alone
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PackageError(
                f"{self.generator.package_dir}: genai_config.json says the cache is updated in "
                f"place, but ONNX Runtime refused it: {message}"
            ) from None
        logits = self.binding.get_outputs()[0].numpy()
        return logits[0, -1].astype(np.float32)


class Seq2SeqGenerator(_Generator):
    """An encoder–decoder package (``encoder/`` and ``decoder/`` graphs) in ONNX Runtime.

    The source is encoded once, which also yields every layer's cross-attention
    cache; the decoder then starts from ``decoder_start_token_id`` and runs one token
    per step through its self-attention cache. ``forced_bos_token_id`` (the target
    language of mBART-50 or M2M-100) and ``forced_eos_token_id`` from the package's
    configs are applied as transformers' ``generate`` applies them.
    """

    GRAPHS = {"encoder": "encoder/model.onnx", "decoder": "decoder/model.onnx"}
    contract = "seq2seq"
    #: The encoder graph's inputs, and the decoder's source inputs besides the cross cache.
    encoder_inputs = frozenset({"input_ids", "attention_mask"})
    decoder_source_inputs = frozenset({"encoder_attention_mask"})

    def _check_contract(self) -> None:
        encoder_inputs = {i.name for i in self.encoder.get_inputs()}
        self._encoder_outputs = [o.name for o in self.encoder.get_outputs()]
        decoder_inputs = {i.name: i for i in self.decoder.get_inputs()}
        self._self_cache = [i for n, i in decoder_inputs.items() if _DECODER_CACHE.fullmatch(n)]
        cross = {n.replace("present.", "past_key_values.", 1) for n in self._encoder_outputs}
        cross.discard("last_hidden_state")
        expected = {
            "input_ids",
            *self.decoder_source_inputs,
            *cross,
            *(i.name for i in self._self_cache),
        }
        if (
            encoder_inputs != self.encoder_inputs
            or set(decoder_inputs) != expected
            or not self._self_cache
            or "logits" not in {o.name for o in self.decoder.get_outputs()}
        ):
            raise PackageError(
                f"{self.package_dir} does not follow the {self.contract} contract: encoder "
                f"inputs {sorted(encoder_inputs)}, decoder inputs {sorted(decoder_inputs)[:6]}..."
            )
        self._present_names = self._cache_outputs(self._self_cache)

    def _cross_cache(self, encoded: list) -> dict[str, np.ndarray]:
        """The decoder's ``past_key_values.{i}.encoder.*`` feeds from the encoder's outputs."""
        return {
            name.replace("present.", "past_key_values.", 1): value
            for name, value in zip(self._encoder_outputs, encoded, strict=True)
            if name.startswith("present.")
        }

    def _empty_cache(self) -> dict[str, np.ndarray]:
        """The self-attention cache of the first step: no past positions."""
        return {
            p.name: np.zeros((1, p.shape[1], 0, p.shape[3]), dtype=ORT_FLOAT_TYPES[p.type])
            for p in self._self_cache
        }

    def _setting(self, key: str):
        """``key`` from generation_config.json, else config.json."""
        value = self.generation_config.get(key)
        return self.config.get(key) if value is None else value

    def _decode(self, ids: list[int], source: dict, cache: dict) -> tuple[np.ndarray, dict]:
        """One decoder run on ``ids``: the last position's logits [vocab] and the next cache.

        ``source`` holds the decoder's source feeds: the cross caches and, where the
        decoder takes it, ``encoder_attention_mask``.
        """
        feeds = {"input_ids": np.asarray([ids], np.int64), **source, **cache}
        logits, *present = self.decoder.run(["logits", *self._present_names], feeds)
        cache = {p.name: value for p, value in zip(self._self_cache, present, strict=True)}
        return logits[0, -1].astype(np.float32), cache

    def decoder_step(self, source: dict) -> Callable[[list[int]], np.ndarray]:
        """A ``step`` for :func:`decode_loop`: the decoder over ``source`` (see :meth:`_decode`),
        starting from an empty self-attention cache."""
        cache = self._empty_cache()

        def step(ids: list[int]) -> np.ndarray:
            nonlocal cache
            logits, cache = self._decode(ids, source, cache)
            return logits

        return step

    def decoder_prompt(self, start: int) -> list[int]:
        """The ids the decoder starts from: the config's ``decoder_start_token_id``. A family
        whose decoder is prompted further (a target-language token) extends it."""
        return [start]

    def generate_ids(
        self,
        prompt_ids: Sequence[int],
        *,
        max_new_tokens: int = 128,
        eos_token_ids: Iterable[int] | None = None,
        **sampling,
    ) -> Iterator[int]:
        """Yield the decoder's new token ids; the options are those of :meth:`TextGenerator.generate_ids`.

        The decoder start token is not yielded, nor the end-of-sequence token that
        stops the loop. The source may not be longer than ``max_position_embeddings``
        where the config has one (learned or fixed position tables).
        """
        source = np.asarray([list(prompt_ids)], dtype=np.int64)
        if source.shape[1] == 0:
            raise MobiusError("the prompt is empty")
        context = int(self.config.get("max_position_embeddings") or 0)
        if context and source.shape[1] > context:
            raise MobiusError(
                f"the source has {source.shape[1]} tokens; the model takes at most {context}"
            )
        start = self._setting("decoder_start_token_id")
        if start is None:
            raise PackageError("config.json has no decoder_start_token_id: cannot start decoding")
        processors = []
        forced_bos = self._setting("forced_bos_token_id")
        if forced_bos is not None:
            processors.append(force_token(forced_bos, at="first"))
        forced_eos = _as_ids(self._setting("forced_eos_token_id"))
        if forced_eos:
            processors.append(force_token(forced_eos[0], at="last"))
        stats = self.stats = GenerationStats(prompt_tokens=source.shape[1])
        started = time.perf_counter()
        mask = np.ones_like(source)
        encoded = self.encoder.run(None, {"input_ids": source, "attention_mask": mask})
        cross = {"encoder_attention_mask": mask, **self._cross_cache(encoded)}
        prompt = self.decoder_prompt(int(start))
        yield from self._run_loop(
            self.decoder_step(cross),
            prompt,
            stats=stats,
            started=started,
            room=context - len(prompt) if context else None,  # positions share the table
            eos_token_ids=eos_token_ids,
            max_new_tokens=max_new_tokens,
            processors=processors,
            **sampling,
        )


def open_generator(package_dir: str | os.PathLike, **options) -> _Generator:
    """The generator a package's layout calls for: :class:`Seq2SeqGenerator` when it has
    ``encoder/`` and ``decoder/`` graphs, else :class:`TextGenerator`.

    Packages of other kinds are run by the runners domain packages register
    (``mobius generate`` asks them first).
    """
    package = Path(package_dir)
    if (package / "encoder" / "model.onnx").is_file() or (package / "decoder").is_dir():
        return Seq2SeqGenerator(package, **options)
    return TextGenerator(package, **options)


def stream_to_stdout(generator: _Generator, prompt: str, options: dict) -> int:
    """What ``mobius generate`` does with a text generator: stream, then the stats on stderr.

    ``options`` are the parsed ``mobius generate`` options by dest (``max_new_tokens``,
    ``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``seed``, ``no_chat_template``,
    ``system``). Sampling values not given come from the package's generation config.
    Text goes to stdout, so ``--output`` is refused.
    """
    refuse_output_file(getattr(generator, "package_dir", "the package"), options)
    sampling = generator.sampling_defaults()
    explicit = {k: options.get(k) for k in ("temperature", "top_k", "top_p")}
    do_sample = options.get("do_sample") or any(v is not None for v in explicit.values())
    chosen = {k: sampling[k] if v is None else v for k, v in explicit.items()}
    if chosen["temperature"] < 0 or not 0 < chosen["top_p"] <= 1 or chosen["top_k"] < 0:
        raise MobiusError("need --temperature >= 0, 0 < --top-p <= 1 and --top-k >= 0")
    pieces = generator.stream(
        prompt,
        chat_template=not options.get("no_chat_template"),
        system=options.get("system"),
        max_new_tokens=options.get("max_new_tokens", 128),
        do_sample=do_sample,
        seed=options.get("seed"),
        **chosen,
    )
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()  # stream: each piece appears as soon as it is decoded
    sys.stdout.write("\n")
    sys.stdout.flush()
    print(generator.stats.summary(), file=sys.stderr)
    return 0


def run_text_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """Core's ``mobius generate`` runner: causal-LM and seq2seq packages (see :func:`open_generator`)."""
    _refuse_plugin_options(package_dir, options)
    refuse_output_file(package_dir, options)  # before the package is opened
    if prompt.lower().endswith(AUDIO_SUFFIXES):
        raise MobiusError(
            f"{package_dir} is not a speech-to-text package: it cannot transcribe {prompt}"
        )
    generator = open_generator(package_dir, threads=options.get("threads"))
    return stream_to_stdout(generator, prompt, options)


def load_session(model_path: str | os.PathLike, options=None, providers=None):
    """An ONNX Runtime session of the graph at ``model_path`` (on the CPU unless
    ``providers`` name others), with ``options`` (an ``onnxruntime.SessionOptions``).

    Every runner opens its graphs here, so a package with a corrupt graph is refused
    the same way everywhere.

    Raises:
        RuntimeMissingError: ONNX Runtime is not installed.
        PackageError: ONNX Runtime cannot load the file (truncated, not ONNX, its
            external data missing or short, an unknown op); one line naming the file.
    """
    ort = _import_onnxruntime()
    try:
        return ort.InferenceSession(
            str(model_path),
            options or ort.SessionOptions(),
            providers=list(providers or ["CPUExecutionProvider"]),
        )
    except Exception as exc:  # ORT raises its own pybind classes: corrupt, truncated, bad ops
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PackageError(f"ONNX Runtime cannot load {model_path}: {message}") from None


def read_graph(model_path: str | os.PathLike):
    """The ``onnx.ModelProto`` at ``model_path`` without its weights (they stay in the
    external data file): its inputs, outputs, nodes and metadata, for a runner to tell
    what the package is.

    Raises:
        PackageError: The file is missing or is not an ONNX model (garbage, truncated).
    """
    import onnx
    from google.protobuf.message import DecodeError

    try:
        return onnx.load(str(model_path), load_external_data=False)
    except (OSError, DecodeError, ValueError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise PackageError(f"{model_path} is not a readable ONNX model: {reason}") from None


def _check_bpe_merges(path: Path, model: dict) -> None:
    """A BPE model's merges must join tokens of its vocabulary into one: ``tokenizers``
    panics (a Rust abort, not an error) on a merge whose result it cannot find."""
    vocab, merges = model.get("vocab"), model.get("merges", [])
    if not isinstance(vocab, dict) or not isinstance(merges, list):
        raise PackageError(f"{path}: model.vocab must be an object and model.merges a list")
    prefix = model.get("continuing_subword_prefix") or ""
    prefix = prefix if isinstance(prefix, str) else ""
    for index, merge in enumerate(merges):
        pair = merge.split(" ", 1) if isinstance(merge, str) else merge
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(part, str) and part in vocab for part in pair)
        ):
            raise PackageError(f"{path}: model.merges[{index}] is not two tokens of the vocabulary")
        left, right = pair
        if not right.startswith(prefix):  # tokenizers cuts the prefix off the right part
            raise PackageError(
                f"{path}: model.merges[{index}] does not start its second part with the "
                f"continuing-subword prefix {prefix!r}"
            )
        joined = left + right[len(prefix) :]
        if joined not in vocab:
            raise PackageError(
                f"{path}: model.merges[{index}] makes {joined[:60]!r}, which is not in the vocabulary"
            )


def check_tokenizer_files(package_dir: str | os.PathLike) -> None:
    """Refuse a package's ``tokenizer.json`` / ``tokenizer_config.json`` that would crash the
    loaders rather than fail: not JSON, not an object, ``added_tokens`` missing or not a list
    of ``{id: int, content: str}``, a BPE merge outside the vocabulary.

    Raises:
        PackageError: One line naming the file and what is wrong.
    """
    directory = Path(package_dir)
    _read_json(directory / "tokenizer_config.json")
    path = directory / "tokenizer.json"
    if not path.is_file():
        return
    tokenizer = _read_json(path)
    added = tokenizer.get("added_tokens")
    if not isinstance(added, list):
        raise PackageError(f"{path}: added_tokens must be a list (of {{id, content}} objects)")
    for index, token in enumerate(added):
        if not (
            isinstance(token, dict)
            and isinstance(token.get("id"), int)
            and not isinstance(token.get("id"), bool)
            and token["id"] >= 0
            and isinstance(token.get("content"), str)
        ):
            raise PackageError(
                f"{path}: added_tokens[{index}] is not an object with an id (an integer "
                "from 0) and a content (a string)"
            )
    model = tokenizer.get("model")
    if not isinstance(model, dict):
        raise PackageError(f"{path}: model must be an object")
    if model.get("type") == "BPE":
        _check_bpe_merges(path, model)


def load_tokenizer(package_dir: str | os.PathLike):
    """The package's tokenizer (``transformers.AutoTokenizer``, never the repository's code).

    Raises:
        PackageError: it cannot be loaded; the message is one line naming the package.
    """
    from transformers import AutoTokenizer

    check_tokenizer_files(package_dir)
    try:
        return AutoTokenizer.from_pretrained(str(package_dir), trust_remote_code=False)
    except Exception as exc:
        # The files are a stranger's: transformers raises KeyError, AttributeError...
        # on odd values, and ``tokenizers`` a bare Exception for anything its Rust
        # deserializer refuses. Each is the files' fault, not a bug of mobius.
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise PackageError(f"cannot load the tokenizer of {package_dir}: {reason}") from None


def refuse_output_file(package_dir: str | os.PathLike, options: dict) -> None:
    """Refuse ``mobius generate --output`` for a runner whose output is text (on stdout)."""
    if options.get("output_file"):
        raise MobiusError(
            f"--output is for packages that write a file (images, audio); {package_dir} "
            "generates text, which goes to stdout"
        )


def _refuse_plugin_options(package_dir: str | os.PathLike, options: dict) -> None:
    """Refuse a domain runner's ``mobius generate`` option set for a package core runs, naming it."""
    from mobius._registry import registry

    for option in registry.options("generate"):
        if option.dest in options and options[option.dest] != option.default:
            flag = option.flags[0]
            if option.group:  # the kind of package it is for, as its --help section names it
                raise MobiusError(f"{flag} applies to {option.group}; {package_dir} is not one")
            raise MobiusError(
                f"{flag} does not apply to {package_dir}: no runner that takes it accepts it"
            )


def generate_text(package_dir: str | os.PathLike, prompt: str, **options) -> str:
    """The whole text generated from ``prompt`` by the package at ``package_dir``.

    ``options`` are those of :meth:`TextGenerator.stream` (``max_new_tokens``,
    ``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``seed``, ``chat_template``,
    ``system``...).
    """
    return "".join(open_generator(package_dir).stream(prompt, **options))
