"""What ``pack`` knows without packing: names inside a pack, the kind of an environment, the
output file, the result (:mod:`envtool.steps.pack`)."""
from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional

from envtool.core.errors import UsageError
from envtool.core.prefix import PrefixData

FORMATS = ("tar", "squashfs")
#: where the manifest, the SBOM and the relocation script live inside a pack
MANIFEST = ".envtool/pack.json"
SBOM = ".envtool/sbom.cdx.json"
UNPACK_SCRIPT = ".envtool/unpack.py"
LOCK_NAMES = ("conda-lock.yml", ".envtool/conda-lock.yml")
TMP_PREFIX = ".envtool-pack-"


class NotPackable(UsageError):
    """The environment cannot be packed; the message says why (exit 2)."""


@dataclass
class PackResult:
    """What :func:`envtool.steps.pack.pack` made.

    Attributes:
        path: the pack file (absolute).
        format: ``tar`` or ``squashfs``.
        kind: ``conda`` or ``venv``.
        lock_sha256: sha256 (hex) of the lockfile inside the pack.
        size: size of the file (bytes).
        seconds: wall-clock time the pack took (s).
        prefix: the source environment.
        lock: the lockfile's path inside the pack; lock_source: ``prefix`` (the environment's own)
            or ``snapshot`` (made by this pack).
        base_python: a venv's base interpreter, which must exist at this path on the compute
            nodes; None for a conda environment.
        dest_prefix: the directory a squashfs image must be mounted at (None for a tar).
        unpack: the command to run in the unpacked directory after a tar is unpacked (words,
            paths relative to it), [] when none is needed.
        notes: what the user must know (the base interpreter requirement …).
        log: the build log of the pack (every step's output), or None.
        timings: seconds each step took, by step id.
    """

    path: Path
    format: str
    kind: str
    lock_sha256: str
    size: int
    seconds: float
    prefix: Path
    lock: str = "conda-lock.yml"
    lock_source: str = "prefix"
    base_python: Optional[str] = None
    dest_prefix: Optional[str] = None
    unpack: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    log: Optional[Path] = None
    timings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready fields (paths as strings)."""
        d = asdict(self)
        d["path"], d["prefix"] = str(self.path), str(self.prefix)
        d["log"] = str(self.log) if self.log else None
        d["seconds"] = round(self.seconds, 3)
        return d


def sha256(path: Path) -> str:
    """The sha256 (hex) of the file at ``path``, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def kind_of(prefix: Path) -> str:
    """``conda`` (``conda-meta/`` holds package records) or ``venv`` (``pyvenv.cfg`` without them).

    Raises:
        NotPackable: neither, or not a directory.
    """
    prefix = Path(prefix)
    if not prefix.is_dir():
        raise NotPackable(f"{prefix}: no such environment (not a directory)")
    data = PrefixData(prefix)
    if data.has_conda_records:
        return "conda"
    if data.is_venv:
        return "venv"
    raise NotPackable(f"{prefix}: not an environment envtool can pack: neither a conda environment "
                      f"(conda-meta/*.json) nor a venv (pyvenv.cfg)")


def unpacked_kib(prefix: Path) -> int:
    """Room the environment takes once unpacked: its files' sizes rounded up to 4 KiB blocks, plus
    one block per directory and symbolic link (KiB). Hard links count once."""
    total, seen = 0, set()
    for dirpath, dirnames, filenames in os.walk(prefix):
        total += 4 * (1 + len([d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]))
        for name in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += 4 * max(1, -(-st.st_size // 4096))
    return total


def default_output(prefix: Path, fmt: str) -> Path:
    """``./<prefix name>.tar`` or ``./<prefix name>.squashfs``."""
    return Path.cwd() / f"{Path(prefix).name}.{fmt}"


def output_path(prefix: Path, fmt: str, output: Optional[Path] = None, force: bool = False) -> Path:
    """The file :func:`envtool.steps.pack.pack` would write, checked as it checks it before packing
    (also what ``pack --dry-run`` reports).

    Args:
        prefix: the environment (absolute).
        fmt: ``tar`` or ``squashfs``.
        output: the file asked for (default :func:`default_output`).
        force: an existing file may be replaced.
    Returns:
        the absolute path.
    Raises:
        UsageError: its directory does not exist, it is a directory, it exists without ``force``,
            or it lies inside the environment through any alias (exit 2): its directory, resolved,
            is the environment or below it, or one of that directory's ancestors is the
            environment's very directory, or it is one of the environment's directories under
            another name (same ``st_dev``/``st_ino``: a bind mount).
    """
    out = Path(os.path.abspath(output)) if output else default_output(prefix, fmt)
    if not out.parent.is_dir():
        raise UsageError(f"-o {out}: the directory {out.parent} does not exist")
    if out.is_dir():
        raise UsageError(f"-o {out}: is a directory; expected a file name")
    if (out.exists() or out.is_symlink()) and not force:
        raise UsageError(f"-o {out}: exists; remove it or give --force to replace it")
    if str(out).startswith(str(prefix) + os.sep) or _inside(out.parent, prefix):
        raise UsageError(f"-o {out}: inside the environment being packed ({prefix}"
                         + ("" if str(out).startswith(str(prefix) + os.sep) else
                            f", which {out.parent} leads into") + "); write it elsewhere")
    return out


def _inside(directory: Path, prefix: Path) -> bool:
    """Whether ``directory`` is ``prefix`` or below it through any alias: a symbolic link (compared
    resolved), a bind mount of the environment (compared by ``st_dev``/``st_ino`` of each ancestor)
    or of a directory inside it (``directory``'s identity compared with every directory of the
    environment, walked without following links)."""
    real, root = os.path.realpath(directory), os.path.realpath(prefix)
    if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
        return True
    try:
        st = os.stat(prefix)
        here_st = os.stat(directory)
    except OSError:
        return False
    if here_st.st_dev == st.st_dev:  # a bind mount shows the device of what it mounts
        wanted = (here_st.st_dev, here_st.st_ino)
        for dirpath, _dirnames, _files in os.walk(prefix):  # os.walk never descends into links
            try:
                d = os.lstat(dirpath)
            except OSError:
                continue
            if (d.st_dev, d.st_ino) == wanted:
                return True
    here = real
    while True:
        try:
            s = os.stat(here)
        except OSError:
            return False
        if (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino):
            return True
        parent = os.path.dirname(here)
        if parent == here:
            return False
        here = parent

