"""Render an ``argparse`` parser as Markdown: the CLI reference page of the docs.

Every (sub)command gets a section with its usage, description and options, so
the page says exactly what ``mobius <command> --help`` says. Run as a script to
print the page: ``uv run python docs/_hooks/cli_reference.py``.
"""

from __future__ import annotations

import argparse

# Usage lines are wrapped at this width whatever the terminal, so builds are reproducible.
USAGE_WIDTH = 88


def escape(text: str) -> str:
    """Escape Markdown and HTML specials in help text (``*.safetensors`` must not start emphasis)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for char in "\\`*_[]":
        text = text.replace(char, "\\" + char)
    return text


def usage(parser: argparse.ArgumentParser) -> str:
    """The parser's usage line(s), without the ``usage: `` prefix."""
    formatter = parser.formatter_class(prog=parser.prog, width=USAGE_WIDTH)
    # argparse has no public way to format usage at a given width; this is what format_usage does.
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, "")
    return formatter.format_help().strip()


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """``(name, one-line help, parser)`` of each subcommand, in the order they were added."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if sub not in (p for _, _, p in found):  # aliases map to the same parser
                    found.append((name, helps.get(name, ""), sub))
    return found


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's documented arguments (positionals first), without the subcommand selector."""
    actions = [
        a
        for a in parser._actions
        if a.help != argparse.SUPPRESS and not isinstance(a, argparse._SubParsersAction)
    ]
    return sorted(actions, key=lambda a: bool(a.option_strings))


def invocation(action: argparse.Action) -> str:
    """How the argument is written: ``OUTPUT_DIR``, `` `-q`, `--quiet` ``, ``--dtype {f32,f16}``."""
    if action.choices is not None and action.metavar is None:
        value = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        value = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
    if not action.option_strings:
        return f"`{value}`"
    takes_value = action.nargs != 0
    return ", ".join(
        f"`{opt} {value}`" if takes_value else f"`{opt}`" for opt in action.option_strings
    )


def describe(action: argparse.Action, prog: str) -> str:
    """The help text, with argparse's ``%(default)s``-style fields filled and the default added."""
    text = action.help or ""
    if "%(" in text:
        fields = {**vars(action), "prog": prog}
        fields = {
            k: (", ".join(map(str, v)) if k == "choices" and v else v) for k, v in fields.items()
        }
        text = text % fields
    text = escape(text)
    default = action.default
    shows_default = default not in (None, False, argparse.SUPPRESS) and action.nargs != 0
    if shows_default and "default" not in text:
        text += f" (default: `{default}`)"
    if action.required and action.option_strings:
        text += " **Required.**"
    return text


def render_parser(parser: argparse.ArgumentParser, level: int = 2) -> str:
    """One section per command, nested subcommands one heading level down."""
    heading = "#" * level
    lines = [f"{heading} `{parser.prog}`", ""]
    if parser.description:
        lines += [escape(parser.description), ""]
    lines += ["```text", f"usage: {usage(parser)}", "```", ""]
    documented = options(parser)
    if documented:
        lines += ["**Arguments**", ""]
        lines += [f"- {invocation(a)}: {describe(a, parser.prog)}" for a in documented]
        lines.append("")
    subs = subcommands(parser)
    if subs:
        lines += ["**Commands**", ""]
        lines += [f"- `{name}`: {escape(help_)}" for name, help_, _ in subs]
        lines.append("")
    if parser.epilog:
        # The epilog holds examples laid out by hand (RawDescriptionHelpFormatter).
        lines += ["```text", parser.epilog.strip("\n"), "```", ""]
    for _, _, sub in subs:
        lines.append(render_parser(sub, min(level + 1, 3)))
    return "\n".join(lines)


if __name__ == "__main__":
    from mobius.cli import make_parser

    print(render_parser(make_parser()))
