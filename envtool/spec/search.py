"""Where spec and site files are found: each directory of ``ENVTOOL_SPEC_PATH`` (or
``ENVTOOL_SITE_PATH``), ``:``-separated, then the bundled ones (``specs/``, ``sites/`` of the source
tree, or ``envtool/_bundled/`` in an installed wheel). Standard library only: ``envtool specs``
lists the files before it knows whether it must read them (:mod:`envtool.spec.matrix_cache`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def bundled_dir(kind: str) -> Path:
    """The bundled directory for ``kind`` (``specs`` or ``sites``)."""
    installed = _PACKAGE_DIR / "_bundled" / kind
    if installed.is_dir():
        return installed
    return _PACKAGE_DIR.parent / kind


def search_dirs(kind: str = "specs", env_var: str = "ENVTOOL_SPEC_PATH") -> List[Path]:
    """Directories searched for ``kind`` files, highest priority first."""
    dirs = [Path(p) for p in os.environ.get(env_var, "").split(os.pathsep) if p]
    dirs.append(bundled_dir(kind))
    return dirs


def available(kind: str = "specs", env_var: str = "ENVTOOL_SPEC_PATH") -> Dict[str, Path]:
    """Map name → file for every spec found (an earlier directory shadows a later one)."""
    found: Dict[str, Path] = {}
    for d in search_dirs(kind, env_var):
        if not d.is_dir():
            continue
        for f in sorted(list(d.glob("*.yaml")) + list(d.glob("*.yml"))):
            found.setdefault(f.stem, f)
    return found
