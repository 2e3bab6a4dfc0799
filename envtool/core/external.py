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

Every reader of another program's output goes through here: the scheduler commands (``sbatch``,
``squeue``, ``scontrol``, ``sinfo``, ``bsub``/``bjobs``, ``qsub``/``qstat``), MPI (``ompi_info``,
``mpirun --version``, ``horovodrun --check-build``), ``nvidia-smi``, compilers and build tools
(``c++ --version``, ``cmake``, ``patchelf``, ``ldd``), Lmod, pip and uv. A number such a program
prints is read with :func:`small_int` (ASCII digits, bounded), never ``int()`` on what a regular
expression's ``\\d`` matched (it matches any Unicode digit, and ``int()`` refuses over 4,300 digits).
"""
from __future__ import annotations

import re
import subprocess
from typing import Callable, Mapping, Optional, Sequence, Union

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


def run(argv: Sequence[str], timeout: Optional[float], input: Optional[str] = None, cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        preexec_fn: Optional[Callable[[], None]] = None) -> "subprocess.CompletedProcess[str]":
    """``subprocess.run(argv)`` with its output captured as bytes and decoded by :func:`decode`.

    Args:
        argv: the command.
        timeout: seconds before it is killed (None: no limit).
        input: text for its standard input (encoded as UTF-8), or None: its standard input is
            ``/dev/null`` (a program that asks a question gets end-of-file, never the terminal).
        cwd, env, preexec_fn: as for :func:`subprocess.run`.
    Returns:
        the completed process, ``stdout`` and ``stderr`` as ``str``.
    Raises:
        OSError: it could not be started (``FileNotFoundError`` when not on PATH).
        subprocess.TimeoutExpired: it ran over ``timeout`` seconds (it was killed); its ``stdout``
            and ``stderr`` are bytes or None (:func:`decode` reads them).
    """
    feed = {"input": input.encode(ENCODING)} if input is not None else {"stdin": subprocess.DEVNULL}
    proc = subprocess.run(list(argv), capture_output=True, timeout=timeout, cwd=cwd,
                          env=dict(env) if env is not None else None, preexec_fn=preexec_fn, **feed)
    return subprocess.CompletedProcess(proc.args, proc.returncode, decode(proc.stdout), decode(proc.stderr))


#: the longest number :func:`small_int` reads (digits): exit statuses, indices, counts
SMALL_INT_DIGITS = 9
_SMALL_INT = re.compile(r"[+-]?[0-9]{1,%d}" % SMALL_INT_DIGITS)


def small_int(text: Optional[str]) -> Optional[int]:
    """A number another program printed (an exit status, a GPU index), or None when ``text`` is not
    ASCII digits (an optional sign, at most :data:`SMALL_INT_DIGITS` of them, blanks around
    allowed). Never raises: ``int()`` accepts other scripts' digits and refuses very long ones
    (``ValueError``), which a parser of external output must not pass on."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if _SMALL_INT.fullmatch(text) else None
