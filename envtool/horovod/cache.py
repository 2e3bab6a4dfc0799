"""A user cache of built Horovod wheels, keyed by everything that changes the binary.

Layout: ``<root>/horovod-wheels/<key>/`` holds one ``horovod-*.whl`` and ``key.json`` (the
inputs of the key, for people and for ``lock``). ``<root>`` is ``$ENVTOOL_CACHE_DIR``, else
``$XDG_CACHE_HOME/envtool``, else ``~/.cache/envtool``.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Tuple

from envtool.core.paths import cache_root


@dataclass(frozen=True)
class BuildKey:
    """The inputs that change a Horovod binary.

    Attributes:
        requirement: what pip built (``horovod==0.28.1`` or a ``git+…@commit`` URL).
        build_env: sorted ``HOROVOD_*`` assignments (``MAKEFLAGS`` excluded).
        frameworks: sorted ``(distribution, version)`` of the installed frameworks.
        python_tag: ``cp311``.
        compiler: first line of the real C++ compiler's ``--version``.
        platform: ``linux-64``-style platform.
        mpi: first line of the MPI implementation's version, or ``none``.
        fixes: ids of the fix rules applied.
    """

    requirement: str
    build_env: Tuple[Tuple[str, str], ...]
    frameworks: Tuple[Tuple[str, str], ...]
    python_tag: str
    compiler: str
    platform: str
    mpi: str
    fixes: Tuple[str, ...]

    def digest(self) -> str:
        """A 20-hex-digit SHA-256 prefix of the canonical JSON form."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


class WheelCache:
    """Built wheels under ``root/horovod-wheels``; safe against concurrent writers (atomic rename)."""

    def __init__(self, root: Optional[Path] = None):
        self.root = Path(root) if root else cache_root()
        self.dir = self.root / "horovod-wheels"

    def lookup(self, key: BuildKey) -> Optional[Path]:
        """The cached wheel for ``key``, or None."""
        entry = self.dir / key.digest()
        wheels = sorted(entry.glob("*.whl")) if entry.is_dir() else []
        return wheels[0] if wheels else None

    def store(self, key: BuildKey, wheel: Path) -> Path:
        """Copy ``wheel`` into the cache under ``key`` and return the cached path."""
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.dir / key.digest()
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.dir))
        shutil.copy2(wheel, tmp / wheel.name)
        (tmp / "key.json").write_text(json.dumps(asdict(key), indent=2, sort_keys=True) + "\n")
        try:
            os.rename(tmp, final)
        except OSError:  # another process stored the same key first
            shutil.rmtree(tmp, ignore_errors=True)
        return self.lookup(key) or final / wheel.name
