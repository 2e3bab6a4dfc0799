"""The one registry of engines: ``--engine NAME`` and a spec's ``engine:`` are looked up here.

An engine module registers itself at its end (``register(MyEngine)``); :mod:`envtool.engines`
imports the built-in engine modules once, so importing anything under ``envtool.engines`` fills
the registry. This module imports no engine module (no import circle).
"""
from __future__ import annotations

import sys
from typing import Callable, Dict, List, Optional, Tuple

from envtool.core.errors import UsageError
from envtool.engines.base import Engine

_ENGINES: Dict[str, Callable[[], Engine]] = {}
_SUMMARIES: Dict[str, str] = {}
#: spec ``engine:`` value -> the engine used when ``--engine`` is not given.
_DEFAULTS: Dict[str, str] = {}
#: old ``--engine`` spellings still taken, with a warning: old name -> new name.
_DEPRECATED: Dict[str, str] = {}


def register(factory: Callable[[], Engine], name: str = "", summary: str = "", default_for: str = "") -> None:
    """Make an engine available to ``--engine`` and the planner.

    Args:
        factory: makes the engine (an :class:`Engine` subclass, or any callable returning one).
        name: its ``--engine`` name (default: ``factory.name``).
        summary: one line for ``--help`` (default: ``factory.summary``).
        default_for: the spec ``engine:`` value (``venv``, ``conda``) this engine serves when no
            ``--engine`` is given, or ``""``.
    Raises:
        ValueError: the name is empty or already registered (a programming error).
    """
    name = name or str(getattr(factory, "name", ""))
    if not name or name in _ENGINES:
        raise ValueError(f"engine name {name!r} is empty or already registered")
    _ENGINES[name] = factory
    _SUMMARIES[name] = summary or str(getattr(factory, "summary", ""))
    if default_for:
        _DEFAULTS[default_for] = name


def unregister(name: str) -> None:
    """Remove engine ``name`` (tests that register a toy engine remove it again); no error when absent."""
    _ENGINES.pop(name, None)
    _SUMMARIES.pop(name, None)
    for kind in [k for k, v in _DEFAULTS.items() if v == name]:
        del _DEFAULTS[kind]


def deprecate(old: str, new: str) -> None:
    """Keep ``--engine OLD`` working as ``NEW``, with a warning on stderr."""
    _DEPRECATED[old] = new


def names() -> Tuple[str, ...]:
    """Every registered engine name, in registration order."""
    return tuple(_ENGINES)


def choices_help() -> str:
    """``NAME (summary); …`` for every registered engine, for ``--help``."""
    return "; ".join(f"{n}: {_SUMMARIES[n]}" for n in _ENGINES)


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
    if name not in _ENGINES:
        raise UsageError(f"--engine {name!r}: unknown engine; expected one of {', '.join(_ENGINES)}")
    return name


def get_engine(name: str) -> Engine:
    """The engine registered as ``name`` (a deprecated spelling warns and maps to its new name).

    Raises:
        UsageError: unknown engine name (exit 2).
    """
    return _ENGINES[canonical(name)]()


def engine_for(spec_engine: str, override: Optional[str] = None) -> Engine:
    """The engine that makes a spec with ``engine: SPEC_ENGINE``: ``override`` (``--engine``) when
    given, else the registered default for that kind (``venv`` → venv, ``conda`` → rattler).

    Raises:
        UsageError: unknown engine, or no engine serves ``spec_engine``.
    """
    if override:
        return get_engine(override)
    if spec_engine not in _DEFAULTS:
        raise UsageError(f"no engine makes specs with engine: {spec_engine} (registered: {', '.join(_ENGINES)})")
    return get_engine(_DEFAULTS[spec_engine])


def engines() -> List[Engine]:
    """One instance of every registered engine (registration order)."""
    return [f() for f in _ENGINES.values()]


def spec_engine_of_prefix(prefix: "object") -> str:
    """The spec ``engine:`` kind of the environment at ``prefix``: that of the first default engine
    whose :meth:`Engine.holds` says so (conda before venv), else ``venv``."""
    from pathlib import Path

    for kind, name in sorted(_DEFAULTS.items()):
        if _ENGINES[name]().holds(Path(str(prefix))):
            return kind
    return "venv"
