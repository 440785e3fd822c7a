"""Bounded work on small hostile inputs (issue 30): no hang, no runaway allocation, one line.

- a diffusers component config's sizes are checked like a transformers config's
  (``layers_per_block: 1e9`` built a billion resnets);
- a precomputed constant over mobius's budget (the rotary table of an in-limit
  ``max_position_embeddings: 2**25``) is refused before it is allocated;
- chat templates render with a time and a size limit, and a template's own
  ``raise_exception`` is its one-line error, as transformers renders the rest.
"""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.generate import _Generator
from mobius_text.testing import write_tiny_llama

FUZZ_EXAMPLES = int(os.environ.get("MOBIUS_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=30_000,  # ms: no hostile case may take over 30 s (issue 30)
    derandomize=not os.environ.get("MOBIUS_FUZZ_EXAMPLES"),  # CI: the same cases every run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


pytestmark = pytest.mark.usefixtures("offline_hub")


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *expected: str) -> str:
    """Run the CLI: exit 1 with one ``mobius: error:`` line holding every ``expected``."""
    code = main(argv)
    _, err = capsys.readouterr()
    lines = err.splitlines()
    assert (code, len(lines)) == (1, 1), err
    assert lines[0].startswith("mobius: error: ") and "Traceback" not in err, err
    for text in expected:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    return lines[0]


# -- diffusers component configs ----------------------------------------------------------

UNET = {
    "_class_name": "UNet2DConditionModel",
    "in_channels": 4,
    "out_channels": 4,
    "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
    "block_out_channels": [32, 64],
    "layers_per_block": 1,
    "attention_head_dim": 2,
    "cross_attention_dim": 32,
    "norm_num_groups": 8,
    "sample_size": 8,
}


def write_unet(directory: Path, **changes) -> Path:
    """A tiny UNet2DConditionModel component folder (config only: builds use ``--no-weights``)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({**UNET, **changes}))
    return directory


def test_a_tiny_unet_config_builds(tmp_path: Path) -> None:
    assert main(["build", "--model", str(write_unet(tmp_path / "unet")), str(tmp_path / "out"),
                 "--no-weights", "-q"]) == 0  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"layers_per_block": 1e9}, "layers_per_block"),
        ({"layers_per_block": 10**9}, "layers_per_block"),  # today: a billion resnets
        ({"transformer_layers_per_block": [[10**12], 1]}, "transformer_layers_per_block"),
        ({"block_out_channels": [32, 2**40]}, "block_out_channels"),
        ({"attention_head_dim": "eight"}, "attention_head_dim"),
        ({"in_channels": -4}, "in_channels"),
        ({"norm_num_groups": True}, "norm_num_groups"),
        ({"sample_size": 2**40}, "sample_size"),
    ],
)
def test_oversized_or_mistyped_diffusers_fields(capsys, tmp_path: Path, changes, key) -> None:
    unet = write_unet(tmp_path / "unet", **changes)
    start = time.perf_counter()
    line = one_line_error(
        capsys, ["build", "--model", str(unet), str(tmp_path / "out"), "--no-weights", "-q"], key
    )
    assert time.perf_counter() - start < 5
    assert "is not an integer from" in line
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """One folder for every case: hypothesis calls the test body many times per fixture."""
    return tmp_path_factory.mktemp("bounded")


_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=6)
)
_field_values = st.one_of(
    _json_scalars,
    st.integers(-2, 4),
    st.integers(2**20, 2**64),
    st.sampled_from([1e9, 2.0, 1e300]),
    st.lists(st.one_of(st.integers(-1, 3), st.integers(2**30, 2**40), _json_scalars), max_size=3),
)


@FUZZ
@given(st.dictionaries(st.sampled_from(sorted(set(UNET) - {"_class_name"})), _field_values,
                       max_size=3))  # fmt: skip
def test_diffusers_config_values_build_or_raise_mobius_error(scratch: Path, changes) -> None:
    """Any value in any field of a component config builds or gives a typed error, at once."""
    from mobius import build

    directory = write_unet(scratch / "unet", **changes)
    start = time.perf_counter()
    try:
        build(directory, load_weights=False)
    except MobiusError as exc:
        assert "\n" not in str(exc)
    assert time.perf_counter() - start < 10


# -- the budget of precomputed constants --------------------------------------------------


def test_a_rope_table_over_the_budget_is_refused_before_it_is_allocated(
    capsys, tmp_path: Path
) -> None:
    """max_position_embeddings 2**25 (in SIZE_LIMITS) with head_dim 128: an 8 GiB float32
    cos table and its sin twin, made for GroupQueryAttention (``--ep cpu``)."""
    model = write_tiny_llama(tmp_path / "model", head_dim=128, max_position_embeddings=2**25)
    argv = ["build", "--model", str(model), str(tmp_path / "out"), "--ep", "cpu", "--no-weights"]
    tracemalloc.start()
    try:
        line = one_line_error(capsys, [*argv, "-q"], "max_position_embeddings", "8.0 GiB")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "budget" in line and "33554432 x 64" in line
    assert peak < 256 << 20, f"{peak >> 20} MiB traced"
    assert not (tmp_path / "out").exists()


def test_the_budget_holds_the_largest_real_rope_table() -> None:
    """Llama 4 Scout: 10,485,760 positions x 64 frequencies in float32 (2.5 GiB)."""
    from mobius.components import check_constant_size

    check_constant_size((10_485_760, 64), 4, "rotary cos/sin table", "max_position_embeddings")
    with pytest.raises(MobiusError, match="max_position_embeddings asks for"):
        check_constant_size((2**25, 32), 4, "rotary cos/sin table", "max_position_embeddings")


# -- chat templates ---------------------------------------------------------------------

SIMPLE = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)
# Jinja's features that real templates use: namespace, tojson, filters, slices, loop
# variables, string methods, strftime_now, {% generation %}, variables given by the caller.
RICH = (
    "{{ bos_token }}{% set ns = namespace(system=none, n=0) %}"
    "{% for m in messages %}{% if m.role == 'system' %}{% set ns.system = m.content %}"
    "{% endif %}{% set ns.n = ns.n + 1 %}{% endfor %}"
    "{% if ns.system %}<|system|>{{ ns.system | trim }}{{ eos_token }}{% endif %}"
    "{% for m in messages[1:] if m.role != 'system' or loop.first %}"
    "<|{{ m.role }}|>{{ m.content | tojson }}{{ m | tojson(indent=2) }}"
    "{{ '%s:%d' % (m.role, loop.index) }}{{ m.content.upper().replace('H', 'J') }}"
    "{{ (m.content.split() | join('-')) ~ '|' ~ loop.length }}{{ eos_token }}{% endfor %}"
    "{% generation %}{{ 'x' * 3 }}{% endgeneration %}"
    "{{ strftime_now('%Y') | length }}{{ ns.n }}{{ 2 ** 10 }}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and "
    "not enable_thinking %}<think></think>{% endif %}{% endif %}"
)
ALTERNATE = (
    "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{{ m['content'] }}{% endfor %}"
)


def make_tokenizer(chat_template: str | None = None):
    """A word-level fast tokenizer (a few words, no download) with ``chat_template``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "hi": 3, "there": 4}
    model = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=model, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tokenizer.chat_template = chat_template
    return tokenizer


class PromptOnly(_Generator):
    """A package runner without graphs: what ``mobius generate`` does to a prompt."""

    def _check_contract(self) -> None:
        pass


def prompt_ids(tmp_path: Path, chat_template: str, system: str | None = None) -> list[int]:
    make_tokenizer(chat_template).save_pretrained(tmp_path / "package")
    return PromptOnly(tmp_path / "package").encode_prompt("hi", system=system)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
         "takes over"),
        ("{{ 'a' * 10**10 }}", "10000000000 characters"),
        ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
         "{% endfor %}{{ ns.s }}", "over 16777216"),
        ("{{ 'a' | center(10**10) }}", "filter center"),
        ("{{ 'a'.ljust(10**10) }}", "10000000000"),
        ("{{ lipsum(10**8) }}", "100000000"),
        ("{{ 7 ** (10**9) }}", "bits"),
        ("{{ (['hi' * 10**6] * 100) | join }}", "over 16777216"),
        ("{{ 'abc' | replace('', 'x' * 10**7) }}", "filter replace"),
        ("{{ '{:>99999999}'.format(1) }}", "99999999"),
        ("{{ messages | tojson(indent=10**4) }}", "indent"),
        ("{{ raise_exception('Conversation roles must alternate user/assistant') }}",
         "refuses the conversation: Conversation roles must alternate user/assistant"),
        ("{% for %}", "TemplateSyntaxError"),
        ("{{ messages.__class__.__mro__ }}", "fails"),
    ],
)  # fmt: skip
def test_hostile_chat_templates_are_one_line_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, template: str, expected: str
) -> None:
    import mobius.chat_template

    monkeypatch.setattr(mobius.chat_template, "TIME_LIMIT", 0.5)  # the default is 5 s
    start = time.perf_counter()
    with pytest.raises(MobiusError) as caught:
        prompt_ids(tmp_path, template)
    message = str(caught.value)
    assert "\n" not in message and "chat template of" in message and str(tmp_path) in message
    assert expected in message
    assert time.perf_counter() - start < 3


def test_raise_exception_in_mobius_generate_exits_1(capsys, tmp_path: Path) -> None:
    """A real template's refusal of a message order, through the CLI: its message, exit 1."""
    model = write_tiny_llama(tmp_path / "model")
    make_tokenizer(ALTERNATE.replace("'user'", "'assistant'")).save_pretrained(model)
    assert main(["build", "--model", str(model), str(tmp_path / "pkg"), "-q"]) == 0
    capsys.readouterr()
    one_line_error(
        capsys,
        ["generate", str(tmp_path / "pkg"), "hi", "--max-new-tokens", "2"],
        "refuses the conversation: Conversation roles must alternate",
    )


@pytest.mark.parametrize("template", [SIMPLE, RICH, ALTERNATE])
@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi there"}],
        [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Héllo 東京"}],
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "there", "tool_calls": None},
            {"role": "user", "content": "hi"},
        ],
    ],
)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_normal_templates_render_as_transformers(template, messages, add_generation_prompt):
    from mobius.chat_template import render_chat_template
    from mobius.errors import ChatTemplateError

    tokenizer = make_tokenizer(template)
    options = {"add_generation_prompt": add_generation_prompt, "enable_thinking": False}
    try:
        expected = tokenizer.apply_chat_template(messages, tokenize=False, **options)
    except Exception as exc:  # jinja2's TemplateError: the template refuses the messages
        with pytest.raises(ChatTemplateError, match="refuses the conversation"):
            render_chat_template(tokenizer, messages, source="p", **options)
        assert "alternate" in str(exc)
        return
    assert render_chat_template(tokenizer, messages, source="p", **options) == expected


def test_a_prompt_through_mobius_generate_is_unchanged(tmp_path: Path) -> None:
    tokenizer = make_tokenizer(SIMPLE)
    messages = [{"role": "system", "content": "hi"}, {"role": "user", "content": "hi"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert prompt_ids(tmp_path, SIMPLE, system="hi") == expected


@pytest.mark.parametrize("steps", [10**12, 2**21, 1, None])
def test_a_package_scheduler_with_an_absurd_schedule_is_refused(steps) -> None:
    """``mobius generate`` reads a diffusion package's scheduler config: its schedule length
    is bounded before anything is allocated (10**12 was a MemoryError, exit 3; null a
    TypeError)."""
    from mobius.errors import ConfigError
    from mobius_diffusion.schedulers import load_scheduler

    started = time.perf_counter()
    with pytest.raises(ConfigError, match="num_train_timesteps"):
        load_scheduler({"_class_name": "DDIMScheduler", "num_train_timesteps": steps})
    assert time.perf_counter() - started < 5


def test_running_out_of_memory_is_one_line_and_exit_1(capsys, monkeypatch, tmp_path: Path):
    """Whatever asks for more memory than the machine has (a size no limit caught) ends in
    one line and exit 1, not a traceback or exit 3."""
    import numpy as np

    from mobius import cli

    def allocate(args):
        return np.zeros(2**62, np.uint8)  # numpy raises MemoryError at once

    parser = cli.make_parser(plugins=False)
    monkeypatch.setattr(cli, "make_parser", lambda plugins: parser)
    monkeypatch.setattr(parser, "parse_args", lambda argv: _Args(allocate))
    capsys.readouterr()
    assert main(["info", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mobius: error: out of memory:") and err.count("\n") == 1, err


class _Args:
    """Parsed arguments whose command (``info``) runs ``run``."""

    command = "info"
    verbose = False

    def __init__(self, run):
        self.run = run
