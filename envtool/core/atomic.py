"""Atomic file writes (core layer): a reader sees the old file or the new one, never half of one.

The text goes to a temporary sibling (same directory, so the same filesystem) and ``os.replace``
renames it over the target, which POSIX makes atomic; on any failure the temporary file is
removed and the target is left as it was.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from envtool.core.errors import naming


def umask_mode(base: int = 0o666) -> int:
    """``base`` less the process's umask: the mode ``open(2)`` would give a new file (umask(2)).

    ``tempfile.mkstemp`` creates its files ``0600`` whatever the umask (Python docs, "tempfile"),
    so a file written through it is chmod-ed to this before it is renamed into place: a lock of a
    shared environment must be readable by those who may read the environment.

    The umask is read from ``/proc/self/status`` (``Umask:``, Linux 4.7+: proc(5)), else by setting
    and restoring it.
    """
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return base & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return base & ~mask


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically, with permission bits ``mode``.

    Args:
        path: the target file; its directory must exist.
        text: the content.
        mode: permission bits of the new file (default ``0o644``: readable by everyone, as module
            trees and SBOMs published for a group must be).
    Returns:
        ``path``.
    Raises:
        OSError: the directory is not writable, the disk is full …
    """
    path = Path(path)
    with naming(path):
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        except OSError as exc:  # name the file asked for, not the temporary one
            exc.filename = str(path)
            raise
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return path
