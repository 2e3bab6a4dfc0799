"""Modulefiles in a module tree (what users ``module use``): where a format's file goes, writing it,
marking the default version, finding the markers again, and the ``family`` of modules already there.

Every format fact comes from the writer that :mod:`envtool.modules.registry` holds for ``--format``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from envtool.core.atomic import write_text_atomic
from envtool.core.errors import UsageError
from envtool.modules import registry
from envtool.modules.content import ModuleContent
from envtool.modules.writer import ModuleWriter


def modulefile_path(root: Path, content: ModuleContent, fmt: str) -> Path:
    """``<root>/<name>/<version><suffix>`` of the writer for ``fmt`` (``.lua`` for Lmod, none for Tcl).

    Raises:
        UsageError: unknown format.
    """
    return Path(root) / content.name / registry.get(fmt).filename(content.version)


def mark_default(root: Path, content: ModuleContent, fmt: str) -> Path:
    """Make ``content``'s version the default of its name, the way the format's module system
    expects (:meth:`~envtool.modules.writer.ModuleWriter.mark_default`).

    Returns:
        the marker written.
    Raises:
        UsageError: unknown format.
        OSError: the directory cannot be written.
    """
    return registry.get(fmt).mark_default(Path(root) / content.name, content.version)


def default_markers(root: Path, name: str, version: str) -> List[Path]:
    """The default markers of every registered format in ``root/name`` that make ``version`` the
    default of ``name`` (empty: it is not the marked default)."""
    found: List[Path] = []
    for writer in registry.writers():
        for marker in writer.default_markers(Path(root) / name, version):
            if marker not in found:
                found.append(marker)
    return found


def other_format(root: Path, content: ModuleContent, fmt: str) -> Optional[Tuple[Path, ModuleWriter]]:
    """The modulefile of the same ``NAME/VERSION`` in another registered format, when one is there,
    and its writer; else None. Lmod (https://github.com/TACC/Lmod) reads both kinds from one tree;
    with ``foo/1.0`` and ``foo/1.0.lua`` both present, ``module load foo/1.0`` under Lmod 8.6.19
    (Debian's ``lmod`` package) loads the ``.lua`` one, so a second file of another format
    silently shadows or is shadowed."""
    mine = modulefile_path(root, content, fmt)
    for writer in registry.writers():
        if writer.name == fmt:
            continue
        other = Path(root) / content.name / writer.filename(content.version)
        if other != mine and os.path.lexists(other):
            return other, writer
    return None


def other_format_message(other: Path, other_writer: ModuleWriter, full_name: str) -> str:
    """The start of the message refusing to write ``full_name`` beside ``other`` (see :func:`other_format`)."""
    return (f"{other} already holds {full_name} as a {other_writer.label} modulefile; one NAME/VERSION gets one "
            f"format (Lmod would read only one of the two)")


def write_modulefile(content: ModuleContent, root: Path, fmt: str = registry.DEFAULT_FORMAT, default: bool = False,
                     force: bool = False) -> Path:
    """Render ``content`` and write it under ``root`` (atomically: a temporary file, then rename).

    Args:
        content: what the modulefile says.
        root: the module tree (what users ``module use``); created if missing.
        fmt: a registered format (``lua`` or ``tcl``).
        default: also mark this version as the default (:func:`mark_default`).
        force: replace a modulefile of the same ``NAME/VERSION`` in another format (it is
            removed once the new one is written).
    Returns:
        the modulefile's path.
    Raises:
        UsageError: unknown format; a modulefile of another format for ``NAME/VERSION`` exists
            and ``force`` is not set (:func:`other_format`, exit 2, naming both); ``root`` cannot be
            written.
    """
    writer = registry.get(fmt)
    text = writer.render(content)
    path = modulefile_path(root, content, fmt)
    found = other_format(root, content, fmt)
    if found is not None and not force:
        other, other_writer = found
        raise UsageError(f"{other_format_message(other, other_writer, content.full_name)}: write --format "
                         f"{other_writer.name}, choose another --name, or pass --force to replace it with {path}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
        if found is not None:
            os.unlink(found[0])
        if default:
            mark_default(root, content, fmt)
    except OSError as exc:
        raise UsageError(f"--root: cannot write {path}: {exc.strerror or exc}") from None
    return path


def module_families(modules: Sequence[str], modulepath: Optional[str] = None) -> Dict[str, str]:
    """The ``family`` that each of ``modules`` declares, found in the module tree.

    Each ``name/version`` is looked up as ``<dir>/name/<version><suffix>`` of every registered
    format (``version.lua``, then ``version``) in every directory of ``modulepath``
    (``:``-separated; default ``$MODULEPATH``), first hit wins; a bare ``name`` looks at every
    version under ``<dir>/name/``. Each writer reads its own syntax
    (:meth:`~envtool.modules.writer.ModuleWriter.declared_family`: ``family(...)`` in Lua,
    ``family ...`` in Tcl), the first that finds one wins; a family set dynamically is not seen.

    Returns:
        module → family, for the modules found that declare one.
    """
    if modulepath is None:
        modulepath = os.environ.get("MODULEPATH", "")
    found: Dict[str, str] = {}
    for mod in modules:
        name, _, version = mod.partition("/")
        for d in (Path(p) for p in modulepath.split(":") if p):
            if version:
                candidates = [d / name / w.filename(version) for w in registry.writers()]
            else:
                candidates = sorted((d / name).glob("*")) if (d / name).is_dir() else []
            hits = [c for c in candidates if c.is_file() and not c.name.startswith(".")]
            for c in hits:
                try:
                    text = c.read_text(errors="replace")
                except OSError:
                    continue
                family = next((f for f in (w.declared_family(text) for w in registry.writers()) if f), None)
                if family:
                    found[mod] = family
                    break
            if hits:
                break
    return found
