"""Render a :class:`~envtool.modules.content.ModuleContent` as a Tcl modulefile.

For Environment Modules (>= 5.1 for ``family``, ``pushenv``, ``depends-on``; Debian 12 ships
5.2; commands from its ``modulefile(4)`` man page), also read by Lmod: ``#%Module1.0``,
``module-whatis``, ``proc ModulesHelp``, ``family``, ``conflict``, ``depends-on`` (a requirement
loaded with it and unloaded with it when nothing else needs it), ``prepend-path``/``append-path``,
``pushenv``, ``extensions`` (a no-op in Environment Modules 5.2; Lmod uses it for spider).

Lmod reads Tcl modulefiles too. Lmod 8.6 translates them with ``tcl2lua.tcl`` in its own
process (the ``tcl2lua`` C module, when Lmod is built with it, as Debian's is), and that
script's ``pushenv`` first sets the variable in the process environment, then emits Lmod's
``pushenv``; Lmod then records the *new* value as the one to restore (seen with Debian's lmod
8.6.19: ``__LMOD_STACK_X`` holds the new value twice, and ``module unload`` leaves the module's
value in place). So every ``pushenv`` goes through ``envtool_pushenv`` (defined in the
template): under Lmod (``$ModuleTool`` is ``Lmod``) it calls ``pushenv`` and then puts the
process environment back the way it was (the old value, or unset), so Lmod's ``pushenv``
sees and records the real previous value; under Environment Modules it is plain ``pushenv``.
Either way unload restores a value the user had set before, or unsets the variable.

An archived or deprecated stack prints its status on ``module load`` with ``puts stderr`` in
load mode (Lmod turns it into a message; Environment Modules prints it).

The default version is named in a ``.version`` file beside the versions, holding
``set ModulesVersion "<version>"`` (modulefile(4), "Locating Modulefiles"; Lmod reads it too).

Escaping: every string is a Tcl double-quoted word in which ``\\ " $ [ ] { }`` are
backslash-escaped and control characters use ``\\n``/``\\t``/``\\uXXXX`` (:func:`tcl_string`),
so no substitution or command can happen inside it.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional

from envtool import __version__
from envtool.core.atomic import write_text_atomic
from envtool.modules.content import EnvChange, ModuleContent
from envtool.modules.writer import ModuleWriter, change_lines, check_names, comment_text, load_template

#: ``set ModulesVersion "<version>"`` in a ``.version`` file (modulefile(4), "Locating Modulefiles").
_MODULES_VERSION_RE = re.compile(r"^\s*set\s+ModulesVersion\s+\"?([^\"\s]+)\"?", re.M)

#: ``family x`` / ``family "x"`` in a Tcl modulefile (Environment Modules' modulefile(4)).
_FAMILY_RE = re.compile(r"""^\s*family\s+"?([A-Za-z0-9_.+-]+)"?""", re.M)

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SPECIAL = set('\\"$[]{};')


def tcl_string(text: str) -> str:
    """``text`` as a Tcl double-quoted word that evaluates to exactly ``text``.

    Tcl substitutes ``$``, ``[…]`` and backslashes inside double quotes (Tcl(n), rules 4, 7-9):
    each of those, the quote and braces are escaped; control characters become ``\\n``,
    ``\\r``, ``\\t`` or a four-digit ``\\uXXXX`` (fixed width, so the next character cannot
    be read as part of it).
    """
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch in _SPECIAL:
            out.append("\\" + ch)
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


_OPS = {"prepend_path": "prepend-path", "append_path": "append-path", "pushenv": "pushenv", "setenv": "setenv"}


def _change(c: EnvChange) -> str:
    if c.op == "pushenv":
        # envtool_pushenv: see the module docstring (Lmod's Tcl pushenv).
        return f"envtool_pushenv {c.name} {tcl_string(c.value)}"
    return f"{_OPS[c.op]} {c.name} {tcl_string(c.value)}"


class TclWriter(ModuleWriter):
    """Tcl modulefiles (Environment Modules, also read by Lmod): ``<root>/<name>/<version>``,
    default marked by a ``.version`` file."""

    name = "tcl"
    label = "Tcl"
    summary = "Environment Modules, also read by Lmod"
    suffix = ""
    default_marker = ".version"
    default_help = "Tcl: a .version file"
    systems = ("envmodules", "lmod")

    def render(self, content: ModuleContent) -> str:
        """The Tcl modulefile text for ``content`` (template ``templates/modulefile.tcl``).

        Raises:
            ValueError: an invalid module or variable name in ``content``.
        """
        check_names(content)
        changes = change_lines(content.changes, "#", _change)
        return load_template("modulefile.tcl").substitute(
            full_name=content.full_name, name=content.name, envtool_version=__version__,
            notes="\n".join(f"# note: {comment_text(n)}" for n in content.notes),
            whatis="\n".join(f"module-whatis {tcl_string(w)}" for w in content.whatis),
            help="\n".join(f"    puts stderr {tcl_string(line)}" for line in content.help.split("\n")),
            family=f"family {tcl_string(content.family)}" if content.family else "",
            conflicts="\n".join(f"conflict {tcl_string(c)}" for c in content.conflicts),
            depends_on="\n".join(f"depends-on {tcl_string(m)}" for m in content.depends_on),
            changes="\n".join(changes),
            extensions=("extensions " + " ".join(tcl_string(f"{n}/{v}") for n, v in content.extensions))
            if content.extensions else "",
            warning=(f"if {{[module-info mode load]}} {{\n    puts stderr {tcl_string('WARNING: ' + content.warning)}\n}}"
                     if content.warning else ""),
        )

    def mark_default(self, directory: Path, version: str) -> Path:
        """Write ``directory/.version`` holding ``set ModulesVersion "<version>"`` (atomically)."""
        path = Path(directory) / self.default_marker
        write_text_atomic(path, f"#%Module1.0\nset ModulesVersion {tcl_string(version)}\n")
        return path

    def default_markers(self, directory: Path, version: str) -> List[Path]:
        """``directory/.version`` when it is a regular file whose ``ModulesVersion`` is ``version``
        (the first 64 KiB are read)."""
        dot = Path(directory) / self.default_marker
        if not dot.is_file() or dot.is_symlink():
            return []
        try:
            with open(dot, encoding="utf-8", errors="replace") as fh:
                text = fh.read(65536)
        except OSError:
            return []
        m = _MODULES_VERSION_RE.search(text)
        return [dot] if m and m.group(1) == version else []

    def declared_family(self, text: str) -> Optional[str]:
        """The ``family x`` command in Tcl ``text``, read with a regular expression."""
        match = _FAMILY_RE.search(text)
        return match.group(1) if match else None
