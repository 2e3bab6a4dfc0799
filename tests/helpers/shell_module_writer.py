"""A toy modulefile format kept in the tests: a bash script that is sourced to load and to unload.

It shows what a new format takes — this one file (a :class:`~envtool.modules.writer.ModuleWriter`
subclass) plus one :func:`envtool.modules.registry.register` call — and passes the same contract
as the real writers (``tests/test_module_writer_contract.py``), loaded by the test's
``bash-source`` loader: ``. <root>/<name>/<version>.sh load`` and ``… unload`` in one bash.

``<root>/<name>/<version>.sh`` holds, per :class:`~envtool.modules.content.EnvChange`:

* ``prepend_path``/``append_path``: add the entry on load; remove one occurrence of it on unload
  (unsetting the variable when nothing is left);
* ``pushenv``/``setenv``: on load keep the old value (or that there was none) in a shell variable
  that is not exported, then export the new one; on unload put the old value back or unset it.

Values are single-quoted for the shell (``shlex.quote``, Python docs), so nothing in them is
expanded. ``depends_on``, ``conflicts`` and ``family`` are written as comments only: a sourced
script has no module table to consult. The default version is a symlink ``default.sh`` →
``<version>.sh``.
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import List

from envtool.modules.content import EnvChange, ModuleContent
from envtool.modules.writer import ModuleWriter, check_names, comment_text


class ShellScriptWriter(ModuleWriter):
    """``--format sh``: a bash script sourced with ``load`` or ``unload`` as its argument."""

    name = "sh"
    label = "shell-script"
    summary = "a bash script to source (toy)"
    suffix = ".sh"
    default_marker = "default.sh"
    default_help = "sh: a 'default.sh' symlink"
    systems = ("bash-source",)

    def render(self, content: ModuleContent) -> str:
        check_names(content)
        tag = re.sub(r"[^A-Za-z0-9_]", "_", content.full_name)
        load: List[str] = []
        unload: List[str] = []
        for i, change in enumerate(content.changes):
            load.append(f"    # {comment_text(change.origin)}")
            load += self._load(change, f"__shmod_{tag}_{i}")
            unload[:0] = self._unload(change, f"__shmod_{tag}_{i}")
        head = [f"# {content.full_name}: written by envtool's toy shell-script module writer",
                f"# usage: . {shlex.quote(self.filename(content.version))} load|unload"]
        head += [f"# depends on {comment_text(m)} (not loaded by this format)" for m in content.depends_on]
        head += [f"# note: {comment_text(n)}" for n in content.notes]
        return "\n".join(head + ['case "${1-load}" in', "load)", *load, "    ;;", "unload)", *unload, "    ;;",
                                 "*)", '    echo "usage: . FILE load|unload" >&2; return 2', "    ;;", "esac", ""])

    @staticmethod
    def _load(c: EnvChange, var: str) -> List[str]:
        value = shlex.quote(c.value)
        if c.op == "prepend_path":
            return [f'    export {c.name}={value}"${{{c.name}:+:${c.name}}}"']
        if c.op == "append_path":
            return [f'    export {c.name}="${{{c.name}:+${c.name}:}}"{value}']
        return [f'    if [ -n "${{{c.name}+set}}" ]; then {var}_set=1; {var}_old=${c.name}; else unset {var}_set; fi',
                f"    export {c.name}={value}"]

    @staticmethod
    def _unload(c: EnvChange, var: str) -> List[str]:
        if c.op in ("prepend_path", "append_path"):
            return [f"    __shmod_v={shlex.quote(c.value)}; __shmod_t=\":${{{c.name}-}}:\"",
                    '    __shmod_t=${__shmod_t/":$__shmod_v:"/:}; __shmod_t=${__shmod_t#:}; __shmod_t=${__shmod_t%:}',
                    f'    if [ -n "$__shmod_t" ]; then export {c.name}="$__shmod_t"; else unset {c.name}; fi',
                    "    unset __shmod_v __shmod_t"]
        return [f'    if [ -n "${{{var}_set-}}" ]; then export {c.name}="${var}_old"; else unset {c.name}; fi',
                f"    unset {var}_set {var}_old"]

    def mark_default(self, directory: Path, version: str) -> Path:
        link = Path(directory) / self.default_marker
        tmp = Path(directory) / f".default.sh.{os.getpid()}.tmp"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(self.filename(version), tmp)
        os.replace(tmp, link)
        return link

    def default_markers(self, directory: Path, version: str) -> List[Path]:
        link = Path(directory) / self.default_marker
        return [link] if link.is_symlink() and os.readlink(link) == self.filename(version) else []
