"""Errors that the CLI turns into exit statuses (never tracebacks).

Exit statuses (:data:`EXIT_OK` …): 0 success, 1 a check failed (or a step of a build failed),
2 usage or input error (bad spec, bad option, bad name), 3 internal error (a bug in envtool),
130 interrupted (SIGINT, SIGTERM, SIGHUP).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130

#: Longest echo of a user's value in an error message (characters); longer ones are cut.
MAX_ECHO = 200


def echo(value: object, limit: int = MAX_ECHO) -> str:
    """``repr(value)`` cut to ``limit`` characters (a hostile spec must not make a 4 MB message)."""
    text = repr(value)
    if len(text) > limit:
        text = text[:limit] + f"… ({len(text)} characters)"
    return text


class EnvtoolError(Exception):
    """Base class. ``exit_status`` is what ``envtool`` exits with when this escapes a command.

    Attributes (set by the build-then-rename of ``create``/``clone`` when it fails):
        log: the build log (``Path``) or None.
        results: what the steps reported before the failure (dict) or None.
        outcome: what was left where, in words (``nothing was left at …``), or "".
    """

    exit_status = EXIT_CHECK_FAILED
    log: Optional[Path] = None
    results: Optional[Any] = None
    outcome: str = ""


class UsageError(EnvtoolError):
    """Bad command-line input (a missing option, a target that exists without ``--force``).

    Exit status 2.
    """

    exit_status = 2


class SpecError(EnvtoolError):
    """A spec or site file that does not validate. Exit status 2.

    Args:
        path: the file (``Path`` or display string), or None for a spec built in memory.
        field: dotted field name, e.g. ``horovod.gpu_operations``.
        expected: what was expected, in words.
        got: the offending value (repr'd into the message), optional.
        line: 1-based line in ``path`` where known.

    The message reads ``specs/x.yaml:12: horovod.gpu_operations: expected …, got …``.
    """

    exit_status = EXIT_USAGE

    def __init__(self, path, field: str, expected: str, got: object = None, line: Optional[int] = None,
                 hint: str = ""):
        self.path = str(path) if path is not None else "<spec>"
        self.field = field
        self.expected = expected
        self.got = got
        self.line = line
        self.hint = hint
        where = self.path + (f":{line}" if line else "")
        msg = f"{where}: {field}: expected {expected}"
        if got is not None:
            msg += f", got {echo(got)}"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


class TargetExists(UsageError):
    """The target prefix exists (or appeared during the build) and may not be replaced. Exit 2.

    Attributes:
        target: the prefix.
        kept: where the finished new environment was kept instead (beside the target), or None
            when nothing was built yet.
    """

    def __init__(self, target: Path, kept: Optional[Path] = None, appeared: bool = False):
        self.target = Path(target)
        self.kept = Path(kept) if kept else None
        if kept:
            msg = (f"{target} {'appeared during the build' if appeared else 'exists'}; it was left as it is and "
                   f"the new environment is kept at {kept} (its scripts name {target}: move it there once "
                   f"{target} is out of the way)")
        else:
            msg = f"{target} exists; choose another --prefix or pass --force to replace it"
        super().__init__(msg)


class Interrupted(KeyboardInterrupt):
    """A signal (SIGINT, SIGTERM, SIGHUP) stopped a command; raised after clean-up. Exit 130.

    Attributes:
        signum: the signal number.
        log / results / outcome: as on :class:`EnvtoolError`.
    """

    exit_status = EXIT_INTERRUPTED

    def __init__(self, signum: int):
        import signal

        self.signum = signum
        self.log: Optional[Path] = None
        self.results: Optional[Any] = None
        self.outcome = ""
        super().__init__(signal.Signals(signum).name)


class StepFailed(EnvtoolError):
    """A step of ``create`` failed (a subprocess exited non-zero, a probe timed out).

    Exit status 1. ``log`` is the path of the build log that holds the subprocess output;
    ``step_result`` what the failed step found (JSON-ready), which the runner records as that
    step's result, or None.
    """

    exit_status = 1

    def __init__(self, step_id: str, message: str, log: Optional[Path] = None, step_result: Optional[Any] = None):
        self.step_id = step_id
        self.log = log
        self.step_result = step_result
        super().__init__(f"step {step_id!r} failed: {message}")


class CheckFailed(EnvtoolError):
    """A validation found a mismatch (a capability missing, a probe failed). Exit status 1.

    Args:
        message: what failed.
        step_result: the check's full result (JSON-ready), recorded by the runner as the step's
            result, or None.
    """

    exit_status = 1

    def __init__(self, message: str, step_result: Optional[Any] = None):
        self.step_result = step_result
        super().__init__(message)


@dataclass(frozen=True)
class Location:
    """Where a value came from: file and 1-based line (None when unknown)."""

    path: str
    line: Optional[int] = None
