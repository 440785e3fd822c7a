"""Chat templates, rendered with limits: a template is a stranger's program.

A tokenizer's chat template is Jinja code from the checkpoint. transformers runs it
in Jinja's sandbox, which stops it from reaching Python's internals but not from
looping for hours or building a ten-gigabyte string. :func:`render_chat_template`
renders it as transformers' ``apply_chat_template(..., tokenize=False)`` does (the
same variables, filters and globals, so the text is the same) with three limits:

- every string or list the template builds (``*``, ``+``, ``~``, ``%``, ``join``,
  ``replace``, ``format``, a width or count given to a filter or method) and the
  rendered text stay within :data:`MAX_CHARS`;
- a number raised to a power or multiplied stays within :data:`MAX_INT_BITS` bits;
- the render stops after :data:`TIME_LIMIT` seconds (a worker thread, interrupted).

A template's own ``raise_exception(message)`` (real templates use it to refuse a
message order) is reported as that message. Every failure is a one-line
:class:`~mobius.errors.ChatTemplateError`.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from mobius.errors import ChatTemplateError

#: The most characters of any string (or items of any list) a template builds, and of its text.
MAX_CHARS = 1 << 24
#: The most bits of a number a template computes with ``*`` or ``**``.
MAX_INT_BITS = 1 << 16
#: Seconds a render may take; renders of real templates take milliseconds.
TIME_LIMIT = 5.0

_WIDTH = re.compile(r"\d+")


class _OverLimit(Exception):
    """A template step would go over a limit (reported as the template's failure)."""


class _Refused(Exception):
    """The template called ``raise_exception(message)``."""


class _Stopped(BaseException):
    """Raised inside the worker thread when the render runs out of time."""


def _size(value: Any) -> int | None:
    """The length of a string or sequence the limits apply to, else None."""
    return len(value) if isinstance(value, (str, list, tuple)) else None


def _check_size(size: int, what: str) -> None:
    if size > MAX_CHARS:
        raise _OverLimit(f"{what} would make {size} characters or items, over {MAX_CHARS}")


def _power_bits(base: Any, exponent: Any) -> int:
    """About how many bits ``base ** exponent`` takes (0 when it is not an int that grows)."""
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (base, exponent))
    if not ints or exponent <= 0 or abs(base) <= 1:  # 0, 1 and -1 stay small
        return 0
    return base.bit_length() * exponent


def _check_counts(args: Iterable[Any], what: str) -> None:
    """Refuse an int argument (a width, a count) larger than :data:`MAX_CHARS`."""
    for value in args:
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_CHARS:
            raise _OverLimit(f"{what} is given {value}, over {MAX_CHARS}")


def _check_format(text: Any, what: str) -> None:
    """Refuse a format string whose field widths or precisions exceed :data:`MAX_CHARS`."""
    if isinstance(text, str):
        _check_counts((int(m) for m in _WIDTH.findall(text) if len(m) > 7), what)


def _joined_size(pieces: Iterable[Any], separator: str = "") -> int:
    """The length of ``separator.join(pieces)`` (refused past :data:`MAX_CHARS` as it grows)."""
    if isinstance(pieces, str):
        total = len(pieces) + max(len(pieces) - 1, 0) * len(separator)
        _check_size(total, "joining strings")
        return total
    total = 0
    for count, piece in enumerate(pieces):
        total += len(str(piece)) + (len(separator) if count else 0)
        _check_size(total, "joining strings")
    return total


def _text_and_strings(args: Sequence[Any]) -> tuple[str, list[str]]:
    """A filter's input text and its other string arguments (Jinja may pass a context first)."""
    values = [v for v in args if isinstance(v, (str, int, float, list, tuple, dict)) or v is None]
    text = values[0] if values and isinstance(values[0], str) else ""
    return text, [v for v in values[1:] if isinstance(v, str)]


def _check_filter(name: str, args: Sequence[Any], kwargs: dict) -> None:
    """Refuse a filter call whose result would be over :data:`MAX_CHARS`, before it runs."""
    _check_counts([*args, *kwargs.values()], f"filter {name}")
    text, strings = _text_and_strings(args)
    strings += [v for v in kwargs.values() if isinstance(v, str)]
    if name == "format":
        _check_format(text, "filter format")
    elif name == "replace" and len(strings) >= 2:
        old, new = strings[:2]
        count = text.count(old) if old else len(text) + 1
        _check_size(len(text) + count * max(len(new) - len(old), 0), "filter replace")
    elif name in ("indent", "wordwrap"):  # a string added to every line
        longest = max((len(v) for v in strings), default=0)
        _check_size(len(text) * (1 + longest) + longest, f"filter {name}")
    elif name == "tojson":
        # tojson(value, ensure_ascii, indent, ...): the indent goes before every line
        indent = kwargs.get("indent", args[2] if len(args) > 2 else None)
        if isinstance(indent, (int, str)) and not isinstance(indent, bool):
            width = indent if isinstance(indent, int) else len(indent)
            if width > 256:
                raise _OverLimit(f"filter tojson is given an indent of {width}, over 256")


def _bounded_filter(name: str, function: Callable) -> Callable:
    """A Jinja filter that refuses oversized results: widths and counts before it runs, its
    output after (so that no chain of filters grows past the limit)."""

    @functools.wraps(function)  # keeps jinja's pass_context/pass_environment marker
    def bounded(*args, **kwargs):
        if name == "join":  # the sequence may be a generator: read it once, then measure
            args = [list(a) if _is_iterator(a) else a for a in args]
        _check_filter(name, args, kwargs)
        if name == "join":
            values = [a for a in args if isinstance(a, (str, list, tuple))]
            separator = kwargs.get("d", values[1] if len(values) > 1 else "")
            if values and isinstance(separator, str):
                _joined_size(values[0], separator)
        result = function(*args, **kwargs)
        if _size(result) is not None:
            _check_size(len(result), f"filter {name}")
        return result

    return bounded


def _is_iterator(value: Any) -> bool:
    return hasattr(value, "__next__") and hasattr(value, "__iter__")


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    """transformers' ``tojson`` filter: plain JSON, non-ASCII kept (Jinja's would escape HTML)."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: Any) -> None:
    raise _Refused(str(message))


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@functools.lru_cache(maxsize=1)
def _environment():
    """The bounded sandbox, made once (Jinja is imported on first use)."""
    import jinja2
    from jinja2 import nodes
    from jinja2.compiler import CodeGenerator
    from jinja2.ext import Extension, loopcontrols
    from jinja2.runtime import markup_join, str_join
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import Namespace

    class GenerationTag(Extension):
        """``{% generation %}...{% endgeneration %}``: transformers marks assistant text with it;
        rendering it is rendering its body."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_body")
            return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class SafeNamespace(Namespace):
        """``namespace()`` that refuses private (``_``) attribute names."""

        def __init__(*args, **kwargs):  # Namespace's signature: ``self`` may be a keyword
            self, args = args[0], args[1:]
            fields = dict(*args, **kwargs)
            for name in fields:
                SafeNamespace._check(name)
            Namespace.__init__(self, fields)

        def __setitem__(self, name, value):
            SafeNamespace._check(name)
            Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} is private")

    class BoundedCodeGenerator(CodeGenerator):
        """Jinja's compiler, but ``a ~ b`` goes through ``BoundedEnvironment.bounded_concat``."""

        def visit_Concat(self, node, frame):
            self.write("environment.bounded_concat(context, (")
            for argument in node.nodes:
                self.visit(argument, frame)
                self.write(", ")
            self.write("))")

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        code_generator_class = BoundedCodeGenerator
        intercepted_binops = frozenset({"*", "+", "%", "**"})

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                sizes = (_size(left), _size(right))
                if sizes[0] is not None and isinstance(right, int):
                    _check_size(sizes[0] * right, "'*'")
                elif sizes[1] is not None and isinstance(left, int):
                    _check_size(sizes[1] * left, "'*'")
                elif isinstance(left, int) and isinstance(right, int):
                    self._check_bits(left.bit_length() + right.bit_length())
            elif operator == "+":
                sizes = (_size(left), _size(right))
                if None not in sizes:
                    _check_size(sizes[0] + sizes[1], "'+'")
            elif operator == "%":
                _check_format(left, "'%'")
                values = right if isinstance(right, (tuple, list)) else (right,)
                _check_counts(values, "'%'")
            elif operator == "**":
                self._check_bits(_power_bits(left, right))
            return super().call_binop(context, operator, left, right)

        @staticmethod
        def _check_bits(bits: int) -> None:
            if bits > MAX_INT_BITS:
                raise _OverLimit(f"a number of about {bits} bits, over {MAX_INT_BITS}")

        def bounded_concat(self, context, pieces):
            _joined_size(pieces)
            join = markup_join if context.eval_ctx.autoescape else str_join
            return join(pieces)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja's signature)
            _check_counts([*args, *kwargs.values()], f"{getattr(__obj, '__name__', 'a call')}")
            # the sandbox hands out str.format wrapped; the string is the wrapped method's
            owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
            name = getattr(__obj, "__name__", "")
            if isinstance(owner, str):
                if name in ("format", "format_map"):
                    _check_format(owner, "format")
                elif name == "join" and args:
                    if _is_iterator(args[0]):  # read a generator once, then measure it
                        args = (list(args[0]), *args[1:])
                    _joined_size(args[0], owner)
                elif name == "replace" and len(args) >= 2:
                    old, new = str(args[0]), str(args[1])
                    count = owner.count(old) if old else len(owner) + 1
                    _check_size(len(owner) + count * max(len(new) - len(old), 0), "replace")
            return super().call(__context, __obj, *args, **kwargs)

    environment = BoundedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols]
    )
    environment.filters = {
        name: _bounded_filter(name, function) for name, function in environment.filters.items()
    }
    environment.filters["tojson"] = _bounded_filter("tojson", _tojson)
    environment.globals.update(
        raise_exception=_raise_exception,
        strftime_now=_strftime_now,
        namespace=SafeNamespace,
    )
    return environment


@functools.lru_cache(maxsize=16)
def _compiled(template: str):
    return _environment().from_string(template)


def _stop(thread: threading.Thread) -> None:
    """Interrupt ``thread`` at its next Python step (it runs template code, nothing else)."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(_Stopped)
        )


def _render_limited(template, variables: dict) -> str:
    """Render in a worker thread; refuse a render over :data:`TIME_LIMIT` or :data:`MAX_CHARS`."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            pieces, total = [], 0
            for piece in template.generate(**variables):
                total += len(piece)
                _check_size(total, "the rendered text")
                pieces.append(piece)
            outcome["text"] = "".join(pieces)
        except _Stopped:
            pass
        except BaseException as exc:  # the template's own failure, reported by the caller
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="mobius-chat-template", daemon=True)
    worker.start()
    worker.join(TIME_LIMIT)
    if worker.is_alive():
        _stop(worker)
        raise _OverLimit(f"rendering takes over {TIME_LIMIT:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["text"]


def render_chat_template(
    tokenizer: Any,
    messages: Sequence[dict],
    *,
    source: str | os.PathLike,
    chat_template: str | None = None,
    add_generation_prompt: bool = False,
    **variables: Any,
) -> str:
    """The text of ``messages`` through the tokenizer's chat template, within the limits above.

    The same text as transformers' ``tokenizer.apply_chat_template(messages,
    chat_template=..., tokenize=False, add_generation_prompt=..., **variables)``: the
    template (``chat_template``, a template or a name of the tokenizer's, else the
    tokenizer's own) sees ``messages``, ``add_generation_prompt``, the tokenizer's
    special tokens (``bos_token``...) and ``variables`` (``enable_thinking``...).
    ``source`` names the package or folder in errors.

    Raises:
        ChatTemplateError: the template refuses the conversation (``raise_exception``),
            fails, or goes over a limit; the message is one line.
    """
    try:
        template = tokenizer.get_chat_template(chat_template)
    except ValueError as exc:
        raise ChatTemplateError(f"no usable chat template in {source}: {_one_line(exc)}") from None
    if not isinstance(template, str):
        raise ChatTemplateError(f"the chat template of {source} is not a string")
    conversation = [
        {key: value for key, value in message.items() if value is not None} for message in messages
    ]
    context = {
        **tokenizer.special_tokens_map,
        **variables,
        "messages": conversation,
        "tools": None,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
    }
    try:
        return _render_limited(_compiled(template), context)
    except _Refused as exc:
        raise ChatTemplateError(
            f"the chat template of {source} refuses the conversation: {_one_line(exc)}"
        ) from None
    except _OverLimit as exc:
        raise ChatTemplateError(
            f"the chat template of {source} is refused: {_one_line(exc)}"
        ) from None
    except Exception as exc:  # any failure of the template's own code (jinja2's errors included)
        reason = f"{type(exc).__name__}: {_one_line(exc)}"
        raise ChatTemplateError(f"the chat template of {source} fails: {reason}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
