"""Modulefiles for site admins: Lmod (Lua) and Environment Modules (Tcl).

Layout (after Spack's ``lib/spack/spack/modules/``): :mod:`.base` computes the plain-data
content of a modulefile from a prefix and its spec; :mod:`.lmod` and :mod:`.tcl` render it with
the templates in ``templates/``; :func:`write_modulefile` puts the text at
``<root>/<name>/<version>[.lua]`` and marks the default version.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from envtool.core.errors import UsageError
from envtool.modules.base import ModuleContent, build_content, parse_module_name  # noqa: F401

#: ``--format`` choices.
FORMATS = ("lua", "tcl")


def renderer(fmt: str):
    """The writer module for ``fmt`` (``lua`` → :mod:`.lmod`, ``tcl`` → :mod:`.tcl`).

    Raises:
        UsageError: another format.
    """
    if fmt == "lua":
        from envtool.modules import lmod

        return lmod
    if fmt == "tcl":
        from envtool.modules import tcl

        return tcl
    raise UsageError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")


def modulefile_path(root: Path, content: ModuleContent, fmt: str) -> Path:
    """``<root>/<name>/<version>.lua`` (Lmod) or ``<root>/<name>/<version>`` (Tcl)."""
    return Path(root) / content.name / (content.version + renderer(fmt).SUFFIX)


def _write_atomic(path: Path, text: str) -> None:
    from envtool.core.atomic import write_text_atomic

    write_text_atomic(path, text)


def mark_default(root: Path, content: ModuleContent, fmt: str) -> Path:
    """Make ``content``'s version the default of its name, the way each module system expects.

    Lmod: a symlink ``<root>/<name>/default`` → ``<version>.lua`` (Lmod's "Marking a version as
    default" docs). Environment Modules: ``<root>/<name>/.version`` holding
    ``set ModulesVersion "<version>"`` (modulefile(4), "Locating Modulefiles"; Lmod reads it too).

    Returns:
        the symlink or ``.version`` file.
    """
    d = Path(root) / content.name
    if fmt == "lua":
        link = d / "default"
        tmp = d / f".default.{os.getpid()}.tmp"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(content.version + ".lua", tmp)
        os.replace(tmp, link)
        return link
    from envtool.modules.tcl import tcl_string

    path = d / ".version"
    _write_atomic(path, f"#%Module1.0\nset ModulesVersion {tcl_string(content.version)}\n")
    return path


def other_format(root: Path, content: ModuleContent, fmt: str) -> Optional[Path]:
    """The modulefile of the same ``NAME/VERSION`` in the other format (``VERSION`` for Lua,
    ``VERSION.lua`` for Tcl) when one is there, else None. Lmod (https://github.com/TACC/Lmod) reads
    both kinds from one tree; with ``foo/1.0`` and ``foo/1.0.lua`` both present, ``module load
    foo/1.0`` under Lmod 8.6.19 (Debian's ``lmod`` package) loads the ``.lua`` one, so a second file
    of the other format silently shadows or is shadowed."""
    other = modulefile_path(root, content, "tcl" if fmt == "lua" else "lua")
    return other if os.path.lexists(other) else None


def write_modulefile(content: ModuleContent, root: Path, fmt: str = "lua", default: bool = False,
                     force: bool = False) -> Path:
    """Render ``content`` and write it under ``root`` (atomically: a temporary file, then rename).

    Args:
        content: what the modulefile says.
        root: the module tree (what users ``module use``); created if missing.
        fmt: ``lua`` or ``tcl``.
        default: also mark this version as the default (:func:`mark_default`).
        force: replace a modulefile of the same ``NAME/VERSION`` in the other format (it is
            removed once the new one is written).
    Returns:
        the modulefile's path.
    Raises:
        UsageError: unknown format; a modulefile of the other format for ``NAME/VERSION`` exists
            and ``force`` is not set (:func:`other_format`, exit 2, naming both); ``root`` cannot be
            written.
    """
    text = renderer(fmt).render(content)
    path = modulefile_path(root, content, fmt)
    other = other_format(root, content, fmt)
    if other is not None and not force:
        raise UsageError(f"{other} already holds {content.full_name} as a "
                         f"{'Tcl' if fmt == 'lua' else 'Lua'} modulefile; one NAME/VERSION gets one format (Lmod "
                         f"would read only one of the two): write --format {'tcl' if fmt == 'lua' else 'lua'}, "
                         f"choose another --name, or pass --force to replace it with {path}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, text)
        if other is not None:
            os.unlink(other)
        if default:
            mark_default(root, content, fmt)
    except OSError as exc:
        raise UsageError(f"--root: cannot write {path}: {exc.strerror or exc}") from None
    return path
