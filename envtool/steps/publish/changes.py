"""What a publish would create, write or leave alone, path by path, with modes and group: the
``changes`` of ``publish --dry-run`` (:mod:`envtool.steps.publish`)."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from envtool.steps.publish.prepare import Stack
from envtool.steps.publish.tree import group_name, missing_dirs, published_mode


class ChangeList:
    """``{"path", "change", "kind", "mode", "group", "note"}`` per path, each path and change once.

    Args:
        gid: the group given to what publish creates, or None (the user's).
    """

    def __init__(self, gid: Optional[int]) -> None:
        self.gid = gid
        self.group = group_name(gid)
        self.items: List[Dict[str, object]] = []
        self._seen: set = set()

    def mode(self, is_dir: bool, umask: int, read_only: bool, executable: bool = False) -> int:
        """The mode publish gives (:func:`envtool.steps.publish.tree.published_mode`)."""
        return published_mode(is_dir, executable or is_dir, self.gid is not None, umask, read_only)

    def add(self, path: Path, what: str, kind: str, mode: Optional[int] = None, note: str = "") -> None:
        """One change (a repeat of the same path and change is left out)."""
        if (str(path), what) in self._seen:
            return
        self._seen.add((str(path), what))
        item: Dict[str, object] = {"path": str(path), "change": what, "kind": kind}
        if mode is not None:
            item["mode"] = stat.filemode(mode | (stat.S_IFDIR if kind.endswith("directory") else stat.S_IFREG))
            item["group"] = self.group or "(the user's)"
        if note:
            item["note"] = note
        self.items.append(item)

    def dirs(self, path: Path, umask: int) -> None:
        """``path`` kept as it is (its mode and group too), or created with its missing ancestors."""
        if os.path.isdir(path):
            st = os.stat(path)
            self.add(path, "keep", "directory", note=f"exists ({stat.filemode(st.st_mode)}, group "
                                                     f"{group_name(st.st_gid)}): its mode and group are left alone")
            return
        for d in missing_dirs(path):
            self.add(d, "create", "directory", self.mode(True, umask, False))

    def stack(self, st: Stack, umask: int, mod_umask: int) -> None:
        """What building ``st`` creates or replaces: its directory, environment, SBOM, modulefile."""
        self.dirs(st.target.parent, umask)
        ro_dir = stat.filemode(stat.S_IFDIR | self.mode(True, umask, True))
        ro_file = stat.filemode(stat.S_IFREG | self.mode(False, umask, True))
        whose = self.group or "(the user's)"
        self.add(st.target, "replace" if st.action == "replaced" else "create", "environment",
                 note=f"built by create in a temporary sibling, then read-only: directories {ro_dir}, files "
                      f"{ro_file} (executables +x), group {whose}")
        self.add(st.sbom, "write", "SBOM", self.mode(False, umask, True))
        self.dirs(st.modulefile.parent, mod_umask)
        self.add(st.modulefile, "write", "modulefile", self.mode(False, mod_umask, True))


def changes(stacks: Sequence[Stack], root: Path, modulefiles: Path, gid: Optional[int], umask: int,
            default: bool, fmt: str) -> List[Dict[str, object]]:
    """Every path publishing ``stacks`` would touch or leave alone (nothing is touched)."""
    from envtool.modules.registry import get

    mod_umask = umask & 0o022
    out = ChangeList(gid)
    out.dirs(root, umask)
    out.dirs(modulefiles, mod_umask)
    for st in stacks:
        if st.options is not None:   # None: unchanged, nothing is built
            out.stack(st, umask, mod_umask)
        if default:
            marker = st.modulefile.parent / get(fmt).default_marker
            out.add(marker, "write", "default marker", note=f"makes {st.module} the default of {st.spec.name}")
    return out.items
