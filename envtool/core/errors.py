"""Errors that the CLI turns into exit statuses (never tracebacks).

Exit statuses: 0 success, 1 a check failed, 2 usage or input error (bad spec, bad option).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional


class EnvtoolError(Exception):
    """Base class. ``exit_status`` is what ``envtool`` exits with when this escapes a command."""

    exit_status = 1


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

    exit_status = 2

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
            msg += f", got {got!r}"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


class StepFailed(EnvtoolError):
    """A step of ``create`` failed (a subprocess exited non-zero, a probe timed out).

    Exit status 1. ``log`` is the path of the build log that holds the subprocess output.
    """

    exit_status = 1

    def __init__(self, step_id: str, message: str, log: Optional[Path] = None):
        self.step_id = step_id
        self.log = log
        super().__init__(f"step {step_id!r} failed: {message}")


class CheckFailed(EnvtoolError):
    """A validation found a mismatch (a capability missing, a probe failed). Exit status 1."""

    exit_status = 1


@dataclass(frozen=True)
class Location:
    """Where a value came from: file and 1-based line (None when unknown)."""

    path: str
    line: Optional[int] = None
