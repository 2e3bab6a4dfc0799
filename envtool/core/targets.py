"""What ``--force`` may replace (core layer): an environment, and nothing that holds the user's work.

``create --force``, ``clone --force`` (and ``publish --force``, which builds through ``create``)
replace the directory at the target prefix. :func:`check_replaceable` is the one gate they share:
it lets through only a directory that is an environment (:func:`is_environment`) and refuses,
with exit 2 and before anything is touched, a symbolic link, the current directory or one of its
ancestors, the home directory or one of its ancestors, and envtool's cache roots (the user's,
``$ENVTOOL_CACHE_PATH``'s) together with anything inside them or around them. Every comparison
is made between resolved paths (``os.path.realpath``), so ``--prefix ALIAS/..`` through a
symlink is seen for what it is.

Facts it encodes:

* a venv has ``pyvenv.cfg`` at its root (PEP 405, https://peps.python.org/pep-0405/);
* a conda environment has ``conda-meta/history`` and one ``conda-meta/*.json`` package record
  per installed package (conda docs, "Conda environments" and "Package metadata",
  https://docs.conda.io/projects/conda/en/latest/user-guide/concepts/environments.html);
* an environment envtool made carries ``.envtool/create.json`` (written by
  :mod:`envtool.steps.create.workflow`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

from envtool.core.errors import UsageError
from envtool.core.paths import cache_root
from envtool.core.prefix import PrefixData

#: ``$ENVTOOL_CACHE_PATH``: site caches (``:``-separated), read by :mod:`envtool.horovod.cache` too.
CACHE_PATH_VAR = "ENVTOOL_CACHE_PATH"


def is_environment(path: Path) -> Optional[str]:
    """Why ``path`` counts as an environment (a short phrase), or None when it does not.

    Args:
        path: a directory (not followed if it is a symlink: a link is never an environment here).
    Returns:
        ``"envtool recorded it (.envtool/create.json)"``, ``"a venv (pyvenv.cfg)"``,
        ``"a conda environment (conda-meta/…)"`` or None.
    """
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        return None
    if (path / ".envtool" / "create.json").is_file():
        return "envtool recorded it (.envtool/create.json)"
    return PrefixData(path).environment_kind()


def _real(path) -> str:
    return os.path.realpath(os.path.expanduser(str(path)))


def _within(inner: str, outer: str) -> bool:
    """Whether resolved path ``inner`` is ``outer`` or below it."""
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def protected_roots() -> List[tuple]:
    """``(resolved path, what it is)`` of the directories ``--force`` never replaces nor reaches into.

    The user's cache root (:func:`envtool.core.paths.cache_root`) and every ``$ENVTOOL_CACHE_PATH``
    directory: a target inside one, equal to one, or containing one is refused. The current
    directory and the home directory: a target equal to one or containing one is refused.
    """
    roots = [(_real(cache_root()), "the envtool cache")]
    for item in os.environ.get(CACHE_PATH_VAR, "").split(":"):
        if item.strip():
            roots.append((_real(item), f"a site cache (${CACHE_PATH_VAR})"))
    return roots


def check_outside_source(target: Path, source: Path, option: str = "--prefix") -> None:
    """Refuse a clone target that is the clone source or lies inside it, comparing resolved paths
    (``--prefix ALIAS/inner`` with ALIAS a symlink to the source is inside it).

    Raises:
        UsageError: exit 2, naming both paths.
    """
    real_target, real_src = _real(target), _real(source)
    if _within(real_target, real_src):
        shown = f" (resolved: {real_target})" if real_target != os.path.abspath(str(target)) else ""
        raise UsageError(f"{option} {target}{shown} is inside the clone source {source}, which a clone never "
                         "writes to")


def check_replaceable(target: Path, option: str = "--prefix", source: Optional[Path] = None) -> None:
    """Refuse to replace ``target`` unless it is an environment that holds nothing else of value.

    Args:
        target: the existing target prefix (as given; resolved here).
        option: the option that named it, for the message.
        source: a clone source: a target that contains it is refused too.
    Raises:
        UsageError: exit 2, naming the path and why: a symbolic link; the current directory, the
            home directory or one of their ancestors; an envtool cache root, inside one or
            containing one; the clone source's ancestor; not a directory; not an environment.
    """
    shown = str(target)
    if os.path.islink(target):
        raise UsageError(f"{option} {shown} is a symbolic link (to {os.readlink(target)}); --force replaces only "
                         "an environment directory itself, never through a link, so nothing was touched: give the real "
                         "path")
    real = _real(target)
    why = None
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        cwd = None
    home = _real("~")
    if cwd and _within(cwd, real):
        why = "the current directory" if cwd == real else f"an ancestor of the current directory {cwd}"
    elif home and home != "/" and _within(home, real):
        why = "your home directory" if home == real else f"an ancestor of your home directory {home}"
    elif source is not None and _within(_real(source), real):
        why = f"the clone source {source} or one of its ancestors"
    else:
        for root, what in protected_roots():
            if _within(real, root) or _within(root, real):
                why = (f"{what} ({root})" if real == root else
                       f"inside {what} ({root})" if _within(real, root) else f"an ancestor of {what} ({root})")
                break
    if why is None and not os.path.isdir(real):
        why = "not a directory"
    if why is None and is_environment(Path(real)) is None:
        why = ("not an environment (no pyvenv.cfg, no conda-meta/history or conda-meta/*.json, no "
               ".envtool/create.json)")
    if why is not None:
        resolved = f" (resolved: {real})" if real != os.path.abspath(shown) else ""
        raise UsageError(f"{option} {shown}{resolved} is {why}; --force replaces only an environment, so nothing "
                         "was touched: choose another --prefix, or move it away yourself")
