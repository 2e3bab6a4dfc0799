"""Whether a venv can be packed, and which of its files name its prefix (:mod:`envtool.steps.pack`)."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from envtool.core.prefix import PrefixData
from envtool.steps.pack.contents import Entry, open_entry, walk
from envtool.steps.pack.model import NotPackable


def _site_packages(prefix: Path) -> List[Path]:
    return sorted(p for p in (prefix / "lib").glob("python*/site-packages") if p.is_dir())


def _names_prefix(entry: Entry, needle: bytes) -> Tuple[bool, bool]:
    """(names the prefix, is binary) of one regular file (:func:`open_entry`), read in chunks with overlap."""
    binary, tail = False, b""
    with open_entry(entry) as fh:
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                return False, binary
            binary = binary or b"\0" in chunk
            window = tail + chunk
            if needle in window:
                if not binary:  # a text file: read on for a NUL byte
                    for rest in iter(lambda: fh.read(1 << 20), b""):
                        if b"\0" in rest:
                            return True, True
                return True, binary
            tail = window[-(len(needle) - 1):]


def _record(rel: str) -> bool:
    """A file that records the source environment (its lockfile, ``.envtool/``): never rewritten (a
    rewritten lockfile would change its hash)."""
    return rel == "conda-lock.yml" or rel.startswith(".envtool/")


def scan_venv(prefix: Path) -> Tuple[List[str], List[str]]:
    """Files of a venv that name its prefix: ``(text files, binary files)``, paths relative to it.

    ``.pyc`` files (source paths for tracebacks only) and the environment's records (lockfile,
    ``.envtool/``) are not counted; only regular files are read (:func:`envtool.steps.pack.contents.walk`).

    Raises:
        NotPackable: a directory or file cannot be read (exit 2).
        CheckFailed: a file changed while it was read (exit 1).
    """
    needle = str(prefix).encode()
    text: List[str] = []
    binary: List[str] = []
    for entry in walk(prefix):  # the one walk of what a pack carries (links and special files skipped)
        if not stat.S_ISREG(entry.st.st_mode) or entry.path.endswith(".pyc") or _record(entry.rel):
            continue
        try:
            found, is_binary = _names_prefix(entry, needle)
        except OSError:
            continue
        if found:
            (binary if is_binary else text).append(entry.rel)
    return text, binary


def base_interpreter(prefix: Path, cfg: Dict[str, str]) -> str:
    """The venv's base interpreter, found from ``pyvenv.cfg`` (``executable``, then the
    ``bin/python`` link, then ``home``'s ``python3``/``python``).

    Raises:
        NotPackable: no ``home``, or no base interpreter exists at those paths.
    """
    home = cfg.get("home")
    if not home:
        raise NotPackable(f"{prefix / 'pyvenv.cfg'}: no 'home' (the base interpreter's directory): not a venv "
                          f"envtool can pack")
    exe = cfg.get("executable") or ""
    candidates = [exe] if exe else []
    link = PrefixData(prefix).python
    if link.is_symlink():
        candidates.append(os.path.realpath(link))
    candidates += [os.path.join(home, n) for n in ("python3", "python")]
    base: Optional[str] = next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)
    if base is None:
        raise NotPackable(f"{prefix}: the venv's base interpreter is missing ({exe or home}, from pyvenv.cfg): "
                          f"a venv runs only where its base interpreter exists at that path; re-create the venv "
                          f"from a Python that every compute node has (a module's Python)")
    if os.path.realpath(base).startswith(str(Path(prefix).resolve()) + os.sep):
        base = os.path.realpath(base)
    return base


def _pth_entries(sp: Path):
    """``(.pth file, entry)`` of every path entry of the ``.pth`` files in ``sp`` (comments and
    ``import`` lines left out)."""
    for pth in sorted(sp.glob("*.pth")):
        for line in pth.read_text(errors="replace").splitlines():
            entry = line.strip()
            if entry and not entry.startswith(("#", "import ", "import\t")):
                yield pth, entry


def check_paths(prefix: Path) -> None:
    """Every ``.pth`` entry of the venv lies inside it.

    Raises:
        NotPackable: one adds a directory outside (an editable install: its source is not in the pack).
    """
    for sp in _site_packages(prefix):
        for pth, entry in _pth_entries(sp):
            full = Path(entry) if os.path.isabs(entry) else sp / entry
            if not str(os.path.normpath(full)).startswith(str(prefix) + os.sep):
                raise NotPackable(f"{pth}: adds {entry} to sys.path, outside the environment (an editable "
                                  f"install?): its files are not in the pack; install the package normally")


def check_layer(prefix: Path) -> None:
    """Refuse a venv layered over a base (envtool's ``_envtool_layer.pth``,
    :data:`envtool.engines.layer.LAYER_PTH`, adds the base's site-packages at start-up): the base's
    packages are not in the pack, and the ``import`` line that adds them is not a path entry
    :func:`check_paths` reads.

    Raises:
        NotPackable: the layer's ``.pth`` file, the directories outside the environment it adds,
            and what to do.
    """
    from envtool.engines.layer import LAYER_PTH, pth_dirs

    for sp in _site_packages(prefix):
        pth = sp / LAYER_PTH
        if not pth.is_file() or pth.is_symlink():
            continue
        inside = str(prefix) + os.sep
        outside = [d for d in pth_dirs(pth.read_text(errors="replace"))
                   if not str(os.path.normpath(d)).startswith(inside)]
        if outside:
            raise NotPackable(f"{pth}: the environment is layered over a base and imports its packages from "
                              f"{', '.join(outside)}, outside the environment: they are not in the pack and the "
                              f"compute nodes may not have them; pack an environment that holds its packages (create "
                              f"it without layering), or use the base and the layer in place on a shared file system")


def check_venv(prefix: Path) -> Tuple[str, List[str]]:
    """Whether a venv can be packed: its base interpreter, and the text files to relocate.

    Returns:
        ``(base interpreter path, text files naming the prefix)``.
    Raises:
        NotPackable: the reason (see :mod:`envtool.steps.pack`).
    """
    cfg = PrefixData(prefix).venv_config()
    base = base_interpreter(prefix, cfg)
    if cfg.get("include-system-site-packages", "false").lower() == "true":
        raise NotPackable(f"{prefix}: the venv also imports the base interpreter's own site-packages "
                          f"(include-system-site-packages = true in pyvenv.cfg): those packages are not in the "
                          f"pack and may differ on the compute nodes; re-create it without "
                          f"--system-site-packages")
    check_layer(prefix)
    check_paths(prefix)
    text, binary = scan_venv(prefix)
    if binary:
        more = f" and {len(binary) - 5} more" if len(binary) > 5 else ""
        raise NotPackable(f"{prefix}: binary file(s) name the prefix and cannot be rewritten for another "
                          f"location: {', '.join(binary[:5])}{more}")
    return base, text
