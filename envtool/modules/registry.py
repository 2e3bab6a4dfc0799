"""The one registry of modulefile writers: ``--format`` name → :class:`~envtool.modules.writer.ModuleWriter`.

Like Spack's ``module_types`` table (``spack/spack@04e016a8154f:lib/spack/spack/modules/__init__.py``),
the registry names every writer once; command-line choices and help (:func:`names`,
:func:`format_help`, :func:`default_help`) and every caller that needs a format's facts ask it.
A new format is one module with a writer class plus one :func:`register` call below.
"""
from __future__ import annotations

from typing import Dict, Tuple

from envtool.core.errors import UsageError
from envtool.modules.content import NAME_RE
from envtool.modules.lmod import LmodWriter
from envtool.modules.tcl import TclWriter
from envtool.modules.writer import ModuleWriter

#: The format used when none is chosen (``--format`` default; ``create --modulefile-root``).
DEFAULT_FORMAT = "lua"

_WRITERS: Dict[str, ModuleWriter] = {}


def register(writer: ModuleWriter) -> ModuleWriter:
    """Add ``writer`` under its :attr:`~envtool.modules.writer.ModuleWriter.name`.

    Returns:
        ``writer``.
    Raises:
        ValueError: the name is not a module name part, or the name or the suffix is taken (two
            formats with one file name would overwrite each other's modulefiles).
    """
    if not NAME_RE.fullmatch(writer.name):
        raise ValueError(f"module writer name {writer.name!r} is not [A-Za-z0-9][A-Za-z0-9._+-]*")
    for other in _WRITERS.values():
        if other.name == writer.name or other.suffix == writer.suffix:
            raise ValueError(f"module writer {writer!r} clashes with {other!r} (same name or suffix "
                             f"{writer.suffix!r})")
    _WRITERS[writer.name] = writer
    return writer


def unregister(name: str) -> None:
    """Remove the writer ``name`` (for tests that register a writer of their own); no error if absent."""
    _WRITERS.pop(name, None)


def names() -> Tuple[str, ...]:
    """The ``--format`` choices, in registration order."""
    return tuple(_WRITERS)


def writers() -> Tuple[ModuleWriter, ...]:
    """Every registered writer, in registration order."""
    return tuple(_WRITERS.values())


def get(name: str) -> ModuleWriter:
    """The writer for ``--format name``.

    Raises:
        UsageError: no writer has that name (exit 2, naming the choices).
    """
    try:
        return _WRITERS[name]
    except KeyError:
        raise UsageError(f"--format: expected one of {', '.join(_WRITERS)}, got {name!r}") from None


def format_help() -> str:
    """``--format`` help: each choice with who reads it, the default marked."""
    parts = [f"{w.name} ({w.summary}{', default' if w.name == DEFAULT_FORMAT else ''})" for w in _WRITERS.values()]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def default_help() -> str:
    """How each format marks the default version, for ``--default`` help."""
    return "; ".join(w.default_help for w in _WRITERS.values())


register(LmodWriter())
register(TclWriter())
