"""Move a freshly built environment from its build prefix to its final prefix.

A venv (and a conda env) names its prefix in text files: ``#!`` lines of scripts,
``bin/activate*``, ``pyvenv.cfg``, ``.pth`` files. Those are rewritten; binary files that embed
the build prefix (RPATHs, compiled strings) cannot be rewritten safely and are reported.
Compiled bytecode (``.pyc``) embeds source paths only for tracebacks and is left alone.
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
            report.scanned += 1
            try:
                size = path.stat().st_size
                with open(path, "rb") as fh:
                    head = fh.read(_CHUNK)
                    if old_b not in head and size <= _CHUNK:
                        continue
                    data = head + fh.read() if size > _CHUNK else head
            except OSError:
                continue
            if old_b not in data:
                continue
            rel = str(path.relative_to(root))
            if b"\0" in data or size > max_text_bytes:
                report.binaries.append(rel)
                continue
            mode = path.stat().st_mode
            tmp = path.with_name(path.name + ".envtool-tmp")
            tmp.write_bytes(data.replace(old_b, new_b))
            os.chmod(tmp, mode & 0o7777)
            os.replace(tmp, path)
            report.rewritten.append(rel)
    return report
