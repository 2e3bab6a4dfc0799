"""Render a :class:`~envtool.modules.content.ModuleContent` as an Lmod (Lua) modulefile.

Functions used (Lmod ``docs/source/050_lua_modulefiles.rst``): ``whatis``, ``help``, ``family``,
``conflict``, ``depends_on`` (loads a module and unloads it again only if it loaded it),
``prepend_path``/``append_path``, ``pushenv`` (set; unload restores the previous value),
``extensions`` (Lmod >= 8.2: ``module spider <package>`` finds the module), ``LmodMessage`` in load
mode for an archived or deprecated stack (printed on ``module load``; ``LmodWarning`` would make
Lmod 8.6's ``module load`` exit 1, seen with Debian's 8.6.19).

The default version is a symlink ``default`` → ``<version>.lua`` beside the versions (Lmod docs,
"Marking a version as default",
https://lmod.readthedocs.io/en/latest/060_locating.html#marking-a-version-as-default).

Escaping: every string is a Lua double-quoted literal (:func:`lua_string`), except the help text,
which is a long bracket ``[==[ … ]==]`` whose level is chosen so that the text cannot close it
(:func:`lua_long_string`). Neither form interprets ``$``, backticks or ``$(…)``.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List, Optional

from envtool import __version__
from envtool.modules.content import ModuleContent
from envtool.modules.writer import ModuleWriter, change_lines, check_names, comment_text, load_template

#: ``family("x")`` in a Lua modulefile (Lmod ``docs/source/050_lua_modulefiles.rst``).
_FAMILY_RE = re.compile(r"""^\s*family\s*\(\s*["']([^"']+)["']\s*\)""", re.M)

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def lua_string(text: str) -> str:
    """``text`` as a Lua double-quoted string literal that reads back as exactly ``text``.

    Backslash, quote, newline, CR and tab get their Lua escapes; every other control byte
    becomes a three-digit decimal escape (``\\ddd``, Lua 5.1 manual §2.1). Other characters,
    UTF-8 included, are written as they are.
    """
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append("\\%03d" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def lua_long_string(text: str) -> str:
    """``text`` as a Lua long bracket string ``[==[\\n…]==]`` that ``text`` cannot close.

    The level (number of ``=``) is the smallest for which the closing bracket first occurs at
    the end. Lua drops the newline right after the opening bracket, which is the one added here.
    Carriage returns are dropped (Lua would turn ``\\r\\n`` into ``\\n`` anyway).
    """
    text = text.replace("\r", "")
    level = 0
    while True:
        close = "]" + "=" * level + "]"
        if (text + close).find(close) == len(text):
            break
        level += 1
    return "[" + "=" * level + "[\n" + text + close


class LmodWriter(ModuleWriter):
    """Lmod (Lua) modulefiles: ``<root>/<name>/<version>.lua``, default marked by a ``default`` symlink."""

    name = "lua"
    label = "Lua"
    summary = "Lmod"
    suffix = ".lua"
    default_marker = "default"
    default_help = "Lmod: a 'default' symlink"
    systems = ("lmod",)

    def render(self, content: ModuleContent) -> str:
        """The Lua modulefile text for ``content`` (template ``templates/modulefile.lua``).

        Raises:
            ValueError: an invalid module or variable name in ``content``.
        """
        check_names(content)
        changes = change_lines(content.changes, "--", lambda c: f"{c.op}({lua_string(c.name)}, {lua_string(c.value)})")
        ext = ", ".join(f"{n}/{v}" for n, v in content.extensions)
        return load_template("modulefile.lua").substitute(
            full_name=content.full_name, name=content.name, envtool_version=__version__,
            notes="\n".join(f"-- note: {comment_text(n)}" for n in content.notes),
            whatis="\n".join(f"whatis({lua_string(w)})" for w in content.whatis),
            help=lua_long_string(content.help),
            family=f"family({lua_string(content.family)})" if content.family else "",
            conflicts="\n".join(f"conflict({lua_string(c)})" for c in content.conflicts),
            depends_on="\n".join(f"depends_on({lua_string(m)})" for m in content.depends_on),
            changes="\n".join(changes),
            extensions=f"extensions({lua_string(ext)})" if ext else "",
            warning=(f"if (mode() == \"load\") then\n    LmodMessage({lua_string('WARNING: ' + content.warning)})\nend"
                     if content.warning else ""),
        )

    def mark_default(self, directory: Path, version: str) -> Path:
        """Point the ``default`` symlink in ``directory`` at ``<version>.lua`` (a new link renamed over
        the old one, so the marker is never missing)."""
        link = Path(directory) / self.default_marker
        tmp = Path(directory) / f".default.{os.getpid()}.tmp"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(self.filename(version), tmp)
        os.replace(tmp, link)
        return link

    def default_markers(self, directory: Path, version: str) -> List[Path]:
        """The ``default`` symlink when it points at ``<version>.lua`` or ``<version>`` (Lmod
        follows it to a Tcl modulefile too)."""
        link = Path(directory) / self.default_marker
        if link.is_symlink() and os.readlink(link) in (version, self.filename(version)):
            return [link]
        return []

    def declared_family(self, text: str) -> Optional[str]:
        """The ``family("x")`` call in Lua ``text``, read with a regular expression."""
        match = _FAMILY_RE.search(text)
        return match.group(1) if match else None
