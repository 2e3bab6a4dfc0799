"""The one registry of modulefile writers: ``--format`` name → :class:`~envtool.modules.writer.ModuleWriter`.

Like Spack's ``module_types`` table (``spack/spack@04e016a8154f:lib/spack/spack/modules/__init__.py``),
the registry names every writer once; command-line choices and help (:func:`names`,
:func:`format_help`, :func:`default_help`) and every caller that needs a format's facts ask it.
:data:`WRITERS` is a :class:`envtool.core.plugins.Registry`. A new format is one module with a
writer class plus one :func:`register` call below, or, from another distribution, one
``modulefile.NAME = "module:WRITER"`` entry point of the ``envtool.plugins`` group naming a
writer instance (its module is imported when the format is first used; ``--help`` lists it
without importing it).
"""
from __future__ import annotations

from typing import Tuple

from envtool.core.errors import UsageError
from envtool.core.plugins import Registry, UnknownPlugin
from envtool.modules.content import NAME_RE
from envtool.modules.lmod import LmodWriter
from envtool.modules.tcl import TclWriter
from envtool.modules.writer import ModuleWriter

#: The format used when none is chosen (``--format`` default; ``create --modulefile-root``).
DEFAULT_FORMAT = "lua"


def _check_writer(obj: object) -> None:
    """A registered writer is a :class:`ModuleWriter` instance whose name is a module name part."""
    if not isinstance(obj, ModuleWriter):
        raise TypeError(f"a module writer must be a ModuleWriter instance, not {obj!r}")
    if not NAME_RE.fullmatch(obj.name):
        raise ValueError(f"module writer name {obj.name!r} is not [A-Za-z0-9][A-Za-z0-9._+-]*")


#: ``--format`` name → writer, in registration order.
WRITERS: Registry[ModuleWriter] = Registry("modulefile", check=_check_writer)


def _refuse_clash(writer: ModuleWriter, name: str) -> None:
    """Two formats with one name or file suffix would overwrite each other's modulefiles: ``writer``
    (registered or to be registered as ``name``) clashes with no loaded writer registered before it
    (built-ins come first, so a plug-in never takes a built-in's suffix)."""
    order = WRITERS.names()
    before = order[:order.index(name)] if name in order else order
    for other_name, other in WRITERS.loaded().items():
        if other_name in before and (other.name == writer.name or other.suffix == writer.suffix):
            raise ValueError(f"module writer {writer!r} clashes with {other!r} (same name or suffix "
                             f"{writer.suffix!r})")


def register(writer: ModuleWriter) -> ModuleWriter:
    """Add ``writer`` under its :attr:`~envtool.modules.writer.ModuleWriter.name`.

    Returns:
        ``writer``.
    Raises:
        ValueError: the name is not a module name part, or the name or the suffix is taken (two
            formats with one file name would overwrite each other's modulefiles).
    """
    _check_writer(writer)
    _refuse_clash(writer, writer.name)
    WRITERS.register(writer.name, writer, summary=writer.summary)
    WRITERS.get(writer.name)  # loaded now: later writers are checked against it
    return writer


def unregister(name: str) -> None:
    """Remove the writer ``name`` (for tests that register a writer of their own); no error if absent."""
    WRITERS.unregister(name)


def names() -> Tuple[str, ...]:
    """The ``--format`` choices, in registration order (plug-ins last; none is imported)."""
    return WRITERS.names()


def writers() -> Tuple[ModuleWriter, ...]:
    """Every registered writer, in registration order (imports the plug-in ones)."""
    return tuple(get(name) for name in WRITERS.names())


def get(name: str) -> ModuleWriter:
    """The writer for ``--format name`` (a plug-in's module imported on first use).

    Raises:
        UsageError: no writer has that name (exit 2, naming the choices), or a plug-in's writer
            is not a :class:`ModuleWriter`, has another name than its entry point, or clashes with
            a loaded writer's suffix.
    """
    try:
        writer = WRITERS.get(name)
    except UnknownPlugin:
        raise UsageError(f"--format: expected one of {', '.join(WRITERS.names())}, got {name!r}") from None
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--format {name} ({WRITERS.origin(name)}): {exc}") from None
    if writer.name != name:
        raise UsageError(f"--format {name} ({WRITERS.origin(name)}): its writer is named {writer.name!r}")
    try:
        _refuse_clash(writer, name)
    except ValueError as exc:
        raise UsageError(f"--format {name} ({WRITERS.origin(name)}): {exc}") from None
    return writer


def format_help() -> str:
    """``--format`` help: each choice with who reads it, the default marked (imports no plug-in)."""
    parts = [f"{n} ({WRITERS.summary(n) or WRITERS.origin(n)}{', default' if n == DEFAULT_FORMAT else ''})"
             for n in WRITERS.names()]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def default_help() -> str:
    """How each format loaded so far (the built-in ones) marks the default version, for ``--default`` help."""
    return "; ".join(w.default_help for w in WRITERS.loaded().values())


register(LmodWriter())
register(TclWriter())
