"""One registry idiom for every plug-in point (core layer): :class:`Registry` ``[T]``.

Engines, schedulers, launchers, module writers, container runtimes, scan rules, doctor checks and
validation checks each keep one :class:`Registry`. An entry is a name bound to either the object
itself or a ``module:attribute`` string that is imported only when the entry is first asked for,
so listing names (``--help``, completions, a site file's check) imports no plug-in.

Third-party packages register through the ``envtool.plugins`` entry-point group (the
packaging specification's entry points,
https://packaging.python.org/en/latest/specifications/entry-points/): an entry point named
``KIND.NAME`` whose value is ``module:attribute`` adds ``NAME`` to the registry of ``KIND``
(``scheduler.flux = "envtool_flux:SCHEDULER"``). Its metadata is read once per process, when a
registry of that kind is first listed or asked; the module is imported only when the entry is
used. This is the shape of conda's plugin manager, which finds plug-ins through the
``conda`` entry-point group (``conda/conda@24.1.0:conda/plugins/manager.py``), without pluggy's
hook calls: a plug-in here is one object of the kind's typed interface.
"""
from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path
from typing import Callable, Dict, Generic, Iterator, List, Optional, Tuple, TypeVar, Union

from envtool.core.errors import UsageError

#: The entry-point group third-party plug-ins register in.
GROUP = "envtool.plugins"

T = TypeVar("T")

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_TARGET_RE = re.compile(r"[A-Za-z_][\w.]*(?::[A-Za-z_][\w.]*)?")
#: kind → its registry (one per kind; entry points are dealt out by kind).
_REGISTRIES: Dict[str, "Registry"] = {}
_ENTRY_POINTS: Optional[Dict[str, List[Tuple[str, str, str]]]] = None


class BrokenPlugin(UsageError):
    """A plug-in from another distribution (an ``envtool.plugins`` entry point) that cannot be
    imported or does not implement its kind's interface: exit 2, naming the distribution."""


class UnknownPlugin(UsageError, KeyError):
    """No plug-in of that name in a registry.

    A :class:`~envtool.core.errors.UsageError` (a name that escapes to the CLI is exit 2 with this
    message) and a ``KeyError`` (callers that look a name up may catch it as one).
    """

    def __str__(self) -> str:  # KeyError's str() would quote the message
        return str(self.args[0]) if self.args else ""


def _candidates() -> Optional[List[str]]:
    """The ``*.dist-info``/``*.egg-info`` folders on ``sys.path`` whose ``entry_points.txt`` names
    :data:`GROUP`, or None when a ``sys.path`` entry is not a folder (a zip: only
    :mod:`importlib.metadata` can look inside it).

    A pre-filter, not a parser: a distribution can declare an entry point of the group only in that
    file (the entry-points specification), so one without the group's name in it is skipped. This
    costs a few milliseconds where :func:`importlib.metadata.entry_points` (importing the module
    and reading every distribution's metadata) costs about 40 ms here, on every command that lists
    plug-in names.
    """
    found: List[str] = []
    needle = GROUP.encode()
    for entry in sys.path:
        path = entry or "."
        if not os.path.isdir(path):
            if os.path.exists(path):
                return None
            continue
        try:
            listing = list(os.scandir(path))
        except OSError:
            continue
        for item in listing:
            if item.name.endswith((".dist-info", ".egg-info")):
                try:
                    with open(os.path.join(item.path, "entry_points.txt"), "rb") as handle:
                        if needle in handle.read():
                            found.append(item.path)
                except OSError:
                    continue
    return found


def _entry_points() -> Dict[str, List[Tuple[str, str, str]]]:
    """kind → ``(name, target, distribution)`` of every ``envtool.plugins`` entry point, read once.

    The entry points are read by :mod:`importlib.metadata`, from the distributions that
    :func:`_candidates` leaves (all of them when it cannot pre-filter); a distribution found twice
    on ``sys.path`` counts once, the first (as :func:`importlib.metadata.entry_points` does).
    """
    global _ENTRY_POINTS
    if _ENTRY_POINTS is not None:
        return _ENTRY_POINTS
    candidates = _candidates()
    found: Dict[str, List[Tuple[str, str, str]]] = {}
    if candidates == []:
        _ENTRY_POINTS = found
        return found
    from importlib import metadata

    dists = (metadata.distributions() if candidates is None
             else (metadata.PathDistribution(Path(c)) for c in candidates))
    seen = set()
    for dist in dists:
        dist_name = (dist.metadata["Name"] or "") if dist.metadata else ""
        key = re.sub(r"[-_.]+", "-", dist_name).lower()
        if key in seen:
            continue
        seen.add(key)
        for ep in dist.entry_points:
            kind, dot, name = ep.name.partition(".")
            target = ep.value.replace(" ", "")
            if ep.group == GROUP and dot and _NAME_RE.fullmatch(name) and _TARGET_RE.fullmatch(target):
                found.setdefault(kind, []).append((name, target, dist_name))
    _ENTRY_POINTS = found
    return found


def _load(target: str) -> object:
    module, _, attr = target.partition(":")
    obj: object = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Name → plug-in of one kind (``engine``, ``scheduler`` …), in registration order.

    Args:
        kind: the plug-in kind, also the first part of its entry-point names.
        check: called with each object when it is first loaded; raises ``TypeError`` or
            ``ValueError`` when the object does not implement the kind's interface.
        entry_points: also take this kind's ``envtool.plugins`` entry points (default True).
    Raises:
        ValueError: a second registry of the same kind (a programming error).
    """

    def __init__(self, kind: str, check: Optional[Callable[[object], None]] = None,
                 entry_points: bool = True) -> None:
        if kind in _REGISTRIES:
            raise ValueError(f"a registry of kind {kind!r} exists already")
        self.kind = kind
        self._check = check
        self._targets: Dict[str, Union[str, T]] = {}
        self._summaries: Dict[str, str] = {}
        self._origins: Dict[str, str] = {}
        self._loaded: Dict[str, T] = {}
        self._entry_points = entry_points
        self._eps_taken = False
        _REGISTRIES[kind] = self

    def register(self, name: str, target: Union[str, T], summary: str = "", origin: str = "envtool") -> None:
        """Add ``name``: ``target`` is the plug-in object or its ``module:attribute`` (imported on first use).

        Raises:
            ValueError: a malformed name or target, or ``name`` already bound to another target.
        """
        if not _NAME_RE.fullmatch(name):
            raise ValueError(f"{self.kind} name {name!r}: expected letters, digits, '.', '_', '+' or '-' "
                             f"(at most 64, starting with a letter or digit)")
        if isinstance(target, str) and not _TARGET_RE.fullmatch(target):
            raise ValueError(f"{self.kind} {name}: {target!r} is not 'module' or 'module:attribute'")
        taken = name in self._targets and self._targets[name] is not target and self._targets[name] != target
        if taken and not (origin == "envtool" and self._origins[name] != "envtool"):
            raise ValueError(f"{self.kind} {name} is already registered (by {self._origins[name]})")
        self._loaded.pop(name, None)  # a built-in registered after the entry points were read wins
        self._targets[name] = target
        self._summaries[name] = summary
        self._origins[name] = origin

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests that add a toy plug-in take it away again); no error when absent."""
        for table in (self._targets, self._summaries, self._origins, self._loaded):
            table.pop(name, None)

    def _take_entry_points(self) -> None:
        if self._entry_points and not self._eps_taken:
            self._eps_taken = True
            for name, target, dist in _entry_points().get(self.kind, ()):
                if name not in self._targets:  # a built-in name is never replaced by a plug-in
                    self._targets[name] = target
                    self._summaries[name] = ""
                    self._origins[name] = f"entry point of {dist or 'an installed distribution'}"

    def names(self) -> Tuple[str, ...]:
        """Every registered name, built-ins first, then entry points (no plug-in is imported)."""
        self._take_entry_points()
        builtin = [n for n in self._targets if self._origins[n] == "envtool"]
        return tuple(builtin + [n for n in self._targets if self._origins[n] != "envtool"])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def __iter__(self) -> Iterator[str]:
        """The names, as :meth:`names` gives them (so ``choices=registry`` and ``list(registry)`` work)."""
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def is_builtin(self, name: str) -> bool:
        """Whether ``name`` was registered by envtool itself (not by an entry point)."""
        return self.origin(name) == "envtool"

    def loaded(self) -> Dict[str, T]:
        """The entries imported so far, by name (a copy; imports nothing)."""
        return dict(self._loaded)

    def summary(self, name: str) -> str:
        """The one-line summary given at registration ("" when none)."""
        self._take_entry_points()
        return self._summaries.get(name, "")

    def origin(self, name: str) -> str:
        """Who registered ``name``: ``envtool`` or ``entry point of DIST``."""
        self._take_entry_points()
        return self._origins.get(name, "")

    def get(self, name: str) -> T:
        """The plug-in registered as ``name``, imported on first use.

        Raises:
            UnknownPlugin: no such name (the message lists the registered ones).
            BrokenPlugin: a plug-in from an entry point cannot be loaded or its registry's check
                refuses it (exit 2, naming the distribution to fix or uninstall).
            ImportError, AttributeError, TypeError, ValueError: the same for a built-in (a bug).
        """
        if name in self._loaded:
            return self._loaded[name]
        self._take_entry_points()
        if name not in self._targets:
            raise UnknownPlugin(f"unknown {self.kind} {name!r}; expected one of {', '.join(self._targets)}")
        target = self._targets[name]
        try:
            obj = _load(target) if isinstance(target, str) else target
            if self._check is not None:
                self._check(obj)
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            if self.is_builtin(name):
                raise
            raise BrokenPlugin(f"{self.kind} {name!r} ({self.origin(name)}, {target}) cannot be used: "
                               f"{type(exc).__name__}: {exc}; fix or uninstall that distribution") from exc
        self._loaded[name] = obj  # type: ignore[assignment]
        return obj  # type: ignore[return-value]

    def items(self) -> List[Tuple[str, T]]:
        """``(name, plug-in)`` for every entry, in order (imports every one)."""
        return [(n, self.get(n)) for n in self.names()]


def registry(kind: str) -> Registry:
    """The registry of ``kind``.

    Raises:
        UnknownPlugin: no registry of that kind has been made (its module is not imported yet).
    """
    try:
        return _REGISTRIES[kind]
    except KeyError:
        raise UnknownPlugin(f"no plug-in registry of kind {kind!r}") from None
