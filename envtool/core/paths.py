"""envtool's own directories (core layer), and the one rule for trusting a path (issue 43).

The cache root is ``$ENVTOOL_CACHE_DIR``, else ``$XDG_CACHE_HOME/envtool`` (XDG Base Directory
Specification), else ``~/.cache/envtool``. Below it: ``horovod-wheels/`` (built wheels),
``pkgs/`` (conda package cache), ``repodata/``, ``logs/`` (build logs), ``fixes/`` (fix-rule
helper files), ``build/`` (temporary build directories), ``bytecode/`` (kept ``.pyc`` files),
``specs/`` (``envtool specs``'s remembered table, :mod:`envtool.spec.matrix_cache`).

Ownership is checked on what is used, not on what a path resolves to. Every command that reads,
writes or deletes in a cache (``create``, ``cache prune``, ``cache publish``, ``pack``, ``image``,
``publish``: :func:`check_cache` to read or delete, :func:`cache_dir` to write), the state
directory (:mod:`envtool.core.registry`) and the configuration files (:func:`open_trusted_file`)
go through the same two checks:

1. the way to it (:func:`trusted_path`): from ``/``, component by component, with ``lstat`` and
   links followed by hand, every directory passed through is root's or the caller's and writable
   by nobody else (group included) unless sticky, and every link is root's or the caller's;
2. what it names (:func:`owned_problem`): the caller's own (root's too, for a file), writable by
   nobody else, group included.

Read-only caches (a site's wheel caches, ``$ENVTOOL_CACHE_PATH``) go through the same walk with
the cache's owner trusted besides root and the caller (:func:`site_cache_problem`); ``cache list``
and ``info`` read the user's cache only when :func:`check_cache` passes, and the bytecode store is
made by :func:`ensure_dir` before the compile probe runs. :func:`own_directory` says what envtool
may delete or finish (a wheel entry, an aside copy): a directory of the caller's, not a link.

Since nobody else can write a directory on the way, nobody else can rename or replace what the
path names between the check and the use; the final object is then opened ``O_NOFOLLOW``
(:func:`open_trusted_file`, :func:`private_dir`'s ``fchmod``) and compared, device and inode,
with what was checked. A refusal is exit 2, naming where the path came from (the variable), the
path, the component, its owner and mode.

envtool never changes the mode of a directory it did not create: a cache root envtool creates gets
a ``CACHEDIR.TAG`` (the Cache Directory Tagging Specification, https://bford.info/cachedir/),
and only a root holding envtool's tag, what is below it, and what envtool has just made are
made private (``0700``). Any other directory is used as it is when nobody else can write it, and
refused (with the ``chmod`` that fixes it) when someone can.
"""
from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path
from typing import Optional, Sequence, Tuple

#: Mode of envtool's own cache directories (owner only).
PRIVATE_DIR_MODE = 0o700
#: What envtool keeps in its cache root: a root holding nothing else is envtool's to tighten.
CACHE_ENTRIES = frozenset({"horovod-wheels", "pkgs", "repodata", "logs", "fixes", "build", "bytecode", "specs",
                           "pip-config"})
#: The file that marks a cache root envtool created (https://bford.info/cachedir/): its first line
#: is the specification's signature, so backup tools skip the cache; the second names envtool.
CACHE_TAG = "CACHEDIR.TAG"
CACHE_TAG_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                  "# envtool created this cache directory (see https://bford.info/cachedir/)\n")
#: Where the cache root's setting came from, when a configuration file set it (``envtool.cli.settings``).
_root_origin: dict = {}


def cache_root() -> Path:
    """The cache directory (not created; :func:`cache_dir` creates it)."""
    if os.environ.get("ENVTOOL_CACHE_DIR"):
        return Path(os.environ["ENVTOOL_CACHE_DIR"])
    return default_cache_root()


def note_origin(where: str) -> None:
    """Remember that ``$ENVTOOL_CACHE_DIR`` was set by the configuration file ``where`` (called by
    :func:`envtool.cli.settings.apply`), so an error about the cache root names that file."""
    _root_origin["ENVTOOL_CACHE_DIR"] = where


def cache_origin() -> str:
    """Where the cache root :func:`cache_root` comes from, for errors: ``$ENVTOOL_CACHE_DIR`` (with
    the configuration file that set it), ``$XDG_CACHE_HOME/envtool`` or ``~/.cache/envtool``."""
    if os.environ.get("ENVTOOL_CACHE_DIR"):
        where = _root_origin.get("ENVTOOL_CACHE_DIR")
        return "$ENVTOOL_CACHE_DIR" + (f" (cache_dir in {where})" if where else "")
    if os.environ.get("XDG_CACHE_HOME"):
        return "$XDG_CACHE_HOME/envtool"
    return "~/.cache/envtool"


def cache_instead(path: Path) -> str:
    """What a user can do about a refused cache directory ``path``, naming the variable the cache
    root comes from when ``path`` is the root (:func:`cache_origin`)."""
    if os.path.abspath(path) != os.path.abspath(cache_root()):
        return "set ENVTOOL_CACHE_DIR to a directory of your own"
    origin = cache_origin()
    if origin.startswith("$ENVTOOL_CACHE_DIR"):
        return f"{path} is {origin}: set ENVTOOL_CACHE_DIR to a directory of your own"
    return f"{path} is {origin}: set ENVTOOL_CACHE_DIR (or XDG_CACHE_HOME) to a directory of your own"


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


def _private_group(gid: int, owner_uid: int) -> bool:
    """True when group ``gid`` is user ``owner_uid``'s private group: it has the owner's name, lists
    no other member, and is no other user's primary group (a primary group's users are not listed in
    ``gr_mem``, group(5)); with user private groups a ``umask 002`` gives group write to the owner
    alone (https://wiki.debian.org/UserPrivateGroups). Group 0 (``root``) is never a private group:
    it is a system group that administrators and service accounts are put in, so root's
    ``g+w`` file is writable by them. Unknown user or group: False."""
    import grp
    import pwd

    if gid == 0 or owner_uid == 0:
        return False
    try:
        group = grp.getgrgid(gid)
        owner = pwd.getpwuid(owner_uid).pw_name
    except KeyError:
        return False
    if group.gr_name != owner or not set(group.gr_mem) <= {owner}:
        return False
    return not any(p.pw_gid == gid and p.pw_uid != owner_uid for p in pwd.getpwall())


def writable_by_others(st: os.stat_result) -> str:
    """Who besides its owner can write the file or directory with ``os.stat`` result ``st``:
    ``"every user"`` (the other-write bit), ``"group NAME (gid N)"`` (the group-write bit), or
    ``""`` (nobody). Group write counts as nobody else only for the owner's private group
    (:func:`_private_group`): a group ``root`` that is another user's primary group counts."""
    import grp

    if st.st_mode & stat.S_IWOTH:
        return "every user"
    if not st.st_mode & stat.S_IWGRP or _private_group(st.st_gid, st.st_uid):
        return ""
    try:
        return f"group {grp.getgrgid(st.st_gid).gr_name} (gid {st.st_gid})"
    except KeyError:
        return f"group gid {st.st_gid}"


def walk_trusted(path: Path, what: str = "envtool's cache directory",
                 instead: str = "set ENVTOOL_CACHE_DIR to a directory of your own",
                 also: Optional[int] = None) -> Tuple[Optional[os.stat_result], str]:
    """:func:`trusted_path`, also returning the path it reached: ``(lstat or None, real path)``,
    the real path holding no symbolic link (what to open ``O_NOFOLLOW``). ``also``: one more
    user trusted on the way besides root and the caller (a site cache's owner, who could change
    the cache anyway: :func:`site_cache_problem`).

    Raises:
        UsageError: see :func:`trusted_path`.
    """
    from envtool.core.errors import UsageError

    me = os.geteuid()
    trusted = (0, me) if also is None else (0, me, also)
    text = os.fspath(path)
    if not text.startswith("/"):
        text = os.path.join(os.getcwd(), text)
    todo = [p for p in text.split("/") if p not in ("", ".")][::-1]  # a stack: the next name last
    here = "/"
    st = os.lstat(here)
    links = 0
    while True:
        if not todo:
            return st, here
        if st.st_uid not in trusted:
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
            return None, os.path.join(nxt, *todo[::-1])
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in trusted:
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
            return None, os.path.join(nxt, *todo[::-1])
        here = nxt


def trusted_path(path: Path, what: str = "envtool's cache directory",
                 instead: str = "set ENVTOOL_CACHE_DIR to a directory of your own") -> Optional[os.stat_result]:
    """Check every component that leads to ``path``, from ``/``, without trusting what a path
    resolves to (``lstat`` each component, follow each link by hand): the first half of envtool's
    one rule for a path it uses (the module docstring; :func:`owned_problem` is the second).

    Each directory passed through must be owned by root or the current user and writable by
    nobody else, group included (:func:`writable_by_others`), unless it is sticky (``/tmp``:
    others may add entries there but not rename or remove ours, see the sticky bit in inode(7),
    https://man7.org/linux/man-pages/man7/inode.7.html). A symbolic link anywhere on the way,
    ``path`` itself included, must be owned by root or the current user; its target is then
    checked the same way. Another user who could write a directory on the way, or who owns a
    link on it, could point ``path`` at anything (a directory of root's that envtool would then
    ``chmod`` or prune). Once this passes, only root or the caller can change what ``path``
    names. The object ``path`` finally names is the caller's to judge (:func:`owned_problem`).

    Args:
        path: the path (a relative one is taken from the working directory).
        what: what ``path`` is, for the error (e.g. "envtool's cache directory ($ENVTOOL_CACHE_DIR)").
        instead: what the user can do instead, for the error.
    Returns:
        the ``lstat`` of what ``path`` names (never a link), or None when a component is missing
        (what is missing is created below a checked directory) or is not a directory.
    Raises:
        UsageError: a component another user owns or can write, a link another user owns, or
            more than :data:`MAX_LINKS` links (exit 2, naming ``path``, the component, its owner
            and mode).
    """
    return walk_trusted(path, what, instead)[0]


def owned_problem(path: Path, st: os.stat_result, what: str, instead: str, kind: str = "directory",
                  root_ok: bool = False) -> Optional[str]:
    """Why the object ``path`` names (``st``: its ``lstat``, reached through :func:`trusted_path`)
    may not be used, or None: the second half of envtool's one rule for a path it uses.

    It must be a ``kind`` (``"directory"`` or ``"file"``: a regular file), owned by the current
    user (or by root too, with ``root_ok``: a site-wide configuration file) and writable by nobody
    else, group included (:func:`writable_by_others`).

    Args:
        path: the path, for the message.
        st: its ``lstat``.
        what: what it is, for the message ("envtool's cache directory ($ENVTOOL_CACHE_DIR)").
        instead: what the user can do instead, for the message.
        kind: ``"directory"`` or ``"file"``.
        root_ok: root's own is trusted too.
    Returns:
        the reason (naming ``path``, its owner and mode, and the fix), or None.
    """
    ok = stat.S_ISDIR(st.st_mode) if kind == "directory" else stat.S_ISREG(st.st_mode)
    if not ok:
        return f"{path}: {what} is not a {'directory' if kind == 'directory' else 'regular file'}"
    mode = stat.S_IMODE(st.st_mode)
    owners = (os.geteuid(), 0) if root_ok else (os.geteuid(),)
    if st.st_uid not in owners:
        return (f"{path}: permission denied: {what} is owned by another user ({owner_name(st.st_uid)}, mode "
                f"{mode:04o}), not by you (uid {os.geteuid()}){' or root' if root_ok else ''}; {instead}")
    who = writable_by_others(st)
    if who:
        could = "have put anything there" if kind == "directory" else "change what it says"
        return (f"{path}: {what} (owner {owner_name(st.st_uid)}, mode {mode:04o}) is writable by {who}, who could "
                f"{could}; envtool will not use it (chmod go-w {shlex.quote(str(path))}, or {instead})")
    return None


def open_trusted_file(path: Path, what: str, instead: str, max_bytes: int) -> bytes:
    """The bytes of file ``path`` (at most ``max_bytes + 1``), read only when the way to it passes
    :func:`trusted_path` and the file :func:`owned_problem` (yours or root's, writable by nobody
    else). The file is opened ``O_NOFOLLOW`` at the real path the walk reached and must be the very
    file that was checked (same device and inode); a FIFO or device is never opened for reading
    (``O_NONBLOCK``, then refused as not a regular file).

    Args:
        path: the file.
        what: what it is, for errors ("the configuration file").
        instead: what the user can do instead, for errors.
        max_bytes: how much is read at most (one byte more, so the caller sees an oversized file).
    Returns:
        the file's bytes.
    Raises:
        UsageError: a component or the file itself fails the rule (exit 2, naming the path, the
            owner and mode and the fix).
        OSError: the file cannot be opened or read (missing, no permission).
    """
    from envtool.core.errors import UsageError

    st, real = walk_trusted(path, what, instead)
    if st is None:
        raise FileNotFoundError(2, "No such file or directory", str(path))
    problem = owned_problem(path, st, what, instead, kind="file", root_ok=True)
    if problem:
        raise UsageError(problem)
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise UsageError(f"{path}: {what} changed while envtool checked it; run the command again")
        problem = owned_problem(path, now, what, instead, kind="file", root_ok=True)
        if problem:
            raise UsageError(problem)
        return read_fd_bounded(fd, max_bytes + 1)
    finally:
        os.close(fd)


def read_fd_bounded(fd: int, limit: int, chunk_size: int = 1 << 20) -> bytes:
    """At most ``limit`` bytes read from the open file descriptor ``fd`` (from its current offset to
    its end), in reads of at most ``chunk_size`` bytes, so a huge or endless file costs bounded memory.
    A caller that must tell "too large" from "exactly the limit" asks for one byte more than it allows.

    Raises:
        OSError: the read failed.
    """
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, chunk_size))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def trusted_gid(group: Optional[str]) -> Optional[int]:
    """The group id of ``group`` (a name or a number, the site file's ``build_cache_group``), or None
    when it is empty or no such group exists (then no group-writable site cache is trusted)."""
    import grp

    if not group:
        return None
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return int(group) if group.isdigit() else None


def site_cache_problem(root: Path, below: Sequence[str] = (), owner: Optional[int] = None,
                       group: Optional[str] = None) -> Optional[str]:
    """Why a read-only cache (a site's wheel cache, or the user's own read as one) may not be
    used, or None: envtool's one rule for paths (:func:`walk_trusted`, :func:`writable_by_others`)
    with the cache's owner in the place of the caller.

    The way to ``root`` is checked from ``/`` without following anyone's link blindly: every
    directory passed through and every link must be root's, the caller's or the cache's owner's
    (the owner of what ``root`` names), and writable by nobody else, group included. ``root``
    and each path ``below`` (relative to it, in order; a symbolic link there is refused) must be a
    directory or file owned by ``owner`` (default: ``root``'s owner) or by root, not writable by
    every user, and writable by its group only when that group is ``group`` (the site file's
    ``build_cache_group``) or the owner's private group.

    Args:
        root: the cache root.
        below: relative paths under ``root`` (``horovod-wheels``, ``horovod-wheels/<digest>``, files).
        owner: the uid every path must belong to (the user's own cache: the user).
        group: the group trusted to write (a name or number), or None.
    Returns:
        a reason naming the path (``/sw/cache/horovod-wheels is world-writable``), or None.
    """
    from envtool.core.errors import UsageError

    gid = trusted_gid(group)
    try:
        first = os.stat(root)
    except OSError as exc:
        return f"{root}: {exc.strerror or exc}"
    owner = first.st_uid if owner is None else owner
    try:
        st, real = walk_trusted(Path(root), "the wheel cache", "name a cache reached through directories of "
                                "root's, yours or the cache owner's that nobody else can write", also=owner)
    except UsageError as exc:
        return str(exc)
    if st is None or (st.st_dev, st.st_ino) != (first.st_dev, first.st_ino):
        return f"{root}: changed while envtool checked it"
    path = Path(root)
    for rel in ("",) + tuple(below):
        if rel:
            path = Path(root) / rel
            try:
                st = os.lstat(Path(real) / rel)
            except OSError as exc:
                return f"{path}: {exc.strerror or exc}"
            if stat.S_ISLNK(st.st_mode):
                return f"{path} is a symbolic link"
        if st.st_uid not in (owner, 0):
            return (f"{path} is owned by {owner_name(st.st_uid).split(' (')[0]}, not by the cache's owner "
                    f"{owner_name(owner).split(' (')[0]}")
        if st.st_mode & stat.S_IWOTH:
            return f"{path} is world-writable"
        if st.st_mode & stat.S_IWGRP and st.st_gid != gid and writable_by_others(st):
            return (f"{path} is writable by {writable_by_others(st).split(' (')[0]}, which the site file does not "
                    f"name (build_cache_group: {group or 'not set'})")
    return None


def own_directory(path: Path) -> bool:
    """Whether ``path`` (not followed: a symbolic link is not) is a directory owned by the effective
    user: what envtool may delete or finish (a wheel cache entry ``cache prune`` removes, an aside
    copy of an interrupted run). ``False`` when it cannot be ``lstat``-ed."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def _level_problem(path: Path, what: str, instead: str) -> Tuple[Optional[os.stat_result], Optional[str]]:
    """One directory of a cache (or of the state directory) under envtool's rule: the way to it
    (:func:`trusted_path`, which raises) and, when it exists, the directory itself
    (:func:`owned_problem`). Returns ``(lstat or None, problem or None)``."""
    st = trusted_path(path, what, instead)
    if st is None:
        return None, None
    return st, owned_problem(path, st, what, instead)


def check_cache(*parts: str, root: Optional[Path] = None) -> Path:
    """The cache root, checked for a command that reads or deletes what is in it (``cache prune``,
    ``cache publish``, a wheel lookup of ``create`` and ``image``) without creating or
    ``chmod``-ing anything: the root and each directory ``parts`` below it pass envtool's rule
    (:func:`trusted_path` and :func:`owned_problem`: the way to it is nobody else's, and it is the
    current user's, writable by nobody else). :func:`cache_dir`, for writers, applies the same.

    Args:
        parts: directories below the root that the command will read (e.g. ``"logs"``).
        root: the cache root (default :func:`cache_root`).
    Returns:
        the cache root (which may not exist).
    Raises:
        UsageError: a component another user owns or can write, a link another user owns, or a
            cache directory that is not the user's or that others can write (exit 2, naming
            where the root comes from, the directory, its owner and mode).
    """
    from envtool.core.errors import UsageError

    root = cache_root() if root is None else Path(root)
    for path in [root] + [root / p for p in parts]:
        _, problem = _level_problem(path, "envtool's cache directory", cache_instead(path))
        if problem:
            raise UsageError(problem)
    return root


def _open_dir(path: Path, st: os.stat_result) -> int:
    """An ``O_NOFOLLOW`` descriptor of directory ``path``, which must still be the directory
    ``st`` describes (same device and inode); raises UsageError when it is not."""
    from envtool.core.errors import UsageError

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    now = os.fstat(fd)
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or now.st_uid != os.geteuid():
        os.close(fd)
        raise UsageError(f"{path}: the directory changed while envtool checked it; run the command again")
    return fd


def is_tagged(path: Path) -> bool:
    """True when directory ``path`` holds envtool's ``CACHEDIR.TAG`` (:data:`CACHE_TAG_TEXT`): a
    regular file of the current user's, not a link, writable by nobody else: envtool created it."""
    try:
        st = os.lstat(Path(path) / CACHE_TAG)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or writable_by_others(st):
            return False
        with open(Path(path) / CACHE_TAG, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as fh:
            return fh.read(len(CACHE_TAG_TEXT) + 1) == CACHE_TAG_TEXT.encode()
    except OSError:
        return False


def private_dir(path: Path, ours: bool = False, what: str = "envtool's cache directory", tag: bool = False,
                instead: str = "") -> Path:
    """Make sure ``path`` is a directory of the current user that nobody else can write, under
    envtool's rule (:func:`trusted_path`, :func:`owned_problem`), checked before anything is
    created or ``chmod``-ed; envtool never changes the mode of a directory it did not create.

    A missing ``path`` is created with ``os.mkdir(path, 0o700)`` then ``fchmod`` (``mkdir``'s mode
    is masked by the umask, which can only take bits away; the ``fchmod`` makes it exact), and
    with ``tag`` gets envtool's ``CACHEDIR.TAG`` (:func:`is_tagged`). An existing one is made
    ``0700`` only when it is envtool's (``ours``: below a cache root envtool tagged, or itself
    tagged); any other is left as it is when nobody else can write it, and refused when someone can.
    The ``fchmod`` goes through an ``O_NOFOLLOW`` descriptor of the very directory that was
    checked. Missing parents are created with the default mode (they are not envtool's, e.g.
    ``~/.cache``) and checked with the rest of the way.

    Args:
        path: the directory.
        ours: ``path`` is envtool's own when it exists (a directory below a tagged cache root).
        what: what ``path`` is, for errors.
        tag: write envtool's ``CACHEDIR.TAG`` when creating it (the cache root).
        instead: what the user can do instead, for errors (default :func:`cache_instead`).
    Returns:
        ``path``.
    Raises:
        UsageError: ``path`` exists and is not a directory, is owned by another user, or others
            can write it and it is not envtool's, or the way to it passes through a directory
            another user owns or can write or a link another user owns (exit 2, naming where it
            comes from, the path and the component, its owner and mode).
        OSError: it cannot be created (read-only or full filesystem, no permission: the command
            reports it as a condition naming the path, :func:`envtool.core.errors.condition_message`).
    """
    from envtool.core.errors import UsageError

    path = Path(path)
    instead = instead or cache_instead(path)
    trusted_path(path, what, instead)
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    created = False
    try:
        os.mkdir(path, PRIVATE_DIR_MODE)
        created = True
    except FileExistsError:
        pass
    st = trusted_path(path, what, instead)  # what was there, or what mkdir made (the way to it checked again)
    if st is None:
        raise UsageError(f"{path}: {what} is not a directory")
    mine = created or ours or is_tagged(path)
    problem = owned_problem(path, st, what, instead)
    if problem and st.st_uid == os.geteuid() and stat.S_ISDIR(st.st_mode) and not mine:
        mode = stat.S_IMODE(st.st_mode)
        raise UsageError(f"{path}: {what} can be written by others ({writable_by_others(st)}, mode {mode:04o}) and "
                         f"envtool did not create it, so it will not use it nor change its mode "
                         f"(chmod go-w {shlex.quote(str(path))}, or {instead})")
    if problem and not (mine and st.st_uid == os.geteuid() and stat.S_ISDIR(st.st_mode)):
        raise UsageError(problem)
    if mine and (stat.S_IMODE(st.st_mode) != PRIVATE_DIR_MODE or (created and tag)):
        fd = _open_dir(path, st)
        try:
            if stat.S_IMODE(st.st_mode) != PRIVATE_DIR_MODE:
                os.fchmod(fd, PRIVATE_DIR_MODE)
            if created and tag:
                try:
                    tfd = os.open(CACHE_TAG, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
                except FileExistsError:
                    pass
                else:
                    with os.fdopen(tfd, "w", encoding="ascii") as fh:
                        fh.write(CACHE_TAG_TEXT)
        finally:
            os.close(fd)
    return path


def cache_dir(*parts: str) -> Path:
    """The cache root, or the directory ``parts`` below it, for a command that writes there, each
    level under envtool's rule (:func:`private_dir`): a root envtool creates is tagged and ``0700``,
    and the levels below a tagged root are made ``0700`` (``cache_dir("logs")``); a root envtool did
    not create keeps its mode, and what envtool creates below it is ``0700``.

    Raises:
        UsageError, OSError: see :func:`private_dir`.
    """
    path = private_dir(cache_root(), tag=True)
    ours = is_tagged(path)
    for part in parts:
        path = private_dir(path / part, ours=ours)
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
