"""Lmod's system spider cache: find out whether a site uses one, and refresh it.

A site that configures ``scDescriptT`` in an ``lmodrc.lua`` (Lmod docs, "System Spider Cache")
makes ``module avail``/``spider`` read a pre-built cache instead of walking the tree; a new
module is invisible to them until ``update_lmod_system_cache_files`` (shipped in Lmod's
``libexec``) rebuilds the cache. Which cache directories and timestamp files are configured is
asked of Lmod itself: ``$LMOD_CMD bash --config_json`` reports them as ``cache: [[dir,
timestamp], …]`` (Lmod ``Configuration.lua``, ``report_json``), after reading every rc file
it knows (``LMOD_RC`` included), so envtool never reads ``lmodrc.lua`` on its own.
"""
from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import List, Optional, Tuple

from envtool.core import external
from envtool.core.errors import EnvtoolError


def lmod_cmd() -> Optional[str]:
    """The ``lmod`` program: ``$LMOD_CMD``, else Debian's ``/usr/share/lmod/lmod/libexec/lmod``
    (or a versioned ``/usr/share/lmod/<ver>/libexec/lmod``), else None."""
    cands = [os.environ.get("LMOD_CMD") or "", "/usr/share/lmod/lmod/libexec/lmod",
             *sorted(glob.glob("/usr/share/lmod/*/libexec/lmod"))]
    return next((c for c in cands if c and os.access(c, os.X_OK)), None)


def cache_dirs(env: Optional[dict] = None, timeout: float = 60) -> List[Tuple[str, str]]:
    """The system spider caches Lmod is configured with.

    Args:
        env: the environment to run Lmod in (default ``os.environ``; ``LMOD_RC`` matters).
        timeout: seconds.
    Returns:
        ``[(cache dir, timestamp file), …]``; empty when Lmod is not installed or the site
        configures none.
    Raises:
        EnvtoolError: Lmod ran but its answer could not be read.
    """
    cmd = lmod_cmd()
    if cmd is None:
        return []
    proc = external.run([cmd, "bash", "--config_json"], timeout=timeout,
                        env=env if env is not None else os.environ.copy())
    text = (proc.stdout.strip() or proc.stderr.strip())
    try:
        data = json.loads(text[text.index("{"):])
    except ValueError:
        raise EnvtoolError(f"could not read Lmod's configuration ({cmd} bash --config_json): "
                           f"{text[:200]!r}") from None
    return [(str(d), str(t)) for d, t in data.get("cache") or []]


def refresh(modulepath: str, caches: List[Tuple[str, str]], timeout: float = 600) -> List[str]:
    """Rebuild each system spider cache for ``modulepath`` with Lmod's
    ``update_lmod_system_cache_files -d DIR -t TIMESTAMP MODULEPATH``.

    Args:
        modulepath: the ``:``-separated module trees the cache covers (the site's whole
            ``MODULEPATH``, not only the new tree: the cache replaces the walk of all of them).
        caches: from :func:`cache_dirs`.
        timeout: seconds per cache.
    Returns:
        the cache directories refreshed.
    Raises:
        EnvtoolError: the script is missing or fails (its output in the message).
    """
    cmd = lmod_cmd()
    if cmd is None:
        raise EnvtoolError("Lmod's update_lmod_system_cache_files not found (is Lmod installed?)")
    script = Path(cmd).parent / "update_lmod_system_cache_files"
    done = []
    for cache_dir, stamp in caches:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        proc = external.run([str(script), "-d", cache_dir, "-t", stamp, modulepath], timeout=timeout)
        if proc.returncode != 0:
            raise EnvtoolError(f"{script} -d {cache_dir} -t {stamp} failed: {(proc.stderr or proc.stdout)[-500:]}")
        done.append(cache_dir)
    return done
