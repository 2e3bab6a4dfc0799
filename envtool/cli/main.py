"""``envtool`` entry point: parse arguments, dispatch, turn errors into exit statuses.

Exit statuses (see :mod:`envtool.core.errors`): 0 success, 1 a check failed (or a build step
failed), 2 usage or input error, 3 internal error (a bug in envtool), 130 interrupted. Errors
are one clear message on stderr, never a traceback (``ENVTOOL_DEBUG=1`` shows one).
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from typing import List, Optional

from envtool import __version__
from envtool.core.errors import EXIT_INTERRUPTED

#: Command modules under ``envtool.cli``, in ``--help`` order. A module that is not there yet is
#: skipped (each issue adds its own).
COMMANDS = ("create", "plan", "check_build", "specs", "show", "diff_specs", "clone", "lock", "diff",
            "modulefile", "publish", "retire", "sbom", "pack", "image", "doctor", "jobscript", "validate", "cache", "completion",
            "list", "remove", "info", "config")


def _command_module(argv: List[str]) -> Optional[str]:
    """The command module ``argv`` names (``check-build`` -> ``check_build``): its first word that
    is not an option; None when there is none or it names no command (then every command is
    registered, for ``--help`` and argparse's own error)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    name = word.replace("-", "_") if word else None
    return name if name in COMMANDS else None


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is raised as :class:`UsageErrorExit` (not ``sys.exit(2)``)
    so that :func:`main` reports it like any other error (one JSON object under ``--json``)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        raise UsageErrorExit(f"{self.prog}: error: {message}")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an argument no parser knows is reported by the (sub)command that was
        given (``envtool cache prune --bogus`` prints ``cache prune``'s usage, as conda, pixi and uv
        do), not by the top-level parser that argparse's sub-parsers hand their leftovers to."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            leaf_parser(self, parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def leaf_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the innermost (sub)command ``args`` chose (``cache prune``'s for ``envtool cache
    prune``), following each sub-parser action's ``dest``; ``parser`` itself when none was chosen."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subs[0].dest, None) if subs else None
        if not chosen or chosen not in subs[0].choices:
            return parser
        parser = subs[0].choices[chosen]


class UsageErrorExit(Exception):
    """A command-line usage error found by argparse (exit 2)."""


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The argument parser.

    Args:
        only: a command module name: register that command only (start-up: one module
            imported, one subparser built); None: every available command (``--help``,
            shell completion).
    """
    parser = _Parser(
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


#: Signals that stop a command cleanly (exit 130, children killed).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_stopping = False


def _on_signal(signum, frame) -> None:
    """Kill this process's descendants and raise :class:`~envtool.core.errors.Interrupted` (once;
    repeated signals are ignored so the clean-up on the way out is not cut short)."""
    global _stopping
    if _stopping:
        return
    _stopping = True
    from envtool.core import procs
    from envtool.core.errors import Interrupted

    procs.kill_descendants(grace=1.0)
    raise Interrupted(signum)


def rearm() -> None:
    """Let :func:`_on_signal` act on the next signal again: its exception was dropped by CPython
    (raised inside a weakref callback or a finalizer), so the command never stopped."""
    global _stopping
    _stopping = False


def install_signal_handlers() -> dict:
    """SIGINT, SIGTERM and SIGHUP end any command with exit 130 after killing its children; a signal
    that was ignored when envtool started (``nohup``, a background job) stays ignored.

    Returns:
        the handlers replaced, by signal (for :func:`main` to put back when it returns).
    """
    global _stopping
    # What the handler uses is imported before the handler is installed: a signal arriving while
    # a module it needs is half imported would otherwise fail inside the handler (AttributeError
    # on the partly initialised module) instead of ending the command with exit 130.
    from envtool.core import errors, procs  # noqa: F401

    _stopping = False
    previous = {}
    for sig in STOP_SIGNALS:
        try:
            handler = signal.getsignal(sig)
            if handler is signal.SIG_IGN:
                continue
            signal.signal(sig, _on_signal)
            previous[sig] = handler
        except (ValueError, OSError):  # not the main thread (envtool called as a library)
            pass
    return previous


def _wants_json(argv: List[str], args=None) -> bool:
    """Whether the command was asked for ``--json`` (parsed, or among the arguments when parsing failed)."""
    if args is not None:
        return bool(getattr(args, "json", False))
    return "--json" in argv[:argv.index("--")] if "--" in argv else "--json" in argv


def main(argv: Optional[List[str]] = None) -> int:
    """Run envtool with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Every way out goes through here: an error is one message on stderr (never a traceback unless
    ``ENVTOOL_DEBUG=1``) and, under ``--json``, one JSON object on stdout with ``ok``, ``error`` and
    ``exit`` (:func:`envtool.cli.common.emit_json`). An ``OSError`` that is a condition of the
    machine or the input (read-only or full filesystem, permission, name too long, a file that
    vanished; :func:`envtool.core.errors.condition_message`) is exit 2, or 1 when a build step met
    it; only what is left is an internal error (exit 3).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    previous = install_signal_handlers()
    json_mode = _wants_json(argv)
    try:
        try:
            from envtool.cli import common

            if json_mode:
                common.collect_json()
            code, error = _run(argv)
        except KeyboardInterrupt as exc:  # before the command ran (parsing, imports)
            code, error = _interrupted(exc)
        if json_mode:
            from envtool.cli import common

            try:
                common.emit_json(code, error)
            except BrokenPipeError:
                pass
            except KeyboardInterrupt:
                code = EXIT_INTERRUPTED
        return code
    finally:
        for sig, handler in previous.items():
            try:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            except (ValueError, OSError):
                pass


def _interrupted(exc: BaseException):
    """Report an interrupt (exit 130): what was left and the build log, after killing children."""
    from envtool.core import procs
    from envtool.core.errors import Interrupted

    try:
        procs.kill_descendants(grace=1.0)
    except KeyboardInterrupt:
        pass
    what = f"interrupted by {exc}" if isinstance(exc, Interrupted) else "interrupted"
    outcome = getattr(exc, "outcome", "")
    log = getattr(exc, "log", None)
    message = what + (f"; {outcome}" if outcome else "") + (f"; build log: {log}" if log else "")
    try:
        print(f"envtool: {message}", file=sys.stderr)
    except (OSError, ValueError):
        pass
    return EXIT_INTERRUPTED, message


def _interrupt_in(exc: BaseException) -> Optional[BaseException]:
    """The ``KeyboardInterrupt`` that ``exc`` wraps (as its cause or context), or None; a stop signal
    received by this process (:func:`_on_signal`) counts too."""
    seen = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt):
            return current
        current = current.__cause__ or current.__context__
    if _stopping:
        return KeyboardInterrupt()
    return None


def redact(text: str) -> str:
    """``text`` with URL passwords hidden (:func:`envtool.core.plan.redact`), imported only when an
    error is reported: the plan model is not needed to print ``--help``."""
    from envtool.core.plan import redact as plan_redact

    return plan_redact(text)


def _dispatch(argv: List[str]):
    """Parse ``argv`` and run the command (errors propagate); returns ``(exit status, None)``."""
    from envtool.core import procs
    from envtool.core.errors import EXIT_USAGE

    parser = build_parser(only=_command_module(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE, "no command given (see 'envtool --help')"
    from envtool.cli.common import check_environment
    from envtool.cli.settings import apply as apply_settings

    check_environment()  # the variables first: a bad one is named as the variable
    if not getattr(args, "settings_later", False):  # 'config' reads the files itself (to fix a bad one)
        apply_settings()  # then the configuration files under them (a bad one is named with its file)
    with procs.command_scope():  # children die with the command; signals exit 130
        return int(args.func(args) or 0), None


def _envtool_error(exc):
    """Report an :class:`~envtool.core.errors.EnvtoolError` (its own exit status), with its outcome
    and build log (as keys too under ``--json``)."""
    message = redact(str(exc))
    print(f"envtool: error: {message}", file=sys.stderr)
    if exc.outcome:
        print(f"envtool: {exc.outcome}", file=sys.stderr)
    if exc.log:
        print(f"envtool: build log: {exc.log}", file=sys.stderr)
    from envtool.cli.common import collecting_json, print_json

    if (exc.log or exc.outcome) and collecting_json():  # under --json the same facts, as keys
        print_json({k: str(v) for k, v in (("log", exc.log), ("outcome", exc.outcome)) if v})
    return exc.exit_status, message


def _unexpected(exc: BaseException):
    """Report an exception that is not envtool's: a condition of the machine or the input (exit 2,
    or 1 when a build step met it), else an internal error (exit 3)."""
    from envtool.core.errors import EXIT_INTERNAL, EXIT_USAGE, ConditionError, condition_message

    log = getattr(exc, "log", None)
    outcome = getattr(exc, "outcome", "")
    condition = condition_message(exc)
    if condition is None and isinstance(exc, MemoryError):
        condition = ("out of memory: an input is too large or endless (a device such as /dev/zero?), or the "
                     "machine has too little memory for this command")
    if condition is not None:
        # a condition of the machine or the input, not a bug: 1 when a build step met it
        error = ConditionError(redact(condition), exit_status=1 if log else EXIT_USAGE)
        print(f"envtool: error: {error}", file=sys.stderr)
        if outcome:
            print(f"envtool: {outcome}", file=sys.stderr)
        if log:
            print(f"envtool: build log: {log}" if os.path.exists(log) else
                  f"envtool: no build log could be written at {log}", file=sys.stderr)
        return error.exit_status, str(error)
    message = f"{type(exc).__name__}: {redact(str(exc)[:500])}"
    print(f"envtool: internal error: {message} (set ENVTOOL_DEBUG=1 for a traceback; please report it)"
          + (f"; build log: {log}" if log else ""), file=sys.stderr)
    return EXIT_INTERNAL, f"internal error: {message}"


def _run(argv: List[str]):
    """Parse ``argv`` and run the command; returns ``(exit status, error message or None)``."""
    from envtool.core.errors import EXIT_USAGE, EnvtoolError

    try:
        return _dispatch(argv)
    except UsageErrorExit as exc:
        message = str(exc)
        print(f"{message}", file=sys.stderr)
        return EXIT_USAGE, message
    except EnvtoolError as exc:
        return _envtool_error(exc)
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except BrokenPipeError:
        return 0, None
    except (Exception, RecursionError, MemoryError) as exc:
        interrupt = _interrupt_in(exc)
        if interrupt is not None:  # a signal inside code that wraps what it catches (class creation, imports)
            return _interrupted(interrupt)
        if os.environ.get("ENVTOOL_DEBUG"):
            raise
        return _unexpected(exc)
