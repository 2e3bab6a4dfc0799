"""Atomic file writes (core layer): a reader sees the old file or the new one, never half of one.

The text goes to a temporary sibling (same directory, so the same filesystem) and ``os.replace``
renames it over the target, which POSIX makes atomic; on any failure the temporary file is
removed and the target is left as it was.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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
