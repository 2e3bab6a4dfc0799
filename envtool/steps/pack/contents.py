"""What a pack may carry (:mod:`envtool.steps.pack`): regular files, directories and symbolic links
that stay inside the environment, and nothing that gains privileges where it is unpacked.

A pack is unpacked on compute nodes, often by a job script, sometimes as root (a container
build, a prolog). So, before anything is packed, every entry of the environment is looked at
(``lstat``, links never followed) and the pack is refused (exit 2, :class:`NotPackable`, naming
each path and what was expected) when it holds:

* a socket, FIFO, character or block device (``S_ISSOCK``, ``S_ISFIFO``, ``S_ISCHR``, ``S_ISBLK``,
  https://man7.org/linux/man-pages/man7/inode.7.html): nothing a Python environment needs, and a
  device node unpacked as root is a door into the node;
* a regular file with the set-user-ID or set-group-ID bit (``S_ISUID``/``S_ISGID``): refused, not
  silently dropped, so the user decides (``chmod u-s,g-s``); a set-group-ID *directory* (group
  inheritance in shared project spaces) is no privilege and is kept;
* a symbolic link whose target, as written (what the tar keeps: an absolute path, or a relative
  one joined to the link's directory, one component at a time, never through where another link
  resolves today), lies outside the environment (:func:`link_stays_inside`): its target is not in the pack, so the unpacked copy would use whatever
  is at that path on the node. Allowed only with ``allow_outside_links`` (``pack
  --allow-outside-links``: kept as links, named in the result's notes), except a venv's links in
  ``bin/`` to its own base interpreter's directory (``pyvenv.cfg``'s ``home``), which every venv
  has and the manifest records.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Dict, List, Optional, Set

from envtool.core.errors import echo
from envtool.steps.pack.model import NotPackable

#: how many paths of each kind a refusal names
SHOWN = 5

_SPECIAL = ((stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _base_link(text: str, base_dirs: set) -> bool:
    """Whether the absolute link text ``text`` names a file directly in one of ``base_dirs`` (the
    base interpreter's directories, as written and resolved) and resolves there too."""
    literal = os.path.normpath(text)
    return os.path.dirname(literal) in base_dirs and os.path.dirname(os.path.realpath(literal)) in base_dirs


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


def check_contents(prefix: Path, allow_outside_links: bool = False, base: Optional[str] = None) -> List[str]:
    """Check every entry under ``prefix`` (see the module docstring).

    Args:
        prefix: the environment (absolute).
        allow_outside_links: keep links that leave the environment (named in the returned notes)
            instead of refusing them.
        base: a venv's base interpreter, or None. Links directly in ``PREFIX/bin`` that resolve to a
            file in its directory or in ``pyvenv.cfg``'s ``home`` (resolved; ``bin/python3 ->
            /usr/bin/python3.11``) are always allowed: every venv has them (PEP 405).
    Returns:
        notes for the result: the links kept that leave the environment (none unless
        ``allow_outside_links``).
    Raises:
        NotPackable: exit 2, naming up to :data:`SHOWN` paths of each kind found and what was expected.
    """
    base_dirs = _base_dirs(prefix, base)
    bin_dir = os.path.join(str(prefix), "bin")
    found: Dict[str, List[str]] = {"special": [], "setid": [], "outside": []}
    for dirpath, dirnames, filenames in os.walk(prefix):
        dirnames.sort()
        for name in sorted(dirnames) + sorted(filenames):
            _judge_entry(str(prefix), dirpath, name, dirpath == bin_dir, base_dirs, found)
    problems = _problems(found, allow_outside_links)
    if problems:
        raise NotPackable(f"{echo(str(prefix))} cannot be packed: " + "; ".join(problems))
    return [f"kept a link that leaves the environment (its target must exist on every node): {p}"
            for p in found["outside"]]


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


def _judge_entry(prefix: str, dirpath: str, name: str, in_bin: bool, base_dirs: Set[str],
                 found: Dict[str, List[str]]) -> None:
    """Add ``dirpath/name`` to ``found["special"]``, ``["setid"]`` or ``["outside"]`` when it is one."""
    path = os.path.join(dirpath, name)
    try:
        st = os.lstat(path)
    except OSError:
        return
    mode = st.st_mode
    what = next((words for test, words in _SPECIAL if test(mode)), None)
    if what is not None:
        found["special"].append(f"{echo(path)} ({what})")
    elif stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
        bits = " and ".join(b for b, m in (("set-user-ID", stat.S_ISUID), ("set-group-ID", stat.S_ISGID))
                            if mode & m)
        found["setid"].append(f"{echo(path)} ({bits}, mode {stat.S_IMODE(mode):04o})")
    elif stat.S_ISLNK(mode):
        try:
            text = os.readlink(path)
        except OSError:
            return
        to_base = in_bin and os.path.isabs(text) and _base_link(text, base_dirs)
        if not link_stays_inside(prefix, dirpath, text) and not to_base:
            found["outside"].append(f"{echo(path)} -> {echo(text)}")


def _problems(found: Dict[str, List[str]], allow_outside_links: bool) -> List[str]:
    """The refusals for what :func:`_judge_entry` found (empty: the environment can be packed)."""
    problems = []
    if found["special"]:
        problems.append("expected regular files, directories and symbolic links only; found "
                        + _some(found["special"]) + ": remove them from the environment")
    if found["setid"]:
        problems.append("expected no set-user-ID or set-group-ID files (they would run with their owner's "
                        "rights where the pack is unpacked); found " + _some(found["setid"])
                        + ": clear the bits (chmod u-s,g-s FILE) or remove them")
    if found["outside"] and not allow_outside_links:
        problems.append("expected symbolic links that stay inside the environment; found links that leave it "
                        "(what they point at is not in the pack): " + _some(found["outside"])
                        + ": copy their targets into the environment, or give --allow-outside-links to keep "
                        "them as links (their targets must then exist at those paths on every node)")
    return problems


def _some(items: List[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more
