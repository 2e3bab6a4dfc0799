"""envtool's own directories (core layer).

The cache root is ``$ENVTOOL_CACHE_DIR``, else ``$XDG_CACHE_HOME/envtool`` (XDG Base Directory
Specification), else ``~/.cache/envtool``. Below it: ``horovod-wheels/`` (built wheels),
``pkgs/`` (conda package cache), ``repodata/``, ``logs/`` (build logs), ``fixes/`` (fix-rule
helper files), ``build/`` (temporary build directories), ``bytecode/`` (kept ``.pyc`` files).

Every one of them is private to its user: :func:`cache_dir` creates them mode ``0700`` whatever
the umask (a group member who could write ``pkgs/`` could edit files that are hard-linked into
the user's environments), tightens one of the user's own that is open to others, and refuses one
owned by another user.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

#: Mode of envtool's own cache directories (owner only).
PRIVATE_DIR_MODE = 0o700


def cache_root() -> Path:
    """The cache directory (not created; :func:`cache_dir` creates it)."""
    if os.environ.get("ENVTOOL_CACHE_DIR"):
        return Path(os.environ["ENVTOOL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "envtool"


def private_dir(path: Path) -> Path:
    """Make sure ``path`` is a directory of the current user with mode ``0700``.

    Created with ``os.mkdir(path, 0o700)`` then ``chmod`` (``mkdir``'s mode is masked by the
    umask, which can only take bits away, never add group write; the ``chmod`` makes the mode
    exact). A directory that exists is kept when the current user owns it, with group and
    other permissions removed. Missing parents are created with the default mode (they are
    not envtool's, e.g. ``~/.cache``).

    Args:
        path: the directory.
    Returns:
        ``path``.
    Raises:
        UsageError: ``path`` exists and is not a directory, or is owned by another user (exit 2,
            naming the path and the owner); it cannot be created (the OS error's text).
    """
    from envtool.core.errors import UsageError

    path = Path(path)
    try:
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileExistsError:
            pass
        st = os.stat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{path}: envtool's cache directory is not a directory")
        if st.st_uid != os.geteuid():
            raise UsageError(f"{path}: envtool's cache directory is owned by another user (uid {st.st_uid}), "
                             f"not by you (uid {os.geteuid()}); set ENVTOOL_CACHE_DIR to a directory of your own")
        if stat.S_IMODE(st.st_mode) != PRIVATE_DIR_MODE:
            os.chmod(path, PRIVATE_DIR_MODE)
    except OSError as exc:
        raise UsageError(f"{path}: cannot create envtool's cache directory: {exc.strerror or exc}") from None
    return path


def cache_dir(*parts: str) -> Path:
    """The cache root, or the directory ``parts`` below it, each level made private by
    :func:`private_dir` (``cache_dir("logs")`` makes the root and ``logs/`` mode ``0700``).

    Raises:
        UsageError: see :func:`private_dir`.
    """
    path = private_dir(cache_root())
    for part in parts:
        path = private_dir(path / part)
    return path


def ensure_dir(path: Path) -> Path:
    """Create directory ``path`` for envtool's use: when it lies inside the cache root, every level
    from the root down to it is made private (:func:`private_dir`); elsewhere (a directory the
    user named) it is created with ``mkdir -p``'s default mode.

    Returns:
        ``path``.
    Raises:
        UsageError: see :func:`private_dir`.
        OSError: a directory outside the cache root cannot be created.
    """
    path = Path(path)
    root = Path(os.path.abspath(cache_root()))
    here = Path(os.path.abspath(path))
    if here == root or root in here.parents:
        return cache_dir(*here.relative_to(root).parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
