"""What a pack may carry (:mod:`envtool.steps.pack`): regular files, directories and symbolic links
that stay inside the environment, and nothing that gains privileges where it is unpacked.

A pack is unpacked on compute nodes, often by a job script, sometimes as root (a container
build, a prolog). So, before anything is packed, every entry of the environment is looked at
(``lstat``, links never followed) and the pack is refused (exit 2, :class:`NotPackable`, naming
each path and what was expected) when it holds:

* a socket, FIFO, character or block device (``S_ISSOCK``, ``S_ISFIFO``, ``S_ISCHR``, ``S_ISBLK``,
  https://man7.org/linux/man-pages/man7/inode.7.html): nothing a Python environment needs, and a
  device node unpacked as root is a door into the node;
* a regular file with the set-user-ID or set-group-ID bit (``S_ISUID``/``S_ISGID``), or with file
  capabilities (the ``security.capability`` extended attribute, capabilities(7): privileges
  without the bit): refused, not silently dropped, so the user decides (``chmod u-s,g-s``,
  ``setcap -r``); a set-group-ID *directory* (group inheritance in shared project spaces) is no
  privilege and is kept;
* a symbolic link whose target, as written (what the tar keeps: an absolute path, or a relative
  one joined to the link's directory, one component at a time, never through where another link
  resolves today), lies outside the environment (:func:`link_stays_inside`): its target is not in the pack, so the unpacked copy would use whatever
  is at that path on the node. Allowed only with ``allow_outside_links`` (``pack
  --allow-outside-links``: kept as links, named in the result's notes), except a venv's links in
  ``bin/`` to an interpreter (``python3``, ``python3.11``, ``pypy3``) in its own base interpreter's
  directory (``pyvenv.cfg``'s ``home``), which every venv has and the manifest records: a link in
  ``bin/`` to any other file there (``bin/sh -> /usr/bin/sudo``) leaves the environment;
* the pack's own output: a directory of the environment that is, under any name (``st_dev`` and
  ``st_ino``: a symbolic link or bind mount), the directory the pack is being written in.

This module is the one place that walks what a pack carries (:func:`walk`): the check above, the
files read for relocation (:func:`envtool.steps.pack.venv.scan_venv`) and the writers of the tar
and of the squashfs root (:mod:`envtool.steps.pack.archive`, through :meth:`Judge.entries`,
which judges every entry again as it is written and opens regular files with ``O_NOFOLLOW``,
comparing device and inode with what was judged) all see the same entries. A directory that
cannot be read is refused, never skipped: its contents would be missing from the pack silently.
Nothing in the environment is read before this check has passed (``check-contents`` is the plan's
first step): a FIFO named ``x.pth`` would otherwise block the ``.pth`` scan for ever.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import IO, Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

from envtool.core.errors import CheckFailed, echo
from envtool.steps.pack.model import NotPackable

#: how many paths of each kind a refusal names
SHOWN = 5

_SPECIAL = ((stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


#: the names of an interpreter a venv's ``bin/`` links to (``python3``, ``python3.11``, ``pypy3.10``, ``python3.13t``)
_INTERPRETER = re.compile(r"(python|pypy)(\d+(\.\d+)*)?[a-z]?")


def _base_link(text: str, base_dirs: set) -> bool:
    """Whether the absolute link text ``text`` names an interpreter (:data:`_INTERPRETER`) directly in
    one of ``base_dirs`` (the base interpreter's directories, as written and resolved) and resolves
    to one there too: ``bin/python3 -> /usr/bin/python3.11``, never ``bin/sh -> /usr/bin/sudo``."""
    literal = os.path.normpath(text)
    real = os.path.realpath(literal)
    return (os.path.dirname(literal) in base_dirs and os.path.dirname(real) in base_dirs
            and all(_INTERPRETER.fullmatch(os.path.basename(p)) for p in (literal, real)))


def link_stays_inside(prefix: str, directory: str, text: str) -> bool:
    """Whether a symbolic link in ``directory`` (a directory under ``prefix``, as walked) whose text is
    ``text`` names a path inside ``prefix`` once unpacked: judged by the text itself, which is what
    the tar keeps (https://www.gnu.org/software/tar/manual/html_node/dereference.html), never by
    where it resolves on this host today.

    Args:
        prefix: the environment's path as written (the string the pack relocates).
        directory: the link's directory, a path under ``prefix`` as written.
        text: the link's target, as ``readlink(2)`` returns it.
    Returns:
        an absolute ``text``: True when it is ``prefix`` or below it, component by component after
        removing ``.`` and ``..`` (``..`` may not climb above ``prefix``); a relative one: the same
        for ``directory`` joined with it, where a ``..`` that follows a component that is itself
        a symbolic link inside the environment counts as leaving (the kernel would climb from
        that link's target, not from its name); never True when ``..`` climbs above ``prefix``.
    """
    root = os.path.normpath(prefix)
    if os.path.isabs(text):
        start, rest = os.sep, text
    else:
        start, rest = os.path.normpath(directory), text
    if not _within(start, root) and not os.path.isabs(text):
        return False
    parts: List[str] = [] if start == os.sep else start.strip(os.sep).split(os.sep)
    root_parts = [] if root == os.sep else root.strip(os.sep).split(os.sep)
    previous_link = False
    for part in rest.split(os.sep):
        if part in ("", "."):
            continue
        if part == "..":
            if previous_link or not parts:
                return False
            parts.pop()
            if len(parts) < len(root_parts) and parts == root_parts[:len(parts)] and not os.path.isabs(text):
                return False  # a relative link climbing above the environment
            previous_link = False
            continue
        parts.append(part)
        here = os.sep + os.sep.join(parts)
        previous_link = _within(here, root) and os.path.islink(here)
    return _within(os.sep + os.sep.join(parts), root)


class Entry(NamedTuple):
    """One entry under an environment, as :func:`walk` found it.

    Attributes:
        path: its path (under the prefix as written).
        rel: its path relative to the prefix.
        st: its ``lstat`` (links never followed).
        link: a symbolic link's text (``readlink``), else None.
    """

    path: str
    rel: str
    st: os.stat_result
    link: Optional[str]


def walk(prefix: Path) -> Iterator[Entry]:
    """Every entry under ``prefix``: directories before their contents, names sorted (directories
    first within a directory), symbolic links never followed; an entry that vanishes meanwhile is
    left out.

    Raises:
        NotPackable: a directory cannot be read (exit 2, naming it): its contents would otherwise
            be left out of the pack without a word.
    """
    def unreadable(exc: OSError) -> None:
        where = exc.filename if exc.filename is not None else prefix
        raise NotPackable(f"{echo(str(where))} cannot be read ({exc.strerror or exc}): expected every directory of "
                          f"the environment readable by this user, or its contents would be missing from the pack")

    top = str(prefix)
    for dirpath, dirnames, filenames in os.walk(top, onerror=unreadable):
        dirnames.sort()
        for name in sorted(dirnames) + sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
                link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
            except OSError:
                continue
            yield Entry(path, os.path.relpath(path, top), st, link)


def open_entry(entry: Entry) -> IO[bytes]:
    """Open the regular file ``entry`` for reading, refusing anything else that is at its path now
    (``O_NOFOLLOW``, ``O_NONBLOCK``: a link or FIFO put there since is never followed or waited on).

    Raises:
        CheckFailed: it is no longer that regular file (another device or inode, or not a regular
            file): the environment changed while it was being packed (exit 1).
        NotPackable: it cannot be read (exit 2, naming it).
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(entry.path, flags)
    except FileNotFoundError:
        raise changed(entry.path, "it is gone") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise changed(entry.path, "it is a symbolic link now") from None
        raise NotPackable(f"{echo(entry.path)} cannot be read ({exc.strerror or exc}): expected every file of the "
                          "environment readable by this user") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (entry.st.st_dev, entry.st.st_ino):
        os.close(fd)
        raise changed(entry.path, "another file is there now")
    return os.fdopen(fd, "rb")


def changed(path: str, how: str) -> CheckFailed:
    """The error for an entry that changed between the check and the write (exit 1)."""
    return CheckFailed(f"{echo(path)} changed while the environment was being packed ({how}); nothing was written: "
                       "pack it again once nothing writes into it")


class Judge:
    """What may be packed from one environment (see the module docstring): judges each entry of
    :func:`walk`, before packing (:meth:`check`) and again as it is written (:meth:`entries`).

    Args:
        prefix: the environment (absolute).
        allow_outside_links: keep links that leave the environment instead of refusing them.
        base: a venv's base interpreter, or None. Links directly in ``PREFIX/bin`` that resolve to a
            file in its directory or in ``pyvenv.cfg``'s ``home`` (resolved; ``bin/python3 ->
            /usr/bin/python3.11``) are always allowed: every venv has them (PEP 405).
        output: the directory the pack is written in (exists), or None: a directory of the
            environment that is it under any name is refused.
    """

    def __init__(self, prefix: Path, allow_outside_links: bool = False, base: Optional[str] = None,
                 output: Optional[Path] = None) -> None:
        self.prefix = str(prefix)
        self.allow_outside_links = allow_outside_links
        self.base_dirs = _base_dirs(prefix, base)
        self.bin_dir = os.path.join(self.prefix, "bin")
        self.output: Optional[Tuple[int, int]] = None
        if output is not None:
            try:
                st = os.stat(output)
                self.output = (st.st_dev, st.st_ino)
            except OSError:
                self.output = None

    def judge(self, entry: Entry) -> Optional[Tuple[str, str]]:
        """``(kind, words)`` when ``entry`` may not be packed as it is (kind ``special``, ``setid``,
        ``output`` or ``outside``: a link that leaves the environment, which ``allow_outside_links``
        keeps), else None."""
        mode = entry.st.st_mode
        what = next((words for test, words in _SPECIAL if test(mode)), None)
        if what is not None:
            return "special", f"{echo(entry.path)} ({what})"
        if stat.S_ISREG(mode):
            bits = [b for b, m in (("set-user-ID", stat.S_ISUID), ("set-group-ID", stat.S_ISGID)) if mode & m]
            if _capabilities(entry.path):
                bits.append("file capabilities")
            if bits:
                return "setid", f"{echo(entry.path)} ({' and '.join(bits)}, mode {stat.S_IMODE(mode):04o})"
        elif stat.S_ISDIR(mode):
            if self.output is not None and (entry.st.st_dev, entry.st.st_ino) == self.output:
                return "output", echo(entry.path)
        elif entry.link is not None:
            in_bin = os.path.dirname(entry.path) == self.bin_dir
            to_base = in_bin and os.path.isabs(entry.link) and _base_link(entry.link, self.base_dirs)
            if not to_base and not link_stays_inside(self.prefix, os.path.dirname(entry.path), entry.link):
                return "outside", f"{echo(entry.path)} -> {echo(entry.link)}"
        return None

    def check(self) -> List[str]:
        """Judge every entry under the prefix.

        Returns:
            notes for the result: the links kept that leave the environment (none unless
            ``allow_outside_links``).
        Raises:
            NotPackable: exit 2, naming up to :data:`SHOWN` paths of each kind found and what was
                expected.
        """
        found: Dict[str, List[str]] = {"special": [], "setid": [], "outside": [], "output": []}
        for entry in walk(Path(self.prefix)):
            verdict = self.judge(entry)
            if verdict is not None:
                found[verdict[0]].append(verdict[1])
        problems = _problems(found, self.allow_outside_links)
        if problems:
            raise NotPackable(f"{echo(self.prefix)} cannot be packed: " + "; ".join(problems))
        return [f"kept a link that leaves the environment (its target must exist on every node): {p}"
                for p in found["outside"]]

    def entries(self) -> Iterator[Entry]:
        """The entries a pack carries, in :func:`walk`'s order, each judged again now (the writers
        use these, never a walk of their own).

        Raises:
            CheckFailed: one is no longer packable (it changed since :meth:`check`; exit 1).
            NotPackable: a directory cannot be read (exit 2).
        """
        for entry in walk(Path(self.prefix)):
            verdict = self.judge(entry)
            if verdict is not None and not (verdict[0] == "outside" and self.allow_outside_links):
                raise changed(entry.path, f"it is now {verdict[1]}")
            yield entry


def check_contents(prefix: Path, allow_outside_links: bool = False, base: Optional[str] = None,
                   output: Optional[Path] = None) -> List[str]:
    """Check every entry under ``prefix`` (see the module docstring and :class:`Judge` for the
    arguments).

    Returns:
        notes for the result: the links kept that leave the environment (none unless
        ``allow_outside_links``).
    Raises:
        NotPackable: exit 2, naming up to :data:`SHOWN` paths of each kind found and what was expected.
    """
    return Judge(prefix, allow_outside_links, base, output).check()


def _capabilities(path: str) -> bool:
    """Whether the regular file ``path`` carries file capabilities (``security.capability``)."""
    try:
        return bool(os.getxattr(path, "security.capability", follow_symlinks=False))
    except (OSError, AttributeError):  # no such attribute, no xattr support here, or no os.getxattr
        return False


def _base_dirs(prefix: Path, base: Optional[str]) -> Set[str]:
    """The directories a venv's ``bin/`` links may point into: its base interpreter's and
    ``pyvenv.cfg``'s ``home``, as written and resolved."""
    from envtool.core.prefix import PrefixData

    home = PrefixData(Path(prefix)).venv_config().get("home")
    dirs = {os.path.realpath(d) for d in (os.path.dirname(base) if base else None, home) if d}
    dirs |= {os.path.normpath(d) for d in (os.path.dirname(base) if base else None, home) if d}
    if base:
        dirs.add(os.path.dirname(os.path.realpath(base)))
    return dirs


def _problems(found: Dict[str, List[str]], allow_outside_links: bool) -> List[str]:
    """The refusals for what :meth:`Judge.judge` found (empty: the environment can be packed)."""
    problems = []
    if found["output"]:
        problems.append("expected the pack to be written outside the environment; its output directory is, under "
                        "another name, " + _some(found["output"]) + ": write it elsewhere (-o)")
    if found["special"]:
        problems.append("expected regular files, directories and symbolic links only; found "
                        + _some(found["special"]) + ": remove them from the environment")
    if found["setid"]:
        problems.append("expected no set-user-ID or set-group-ID files and no file capabilities (they would run "
                        "with more rights where the pack is unpacked); found " + _some(found["setid"])
                        + ": clear them (chmod u-s,g-s FILE; setcap -r FILE) or remove the files")
    if found["outside"] and not allow_outside_links:
        problems.append("expected symbolic links that stay inside the environment; found links that leave it "
                        "(what they point at is not in the pack): " + _some(found["outside"])
                        + ": copy their targets into the environment, or give --allow-outside-links to keep "
                        "them as links (their targets must then exist at those paths on every node)")
    return problems


def _some(items: List[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more
