"""Opening a file the user named as input (core layer): regular files only, never a hang.

A FIFO given as a spec, a lock or ``check-build --from-file`` blocks ``open(2)`` until a writer
comes (forever, when none does); a device such as ``/dev/zero`` never reaches end of file.
:func:`open_input` refuses both, fast: it looks with ``stat(2)`` before opening, opens with
``O_NONBLOCK`` (which makes ``open`` of a FIFO return at once, fifo(7)) and checks the opened
file again with ``fstat(2)``, so a file swapped in between is caught too.
"""
from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from typing import BinaryIO, Optional

from envtool.core.errors import UsageError


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


class NotRegularFile(UsageError):
    """An input path names a FIFO, a device, a socket or a directory. Exit 2.

    Attributes:
        path: the path as given.
    """

    def __init__(self, path, kind: str, what: str = ""):
        self.path = str(path)
        super().__init__(f"{(what + ' ') if what else ''}{path}: expected a regular file, got {kind}")


def check_input(path, what: str = "") -> None:
    """Refuse ``path`` unless it is a regular file (following symlinks). A missing path passes
    (the caller's ``open`` says so in its own words).

    Args:
        path: the file.
        what: how the user named it, for the message (``--lock``, ``--from-file``).
    Raises:
        NotRegularFile: a FIFO, device, socket or directory (exit 2).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise NotRegularFile(path, _kind(mode), what)


def open_input(path, what: str = "") -> BinaryIO:
    """Open ``path`` for reading in binary mode, only if it is a regular file; never blocks.

    Args:
        path: the file.
        what: how the user named it, for the message.
    Returns:
        the open file (the caller closes it).
    Raises:
        NotRegularFile: a FIFO, device, socket or directory (exit 2).
        OSError: it cannot be opened (missing, no permission).
    """
    check_input(path, what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, _kind(mode), what)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_input(path, what: str = "", limit: Optional[int] = None) -> bytes:
    """The bytes of regular file ``path`` (at most ``limit + 1`` when ``limit`` is given, so the
    caller can tell that it is too big); see :func:`open_input` for what is refused.

    Raises:
        NotRegularFile, OSError: as :func:`open_input`.
    """
    with open_input(Path(path), what) as fh:
        return fh.read() if limit is None else fh.read(limit + 1)
