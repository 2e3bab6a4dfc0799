"""Errors that the CLI turns into exit statuses (never tracebacks).

Exit statuses (:data:`EXIT_OK` …): 0 success, 1 a check failed (or a step of a build failed),
2 usage or input error (bad spec, bad option, bad name), 3 internal error (a bug in envtool),
130 interrupted (SIGINT, SIGTERM, SIGHUP).
"""
from __future__ import annotations

import errno
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

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


#: errno values that are conditions of the machine or of the input (a read-only mount, a full disk, a
#: permission, a name too long, a file that vanished), never bugs: exit 2 (1 during a build step),
#: with these words. Names from errno(3) (https://man7.org/linux/man-pages/man3/errno.3.html).
_CONDITIONS = {
    "EROFS": "the filesystem is mounted read-only",
    "ENOSPC": "no space is left on the device (the disk is full)",
    "EDQUOT": "the disk quota is used up",
    "EFBIG": "the file would be larger than the filesystem or a limit allows",
    "EACCES": "permission denied: this user may not read, write or enter it (or a directory on its path)",
    "EPERM": "operation not permitted (the file belongs to another user or is protected)",
    "ENAMETOOLONG": "a path or one of its components is longer than the system allows",
    "ENOENT": "it does not exist (or was removed or replaced by another process while envtool used it)",
    "ENOTDIR": "a component of the path is not a directory",
    "EISDIR": "it is a directory where a file was expected",
    "ELOOP": "too many symbolic links (a symlink loop)",
    "EEXIST": "it exists already",
    "ENOTEMPTY": "the directory is not empty",
    "EBUSY": "it is in use (a mount point or a busy file)",
    "ETXTBSY": "the file is a program that is running",
    "EXDEV": "it is on another filesystem",
    "EMFILE": "too many open files in this process (raise 'ulimit -n')",
    "ENFILE": "too many open files on this system",
    "ENOMEM": "not enough memory",
    "EIO": "an input/output error of the device",
    "ESTALE": "a stale file handle of a network filesystem",
    "ENXIO": "no such device",
    "ENODEV": "no such device",
    "EAGAIN": "the resource is temporarily unavailable",
    "ENOTSUP": "the filesystem does not support the operation",
    "EOPNOTSUPP": "the filesystem does not support the operation",
    "ECONNREFUSED": "the connection was refused",
    "ECONNRESET": "the connection was reset",
    "ETIMEDOUT": "the connection timed out",
    "ENETUNREACH": "the network is unreachable",
    "EHOSTUNREACH": "the host is unreachable",
    "EPIPE": "the other end of a pipe was closed",
}
#: errno numbers of :data:`_CONDITIONS` on this system.
CONDITION_ERRNOS = {getattr(errno, name): words for name, words in _CONDITIONS.items() if hasattr(errno, name)}


def _rust_errno(text: str) -> Optional[int]:
    """The errno of a Rust ``std::io::Error`` shown in ``text`` (``… (os error 30)``), as py-rattler's
    exceptions carry them; None when there is none."""
    m = re.search(r"\(os error (\d+)\)", text)
    return int(m.group(1)) if m else None


def condition_message(exc: BaseException) -> Optional[str]:
    """A plain-words message for an exception that is a condition of the machine or the input, not a
    bug: an ``OSError`` with an errno in :data:`CONDITION_ERRNOS` (the file named), bytes that are not
    UTF-8 in a path (``UnicodeError`` on surrogate escapes, PEP 383), an exception whose cause or
    context is such an ``OSError``, or one whose text carries a Rust ``(os error N)``
    (py-rattler); None otherwise (then it is a bug: exit 3).

    Args:
        exc: the exception that reached the top of a command.
    Returns:
        ``"PATH: what happened (the cause in words)"`` or None.
    """
    seen = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in CONDITION_ERRNOS:
            names = [n for n in (current.filename, getattr(current, "filename2", None)) if n is not None]
            where = " -> ".join(repr(os_fsdecode(n))[1:-1] for n in names)
            return (f"{where}: " if where else "") + CONDITION_ERRNOS[current.errno]
        if isinstance(current, UnicodeError) and "surrogate" in str(current):
            text = getattr(current, "object", "")
            start = getattr(current, "start", 0)
            near = echo(text[max(0, start - 60):start + 20], 120) if isinstance(text, str) else ""
            return ("a path or value holds bytes that are not valid UTF-8 (envtool writes paths into scripts, "
                    "modulefiles and JSON, which are UTF-8); use a path in UTF-8" + (f": near {near}" if near else ""))
        number = _rust_errno(str(current))
        if number in CONDITION_ERRNOS:
            return f"{str(current)[:500]}: {CONDITION_ERRNOS[number]}"
        current = current.__cause__ or current.__context__
    return None


def os_fsdecode(name: object) -> str:
    """A file name (``str`` or ``bytes``) as text; bytes that are not UTF-8 stay escaped."""
    if isinstance(name, bytearray):
        name = bytes(name)
    return os.fsdecode(name) if isinstance(name, bytes) else str(name)


@contextmanager
def naming(path) -> Iterator[None]:
    """Within the block, an ``OSError`` that names no file (a ``write`` or ``close`` on a full disk
    reports none) is given ``path``, so the message says which file could not be written."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


class ConditionError(EnvtoolError):
    """A condition of the machine or the input stopped a command (read-only or full filesystem,
    a permission, a name too long, a file that vanished): exit 2, or 1 when it happened during a
    build step. Made from the original exception by :func:`condition_message`.

    Args:
        message: the plain-words message (names the path and the cause).
        exit_status: 2 (input or environment) or 1 (a build step failed on it).
    """

    def __init__(self, message: str, exit_status: int = EXIT_USAGE):
        self.exit_status = exit_status
        super().__init__(message)
