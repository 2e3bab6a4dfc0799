"""Move a freshly built environment from its build prefix to its final prefix.

A venv (and a conda env) names its prefix in text files: ``#!`` lines of scripts,
``bin/activate*``, ``pyvenv.cfg``, ``.pth`` files. Those are rewritten; binary files that embed
the build prefix (RPATHs, compiled strings) cannot be rewritten safely and are reported.
Compiled bytecode (``.pyc``) embeds source paths only for tracebacks and is left alone.

A file with more than one hard link is not read: it is shared with an installer's cache (uv's
wheel cache, py-rattler's package cache, envtool's kept bytecode), whose files existed before
this run's build prefix was named, so it cannot name it (installers write the files that name
the prefix — scripts, ``RECORD``, files with conda prefix placeholders — as new files). A large
file is scanned in chunks, never read whole.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

_SKIP_SUFFIXES = (".pyc",)
_CHUNK = 1 << 20


@dataclass
class RelocationReport:
    """What :func:`rewrite_prefix` did.

    Attributes:
        rewritten: text files whose prefix was replaced (paths relative to the prefix).
        binaries: binary files that still embed the old prefix (relative paths).
        scanned: number of files read.
    """

    rewritten: List[str] = field(default_factory=list)
    binaries: List[str] = field(default_factory=list)
    scanned: int = 0


def _scan(path: Path, needle: bytes, size: int, max_text_bytes: int):
    """Whether ``path`` contains ``needle``; whether it is binary (a NUL byte in what was read);
    its whole content when it is a text file of at most ``max_text_bytes`` that contains
    ``needle``, else None. Reads in chunks of :data:`_CHUNK` bytes with an overlap of
    ``len(needle) - 1`` so a match across chunks is found."""
    with open(path, "rb") as fh:
        if size <= max_text_bytes:
            data = fh.read()
            return needle in data, b"\0" in data, data
        tail = b""
        binary = False
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                return False, binary, None
            window = tail + chunk
            binary = binary or b"\0" in chunk
            if needle in window:
                return True, binary, None
            tail = window[-(len(needle) - 1):] if len(needle) > 1 else b""


def rewrite_prefix(root: Path, old: str, new: str, max_text_bytes: int = 8 << 20) -> RelocationReport:
    """Replace ``old`` by ``new`` in every text file under ``root``.

    Args:
        root: the directory to walk (symlinks are not followed, nor rewritten).
        old: the prefix string to replace (the build prefix).
        new: its replacement (the final prefix).
        max_text_bytes: files larger than this (bytes) are only scanned, never rewritten.
    Returns:
        a :class:`RelocationReport`.
    """
    report = RelocationReport()
    old_b, new_b = old.encode(), new.encode()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            if name.endswith(_SKIP_SUFFIXES) or path.is_symlink() or not path.is_file():
                continue
            try:
                st = path.stat()
            except OSError:
                continue
            if st.st_nlink > 1:
                continue  # shared with a cache: cannot name this run's build prefix
            report.scanned += 1
            size = st.st_size
            try:
                found, binary, data = _scan(path, old_b, size, max_text_bytes)
            except OSError:
                continue
            if not found:
                continue
            rel = str(path.relative_to(root))
            if binary or data is None:
                report.binaries.append(rel)
                continue
            mode = path.stat().st_mode
            tmp = path.with_name(path.name + ".envtool-tmp")
            tmp.write_bytes(data.replace(old_b, new_b))
            os.chmod(tmp, mode & 0o7777)
            os.replace(tmp, path)
            report.rewritten.append(rel)
    return report
