"""Output of external programs, decoded on purpose (core layer).

A scheduler's answer is not envtool's text: ``scontrol show job`` prints the job's working
directory and command as the file system holds them, so a user's directory named in Latin-1
(``/home/jos\\xe9``) makes its output invalid UTF-8. ``subprocess.run(..., text=True)`` decodes
strictly with the locale's encoding and raises ``UnicodeDecodeError`` out of the call (exit 3,
and the submitted job left running). Here every byte is read as bytes and decoded once, as UTF-8
with each invalid byte replaced by U+FFFD (Python's ``errors="replace"``,
https://docs.python.org/3/library/codecs.html#error-handlers): the fields envtool reads (job ids,
states, exit codes, node lists) are ASCII, and the replaced text can always be printed and
written to JSON, which ``surrogateescape`` text cannot.
"""
from __future__ import annotations

import subprocess
from typing import Mapping, Optional, Sequence, Union

#: The codec and error handler of :func:`decode`.
ENCODING = "utf-8"
ERRORS = "replace"


def decode(data: Union[bytes, str, None]) -> str:
    """An external program's output as text: ``bytes`` decoded as UTF-8, each invalid byte replaced
    by U+FFFD; ``str`` returned as it is; None as ``""``. Never raises ``UnicodeDecodeError``."""
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return bytes(data).decode(ENCODING, ERRORS)


def run(argv: Sequence[str], timeout: float, input: Optional[str] = None, cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None) -> "subprocess.CompletedProcess[str]":
    """``subprocess.run(argv)`` with its output captured as bytes and decoded by :func:`decode`.

    Args:
        argv: the command.
        timeout: seconds before it is killed.
        input: text for its standard input (encoded as UTF-8), or None (no input).
        cwd, env: as for :func:`subprocess.run`.
    Returns:
        the completed process, ``stdout`` and ``stderr`` as ``str``.
    Raises:
        OSError: it could not be started (``FileNotFoundError`` when not on PATH).
        subprocess.TimeoutExpired: it ran over ``timeout`` seconds (it was killed).
    """
    proc = subprocess.run(list(argv), capture_output=True, timeout=timeout, cwd=cwd,
                          env=dict(env) if env is not None else None,
                          input=input.encode(ENCODING) if input is not None else None)
    return subprocess.CompletedProcess(proc.args, proc.returncode, decode(proc.stdout), decode(proc.stderr))
