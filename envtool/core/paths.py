"""envtool's own directories (core layer).

The cache root is ``$ENVTOOL_CACHE_DIR``, else ``$XDG_CACHE_HOME/envtool`` (XDG Base Directory
Specification), else ``~/.cache/envtool``. Below it: ``horovod-wheels/`` (built wheels),
``pkgs/`` (conda package cache), ``repodata/``, ``logs/`` (build logs), ``fixes/`` (fix-rule
helper files), ``build/`` (temporary build directories), ``bytecode/`` (kept ``.pyc`` files),
``specs/`` (``envtool specs``'s remembered table, :mod:`envtool.spec.matrix_cache`).

Every one of them is private to its user: :func:`cache_dir` creates them mode ``0700`` whatever
the umask (a group member who could write ``pkgs/`` could edit files that are hard-linked into
the user's environments), tightens one of the user's own that is open to others, and refuses one
owned by another user. Before anything there is read, created, ``chmod``-ed or deleted, the path
to it is checked component by component from ``/`` (:func:`trusted_path`): a directory another
user owns or can write, or a symbolic link another user owns, is refused (exit 2), whatever the
path resolves to.
"""
from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path
from typing import Optional

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


#: Most symbolic links :func:`trusted_path` follows in one path (Linux's own limit, ``MAXSYMLINKS``
#: in path_resolution(7), https://man7.org/linux/man-pages/man7/path_resolution.7.html).
MAX_LINKS = 40


def owner_name(uid: int) -> str:
    """``uid``'s user name with the number (``"envtool-user (uid 1001)"``), or ``"uid N"`` when the
    password database does not know it."""
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def writable_by_others(st: os.stat_result) -> str:
    """Who besides its owner can write the file or directory with ``os.stat`` result ``st``:
    ``"every user"`` (the other-write bit), ``"group NAME (gid N)"`` (the group-write bit), or
    ``""`` (nobody). A group that is its owner's private group (same name as the owner, no other
    member listed) counts as nobody: with user private groups a ``umask 002`` gives group write
    to the owner alone (https://wiki.debian.org/UserPrivateGroups)."""
    import grp
    import pwd

    if st.st_mode & stat.S_IWOTH:
        return "every user"
    if not st.st_mode & stat.S_IWGRP:
        return ""
    try:
        group = grp.getgrgid(st.st_gid)
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        return f"group gid {st.st_gid}"
    if group.gr_name == owner and set(group.gr_mem) <= {owner}:
        return ""
    return f"group {group.gr_name} (gid {st.st_gid})"


def trusted_path(path: Path, what: str = "envtool's cache directory",
                 instead: str = "set ENVTOOL_CACHE_DIR to a directory of your own") -> Optional[os.stat_result]:
    """Check every component that leads to ``path``, from ``/``, without trusting what a path
    resolves to (``lstat`` each component, follow each link by hand).

    Each directory passed through must be owned by root or the current user and writable by
    nobody else (:func:`writable_by_others`), unless it is sticky (``/tmp``: others may add entries there but not rename or
    remove ours, see the sticky bit in inode(7),
    https://man7.org/linux/man-pages/man7/inode.7.html). A symbolic link anywhere on the way,
    ``path`` itself included, must be owned by root or the current user; its target is then
    checked the same way. Another user who could write a directory on the way, or who owns a
    link on it, could point ``path`` at anything (a directory of root's that envtool would then
    ``chmod`` or prune). The object ``path`` finally names is the caller's to judge (its owner
    and mode: :func:`private_dir`, :func:`check_cache`).

    Args:
        path: the path (a relative one is taken from the working directory).
        what: what ``path`` is, for the error (e.g. "envtool's cache directory").
        instead: what the user can do instead, for the error.
    Returns:
        the ``lstat`` of what ``path`` names (never a link), or None when a component is missing
        (what is missing is created below a checked directory) or is not a directory.
    Raises:
        UsageError: a component another user owns or can write, a link another user owns, or
            more than :data:`MAX_LINKS` links (exit 2, naming ``path``, the component, its owner
            and mode).
    """
    from envtool.core.errors import UsageError

    me = os.geteuid()
    text = os.fspath(path)
    if not text.startswith("/"):
        text = os.path.join(os.getcwd(), text)
    todo = [p for p in text.split("/") if p not in ("", ".")][::-1]  # a stack: the next name last
    here = "/"
    st = os.lstat(here)
    links = 0
    while True:
        if not todo:
            return st
        if st.st_uid not in (0, me):
            raise UsageError(f"{what} {path}: {here} is owned by {owner_name(st.st_uid)}, not by you or root, "
                             f"so its owner could point {path} anywhere; envtool will not use it ({instead})")
        mode = stat.S_IMODE(st.st_mode)
        who = "" if mode & stat.S_ISVTX else writable_by_others(st)
        if who:
            raise UsageError(f"{what} {path}: {here} (owner {owner_name(st.st_uid)}, mode {mode:04o}) is writable by "
                             f"{who}, who could replace what {path} names; envtool will not use it "
                             f"(chmod go-w {shlex.quote(here)}, or {instead})")
        name = todo.pop()
        if name == "..":
            here = os.path.dirname(here)  # ``here`` holds no link: its parent is what the kernel takes
            st = os.lstat(here)
            continue
        nxt = os.path.join(here, name)
        try:
            st = os.lstat(nxt)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (0, me):
                raise UsageError(f"{what} {path}: {nxt} is a symbolic link owned by {owner_name(st.st_uid)}, not by "
                                 f"you or root; envtool does not follow another user's link ({instead})")
            links += 1
            if links > MAX_LINKS:
                raise UsageError(f"{what} {path}: more than {MAX_LINKS} symbolic links on the way (a loop?)")
            target = os.readlink(nxt)
            if target.startswith("/"):
                here = "/"
            todo.extend([p for p in target.split("/") if p not in ("", ".")][::-1])
            st = os.lstat(here)
            continue
        if todo and not stat.S_ISDIR(st.st_mode):
            return None
        here = nxt


def _final_problem(path: Path, st: os.stat_result) -> Optional[str]:
    """Why the cache directory ``path`` (``st``: its ``lstat``, reached through a trusted path) is
    not the current user's to use, or None."""
    if not stat.S_ISDIR(st.st_mode):
        return f"{path}: envtool's cache directory is not a directory"
    if st.st_uid != os.geteuid():
        return (f"{path}: permission denied: envtool's cache directory is owned by another user "
                f"({owner_name(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}), not by you (uid {os.geteuid()}); "
                "set ENVTOOL_CACHE_DIR to a directory of your own")
    return None


def check_cache(*parts: str) -> Path:
    """The cache root, checked for a command that reads or deletes what is in it (``cache prune``,
    ``cache publish``) without creating or ``chmod``-ing anything: the path to the root and to
    each directory ``parts`` below it passes :func:`trusted_path`, and each of them that exists
    is a directory of the current user's that nobody else can write (the rule :func:`cache_dir`
    applies for ``create``, which also makes them private).

    Args:
        parts: directories below the root that the command will read (e.g. ``"logs"``).
    Returns:
        the cache root (which may not exist).
    Raises:
        UsageError: a component another user owns or can write, a link another user owns, or a
            cache directory that is not the user's or that others can write (exit 2, naming the
            directory, its owner and mode).
    """
    from envtool.core.errors import UsageError

    root = cache_root()
    for path in [root] + [root / p for p in parts]:
        st = trusted_path(path)
        if st is None:
            continue
        problem = _final_problem(path, st)
        mode = stat.S_IMODE(st.st_mode)
        who = writable_by_others(st)
        if not problem and who:
            problem = (f"{path}: envtool's cache directory (owner {owner_name(st.st_uid)}, mode {mode:04o}) is "
                       f"writable by {who}, who could have put anything there; envtool will not read or "
                       f"delete in it (chmod go-w {shlex.quote(str(path))}; envtool create makes its own cache private)")
        if problem:
            raise UsageError(problem)
    return root


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
    exists must be the current user's, reached through a path no other user controls
    (:func:`trusted_path`, checked before anything is created or ``chmod``-ed). When it is envtool's (``ours``, or it holds nothing but
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
        UsageError: ``path`` exists and is not a directory, is owned by another user, is a
            directory envtool did not make that others can write, or the path to it passes
            through a directory another user owns or can write or a link another user owns
            (exit 2, naming the path and the component).
        OSError: it cannot be created (read-only or full filesystem, no permission: the command
            reports it as a condition naming the path, :func:`envtool.core.errors.condition_message`).
    """
    from envtool.core.errors import UsageError

    path = Path(path)
    trusted_path(path)
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, PRIVATE_DIR_MODE)
        ours = True
    except FileExistsError:
        pass
    st = trusted_path(path)  # what was there, or what mkdir made (the path to it checked again)
    if st is None:
        raise UsageError(f"{path}: envtool's cache directory is not a directory")
    problem = _final_problem(path, st)
    if problem:
        raise UsageError(problem)
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
