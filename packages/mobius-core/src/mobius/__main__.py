"""``python -m mobius``: the ``mobius`` command.

Ctrl-C is handled from the first line on: loading the command's modules may take a
moment, and a Ctrl-C then exits 130 with one line, as one during the command does;
so does a Ctrl-C while Python exits afterwards.
"""

import sys


def main() -> None:
    """Load the command line and run it (:func:`mobius.cli.run`), as the whole process."""
    try:
        from mobius.cli import exit_on_interrupt, run
    except KeyboardInterrupt:
        print("mobius: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    try:
        run()
    finally:
        exit_on_interrupt()


if __name__ == "__main__":
    main()
