"""Disk use of directory trees, and sizes for people (core layer)."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional, Set, Tuple


def tree_size(path: Path, seen: Optional[Set[Tuple[int, int]]] = None) -> int:
    """Bytes of the files under ``path`` (``st_size`` of regular files), each inode counted once
    (hard links, such as uv's links into its cache, are not counted twice); symbolic links are
    not followed. Entries that vanish or cannot be read are skipped.

    Args:
        path: a directory (or a file).
        seen: ``(device, inode)`` pairs already counted (shared between calls to count a set of
            trees without double counting), or None.
    Returns:
        the size in bytes (0 when ``path`` is missing).
    """
    seen = set() if seen is None else seen
    total = 0
    stack = [os.fspath(path)]
    while stack:
        top = stack.pop()
        try:
            st = os.lstat(top)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                with os.scandir(top) as it:
                    stack.extend(e.path for e in it)
            except OSError:
                pass
        elif stat.S_ISREG(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key not in seen:
                seen.add(key)
                total += st.st_size
    return total


def human(n: int) -> str:
    """``n`` bytes for people, in SI units (``968.2 MB``; 1 MB = 10**6 bytes, as ``du --si``)."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"
