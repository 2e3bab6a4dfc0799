"""The one registry of engines: ``--engine NAME`` and a spec's ``engine:`` are looked up here.

:data:`ENGINES` is a :class:`envtool.core.plugins.Registry` of engine factories (an
:class:`~envtool.engines.base.Engine` subclass, or any callable returning an engine). The built-in
engines are listed below as ``module:attribute`` strings with their ``--help`` summaries, so that
listing them (``--help``, ``--engine`` choices) imports no engine module: the rattler engine pulls
in py-rattler and asyncio, which ``envtool --help`` must not pay for. An engine module is imported
when its engine is first asked for (:func:`get_engine`, :func:`engine_for`, :func:`engines`).

A third-party engine registers through the ``envtool.plugins`` entry-point group as
``engine.NAME = "module:Factory"``; it is taken by ``--engine NAME`` (it is never the default of a
spec's ``engine:`` kind, and never replaces a built-in name).
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

from envtool.core.errors import UsageError
from envtool.core.plugins import Registry, UnknownPlugin

if TYPE_CHECKING:  # the interface module imports the spec and plan models: not needed to list names
    from envtool.engines.base import Engine


def _check_factory(obj: object) -> None:
    """An engine entry must be callable (a class or a factory); what it returns is checked on use."""
    if not callable(obj):
        raise TypeError(f"an engine must be an Engine subclass or a callable returning one, not {obj!r}")


#: name → engine factory (``--engine`` choices, in ``--help`` order).
ENGINES: "Registry[Callable[[], Engine]]" = Registry("engine", check=_check_factory)
#: spec ``engine:`` value -> the engine used when ``--engine`` is not given.
_DEFAULTS: Dict[str, str] = {}
#: old ``--engine`` spellings still taken, with a warning: old name -> new name.
_DEPRECATED: Dict[str, str] = {}


def register(factory: "Callable[[], Engine] | str", name: str = "", summary: str = "", default_for: str = "") -> None:
    """Make an engine available to ``--engine`` and the planner.

    Args:
        factory: makes the engine (an :class:`Engine` subclass, or any callable returning one), or
            its ``module:attribute`` (imported on first use; then ``name`` and ``summary`` are needed).
        name: its ``--engine`` name (default: ``factory.name``).
        summary: one line for ``--help`` (default: ``factory.summary``).
        default_for: the spec ``engine:`` value (``venv``, ``conda``) this engine serves when no
            ``--engine`` is given, or ``""``.
    Raises:
        ValueError: the name is empty, malformed or already registered (a programming error).
    """
    name = name or str(getattr(factory, "name", ""))
    if not name:
        raise ValueError(f"engine {factory!r}: no name")
    ENGINES.register(name, factory, summary=summary or str(getattr(factory, "summary", "")))
    if default_for:
        _DEFAULTS[default_for] = name


def unregister(name: str) -> None:
    """Remove engine ``name`` (tests that register a toy engine remove it again); no error when absent."""
    ENGINES.unregister(name)
    for kind in [k for k, v in _DEFAULTS.items() if v == name]:
        del _DEFAULTS[kind]


def deprecate(old: str, new: str) -> None:
    """Keep ``--engine OLD`` working as ``NEW``, with a warning on stderr."""
    _DEPRECATED[old] = new


def names() -> Tuple[str, ...]:
    """Every registered engine name, in registration order (built-ins, then plug-ins); imports no engine."""
    return ENGINES.names()


def choices_help() -> str:
    """``NAME: summary; …`` for every registered engine, for ``--help`` (imports no engine)."""
    return "; ".join(f"{n}: {ENGINES.summary(n) or ENGINES.origin(n)}" for n in ENGINES.names())


def canonical(name: str, warn: Optional[Callable[[str], None]] = None) -> str:
    """``name`` with a deprecated spelling replaced by its new one (``warn`` is told, default stderr).

    Raises:
        UsageError: no engine of that name (the message lists every choice; exit 2).
    """
    if name in _DEPRECATED:
        new = _DEPRECATED[name]
        (warn or (lambda line: print(line, file=sys.stderr)))(
            f"warning: --engine {name} is deprecated; use --engine {new}")
        return new
    if name not in ENGINES:
        raise UsageError(f"--engine: unknown engine {name!r}; expected one of {', '.join(ENGINES.names())}")
    return name


def get_engine(name: str) -> "Engine":
    """The engine registered as ``name`` (a deprecated spelling warns and maps to its new name),
    its module imported on first use.

    Raises:
        UsageError: unknown engine name (exit 2).
        ImportError, TypeError: a plug-in engine that cannot be loaded or is not callable.
    """
    try:
        return ENGINES.get(canonical(name))()
    except UnknownPlugin as exc:  # unregistered between the two looks (a test's toy)
        raise UsageError(str(exc)) from None


def engine_for(spec_engine: str, override: Optional[str] = None) -> "Engine":
    """The engine that makes a spec with ``engine: SPEC_ENGINE``: ``override`` (``--engine``) when
    given, else the registered default for that kind (``venv`` → venv, ``conda`` → rattler).

    Raises:
        UsageError: unknown engine, or no engine serves ``spec_engine``.
    """
    if override:
        return get_engine(override)
    if spec_engine not in _DEFAULTS:
        raise UsageError(f"no engine makes specs with engine: {spec_engine} (registered: {', '.join(names())})")
    return get_engine(_DEFAULTS[spec_engine])


def engines() -> List["Engine"]:
    """One instance of every registered engine (registration order; imports every engine module)."""
    return [factory() for _, factory in ENGINES.items()]


def spec_engine_of_prefix(prefix: "object") -> str:
    """The spec ``engine:`` kind of the environment at ``prefix``: that of the first default engine
    whose :meth:`Engine.holds` says so (conda before venv), else ``venv``."""
    from pathlib import Path

    for kind, name in sorted(_DEFAULTS.items()):
        if get_engine(name).holds(Path(str(prefix))):
            return kind
    return "venv"


# The built-in engines, in ``--help`` order: named here, imported on first use.
register("envtool.engines.venv:VenvEngine", name="venv", summary="python -m venv and pip (default for venv specs)",
         default_for="venv")
register("envtool.engines.rattler:RattlerEngine", name="rattler",
         summary="embedded py-rattler (default for conda specs)", default_for="conda")
for _tool in ("conda", "mamba", "micromamba"):
    register(f"envtool.engines.external:{_tool.upper()}", name=_tool, summary=f"an external {_tool} executable on PATH")
deprecate("conda-external", "conda")
