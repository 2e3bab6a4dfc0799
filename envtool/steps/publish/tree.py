"""The published tree's ownership and modes, as EasyBuild's ``--group``, ``--umask`` and
``--read-only-installdir`` leave an installation (:mod:`envtool.steps.publish`)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Dict, List, Optional

from envtool.core.errors import UsageError


def group_id(group: Optional[str]) -> Optional[int]:
    """The gid of ``group`` (a name or a number), or None.

    Raises:
        UsageError: no such group.
    """
    if group is None:
        return None
    import grp

    try:
        return grp.getgrgid(int(group)).gr_gid if group.isdigit() else grp.getgrnam(group).gr_gid
    except (KeyError, ValueError):
        raise UsageError(f"--group: no group {group!r} on this machine") from None


def walk(top: Path):
    """``top`` and everything under it, deepest first (no symlink followed)."""
    for dirpath, dirnames, filenames in os.walk(top, topdown=False):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            yield Path(dirpath) / name
        yield Path(dirpath)


def published_mode(is_dir: bool, executable: bool, grouped: bool, umask: int, read_only: bool) -> int:
    """The permission bits :func:`set_mode` gives a directory or file (no I/O).

    Args:
        is_dir: a directory (else a regular file).
        executable: a file its owner can execute (ignored for directories).
        grouped: a group is given (directories get setgid, so new entries inherit the group).
        umask: bits taken from everyone.
        read_only: no write bit, not even for the owner.
    Returns:
        the mode (``stat.S_IMODE`` form, setgid included).
    """
    mode = 0o444 | (0o111 if is_dir or executable else 0)
    mode &= ~umask
    mode |= 0o400 | (0o100 if is_dir else 0)
    if not read_only:
        mode |= 0o200
    if is_dir and grouped:
        mode |= stat.S_ISGID
    return mode


def set_mode(path: Path, gid: Optional[int], umask: int, read_only: bool) -> None:
    """Give ``path`` (not following a symlink) the published ownership and mode.

    Directories: ``r-x`` for owner and group (``rwx`` for the owner when not ``read_only``),
    others per ``umask``, setgid when ``gid`` is given. Files: ``r--`` (``r-x`` when the owner
    could execute it) for everyone, minus ``umask``, plus ``w`` for the owner when not
    ``read_only``. Symlinks: only the group changes. Callers apply it only to what publish
    itself created (never to a directory that was there before).
    """
    st = os.lstat(path)
    if gid is not None and st.st_gid != gid:
        os.chown(path, -1, gid, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        return
    os.chmod(path, published_mode(stat.S_ISDIR(st.st_mode), bool(st.st_mode & stat.S_IXUSR), gid is not None,
                                  umask, read_only))


def missing_dirs(path: Path) -> List[Path]:
    """The directories :func:`make_dirs` would create for ``path``: ``path`` and its missing
    ancestors, outermost first (empty when ``path`` exists)."""
    missing: List[Path] = []
    p = Path(path)
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    return missing[::-1]


def make_dirs(path: Path, what: str) -> List[Path]:
    """Create ``path`` and its missing ancestors, one by one.

    Args:
        path: the directory.
        what: the option it came from, for messages (``--root``).
    Returns:
        the directories created here, outermost first: the only ones publish may give its
        group and modes (a directory that was there before keeps its own).
    Raises:
        UsageError: a component cannot be created, or ``path`` exists and is not a directory (exit 2).
    """
    created: List[Path] = []
    for d in missing_dirs(path):
        try:
            d.mkdir()
        except FileExistsError:
            continue  # made meanwhile by someone else: not ours
        except OSError as exc:
            raise UsageError(f"{what}: cannot create {d}: {exc.strerror or exc}") from None
        created.append(d)
    if not Path(path).is_dir():
        raise UsageError(f"{what}: {path} exists and is not a directory")
    return created


def unshare_links(top: Path) -> int:
    """Give every regular file under ``top`` that has more than one hard link a private copy.

    Installers link files from their caches (py-rattler from its package cache, uv from its
    wheel cache, envtool's kept bytecode): a published tree's mode and group changes
    (:func:`set_tree`) would otherwise reach those caches and every environment sharing the
    inode. Each such file is copied beside itself (``shutil.copy2``: data, mode, times) and
    renamed over the link, so the tree's content is unchanged.

    Returns:
        the number of files copied.
    Raises:
        OSError: a file could not be copied or renamed (the partial copy is removed).
    """
    import shutil

    count = 0
    for path in walk(top):
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
            continue
        tmp = path.with_name(f".{path.name}.envtool-unshare-{os.getpid()}")
        try:
            shutil.copy2(path, tmp, follow_symlinks=False)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        count += 1
    return count


def set_tree(top: Path, gid: Optional[int], umask: int, read_only: bool) -> None:
    """:func:`set_mode` on ``top`` and everything under it."""
    for path in walk(top):
        set_mode(path, gid, umask, read_only)


def make_writable(top: Path) -> None:
    """Give the owner write permission on ``top``'s tree again (before ``force`` replaces it)."""
    for path in walk(top):
        st = os.lstat(path)
        if not stat.S_ISLNK(st.st_mode):
            os.chmod(path, stat.S_IMODE(st.st_mode) | stat.S_IWUSR)


def write_marker(target: Path, data: Dict[str, object], gid: Optional[int], umask: int) -> None:
    """Write ``target/.envtool/publish.json`` into the read-only tree (its directory is made
    writable for the owner for the moment it takes)."""
    meta = target / ".envtool"
    os.chmod(meta, stat.S_IMODE(os.stat(meta).st_mode) | stat.S_IWUSR)
    try:
        (meta / "publish.json").write_text(json.dumps(data, indent=2) + "\n")
        set_mode(meta / "publish.json", gid, umask, read_only=True)
    finally:
        set_mode(meta, gid, umask, read_only=True)


def group_name(gid: Optional[int]) -> Optional[str]:
    """The name of group ``gid`` (its number when it has none), or None."""
    if gid is None:
        return None
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
