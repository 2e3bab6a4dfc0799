"""envtool's own directories (core layer).

The cache root is ``$ENVTOOL_CACHE_DIR``, else ``$XDG_CACHE_HOME/envtool`` (XDG Base Directory
Specification), else ``~/.cache/envtool``. Below it: ``horovod-wheels/`` (built wheels),
``pkgs/`` (conda package cache), ``repodata/``, ``logs/`` (build logs), ``fixes/`` (fix-rule
helper files), ``build/`` (temporary build directories), ``bytecode/`` (kept ``.pyc`` files),
``specs/`` (``envtool specs``'s remembered table, :mod:`envtool.spec.matrix_cache`).

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
#: What envtool keeps in its cache root: a root holding nothing else is envtool's to tighten.
CACHE_ENTRIES = frozenset({"horovod-wheels", "pkgs", "repodata", "logs", "fixes", "build", "bytecode", "specs"})


def cache_root() -> Path:
    """The cache directory (not created; :func:`cache_dir` creates it)."""
    if os.environ.get("ENVTOOL_CACHE_DIR"):
        return Path(os.environ["ENVTOOL_CACHE_DIR"])
    return default_cache_root()


def default_cache_root() -> Path:
    """The cache directory when ``$ENVTOOL_CACHE_DIR`` is unset: ``$XDG_CACHE_HOME/envtool``, else
    ``~/.cache/envtool`` (XDG Base Directory Specification,
    https://specifications.freedesktop.org/basedir-spec/latest/)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "envtool"


def _envtools(path: Path) -> bool:
    """True when directory ``path`` holds nothing but what envtool keeps there (:data:`CACHE_ENTRIES`)."""
    try:
        return set(os.listdir(path)) <= CACHE_ENTRIES
    except OSError:
        return False


def private_dir(path: Path, ours: bool = True) -> Path:
    """Make sure ``path`` is a directory of the current user that nobody else can enter.

    Created with ``os.mkdir(path, 0o700)`` then ``chmod`` (``mkdir``'s mode is masked by the
    umask, which can only take bits away; the ``chmod`` makes the mode exact). A directory that
    exists must be the current user's. When it is envtool's (``ours``, or it holds nothing but
    :data:`CACHE_ENTRIES`), group and other permissions are removed. Otherwise (``$ENVTOOL_CACHE_DIR``
    naming a directory envtool did not make) its mode is left alone when nobody else can write
    it, and it is refused when someone can (envtool does not change the mode of what it did not
    make). Missing parents are created with the default mode (they are not envtool's, e.g.
    ``~/.cache``).

    Args:
        path: the directory.
        ours: ``path`` is envtool's own (a directory below the cache root); False for the root.
    Returns:
        ``path``.
    Raises:
        UsageError: ``path`` exists and is not a directory, is owned by another user, or is a
            directory envtool did not make that others can write (exit 2, naming the path).
        OSError: it cannot be created (read-only or full filesystem, no permission: the command
            reports it as a condition naming the path, :func:`envtool.core.errors.condition_message`).
    """
    from envtool.core.errors import UsageError

    path = Path(path)
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, PRIVATE_DIR_MODE)
        ours = True
    except FileExistsError:
        pass
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path}: envtool's cache directory is not a directory")
    if st.st_uid != os.geteuid():
        raise UsageError(f"{path}: permission denied: envtool's cache directory is owned by another user "
                         f"(uid {st.st_uid}), not by you (uid {os.geteuid()}); set ENVTOOL_CACHE_DIR to a "
                         "directory of your own")
    mode = stat.S_IMODE(st.st_mode)
    if mode != PRIVATE_DIR_MODE and (ours or _envtools(path)):
        os.chmod(path, PRIVATE_DIR_MODE)
    elif mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UsageError(f"{path}: envtool's cache directory can be written by others (mode {mode:04o}) and "
                         "holds files envtool did not put there; set ENVTOOL_CACHE_DIR to a directory of your "
                         "own (envtool makes it private)")
    return path


def cache_dir(*parts: str) -> Path:
    """The cache root, or the directory ``parts`` below it, each level made private by
    :func:`private_dir` (``cache_dir("logs")`` makes the root and ``logs/`` mode ``0700``).

    Raises:
        UsageError, OSError: see :func:`private_dir`.
    """
    path = private_dir(cache_root(), ours=False)
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
