"""envtool's own directories (core layer).

The cache root is ``$ENVTOOL_CACHE_DIR``, else ``$XDG_CACHE_HOME/envtool`` (XDG Base Directory
Specification), else ``~/.cache/envtool``. Below it: ``horovod-wheels/`` (built wheels),
``pkgs/`` (conda package cache), ``repodata/``, ``logs/`` (build logs), ``fixes/`` (fix-rule
helper files), ``build/`` (temporary build directories).
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The cache directory (not created)."""
    if os.environ.get("ENVTOOL_CACHE_DIR"):
        return Path(os.environ["ENVTOOL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "envtool"
