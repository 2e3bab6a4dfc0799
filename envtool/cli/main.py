"""``envtool`` entry point: parse arguments, dispatch, turn errors into exit statuses.

Exit statuses (see :mod:`envtool.core.errors`): 0 success, 1 a check failed (or a build step
failed), 2 usage or input error, 3 internal error (a bug in envtool), 130 interrupted. Errors
are one clear message on stderr, never a traceback (``ENVTOOL_DEBUG=1`` shows one).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import List, Optional

from envtool import __version__

#: Command modules under ``envtool.cli``, in ``--help`` order. A module that is not there yet is
#: skipped (each issue adds its own).
COMMANDS = ("create", "plan", "check_build", "specs", "show", "diff_specs", "clone", "lock", "diff",
            "modulefile", "publish", "retire", "sbom", "doctor", "jobscript", "validate", "cache", "completion")


def _command_module(argv: List[str]) -> Optional[str]:
    """The command module ``argv`` names (``check-build`` -> ``check_build``): its first word that
    is not an option; None when there is none or it names no command (then every command is
    registered, for ``--help`` and argparse's own error)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    name = word.replace("-", "_") if word else None
    return name if name in COMMANDS else None


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The argument parser.

    Args:
        only: a command module name: register that command only (start-up: one module
            imported, one subparser built); None: every available command (``--help``,
            shell completion).
    """
    parser = argparse.ArgumentParser(
        prog="envtool",
        description="Provision distributed deep-learning environments (PyTorch/TensorFlow + Horovod) on HPC systems.")
    parser.add_argument("--version", action="version", version=f"envtool {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show subprocess output and details")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in (only,) if only else COMMANDS:
        try:
            module = importlib.import_module(f"envtool.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"envtool.cli.{name}":
                continue
            raise
        module.register(sub)
    commands = list(sub.choices.values())
    for command in list(commands):  # and the actions of a command with its own (``cache list``)
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                commands += list(action.choices.values())
    for command in commands:
        # -v / -q also after the subcommand (``envtool create X -v``); SUPPRESS keeps the global
        # value when only the global form is given
        for flags, dest, help_text in ((("-v", "--verbose"), "verbose", "show subprocess output and details"),
                                       (("-q", "--quiet"), "quiet", "no progress lines")):
            try:
                command.add_argument(*flags, dest=dest, action="store_true", default=argparse.SUPPRESS, help=help_text)
            except argparse.ArgumentError:
                pass  # the command defines it itself
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run envtool with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=_command_module(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    from envtool.core.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EnvtoolError, Interrupted
    from envtool.core.plan import redact  # a URL's password is never printed

    from envtool.core import procs

    try:
        with procs.command_scope():  # children die with the command; signals exit 130
            return int(args.func(args) or 0)
    except EnvtoolError as exc:
        print(f"envtool: error: {redact(str(exc))}", file=sys.stderr)
        if exc.outcome:
            print(f"envtool: {exc.outcome}", file=sys.stderr)
        if exc.log:
            print(f"envtool: build log: {exc.log}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt as exc:
        what = f"interrupted by {exc}" if isinstance(exc, Interrupted) else "interrupted"
        outcome = getattr(exc, "outcome", "")
        log = getattr(exc, "log", None)
        print(f"envtool: {what}" + (f"; {outcome}" if outcome else "") + (f"; build log: {log}" if log else ""),
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except (Exception, RecursionError, MemoryError) as exc:  # a bug: say so, traceback behind ENVTOOL_DEBUG
        if os.environ.get("ENVTOOL_DEBUG"):
            raise
        log = getattr(exc, "log", None)
        print(f"envtool: internal error: {type(exc).__name__}: {redact(str(exc)[:500])} (set ENVTOOL_DEBUG=1 for a "
              "traceback; please report it)" + (f"; build log: {log}" if log else ""), file=sys.stderr)
        return EXIT_INTERNAL
