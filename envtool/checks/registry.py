"""The doctor check registry: :data:`CHECKS`, a :class:`envtool.core.plugins.Registry` of
:class:`~envtool.checks.model.Check` objects keyed by check id.

envtool's checks register themselves with :func:`check` when their module loads; :func:`all_checks`
imports the check modules listed in :data:`MODULES` (a check module that fails to import is a bug
and raises). Another distribution adds a check through the ``envtool.plugins`` entry-point group:
``doctor.ID = "module:CHECK"`` naming a :class:`~envtool.checks.model.Check` whose ``id`` is ``ID``
(not made with :func:`check`, which registers under envtool's name). A plug-in check that cannot
be loaded is reported as a failed finding of its own, so one broken plug-in neither hides the
other findings nor stops ``doctor``.
"""
from __future__ import annotations

import importlib
from typing import Callable, List, Tuple

from envtool.checks.model import Check, Finding
from envtool.core.plugins import BrokenPlugin, Registry

#: Modules under ``envtool.checks`` that define checks, in the issue's order.
MODULES = ("versions", "horovod_build", "start_method", "script", "launchers", "gpu", "hygiene", "runtime",
           "site_notes", "container")


def _check_check(obj: object) -> None:
    if not isinstance(obj, Check):
        raise TypeError(f"a doctor check must be an envtool.checks.model.Check, not {obj!r}")


#: check id → check (envtool's in module order, then plug-ins').
CHECKS: Registry[Check] = Registry("doctor", check=_check_check)


def check(id: str, title: str, fix: str = "", needs: Tuple[str, ...] = (), order: int = 0):
    """Decorator: register ``fn(ctx) -> Finding`` as check ``id``.

    Raises:
        ValueError: two checks with the same id.
    """
    def wrap(fn: Callable) -> Callable:
        try:
            CHECKS.register(id, Check(id=id, title=title, run=fn, fix=fix, needs=tuple(needs), order=order))
        except ValueError:
            raise ValueError(f"duplicate doctor check id {id!r}") from None
        return fn
    return wrap


def _broken(name: str, exc: Exception) -> Check:
    """A stand-in for plug-in check ``name`` that could not be loaded: it fails, saying why."""
    origin = CHECKS.origin(name)

    def run(ctx) -> Finding:
        return finding(name, "fail", f"the plug-in check could not be loaded ({origin}): "
                                     f"{type(exc).__name__}: {exc}",
                       fix=f"fix or uninstall the distribution that registers doctor.{name}")
    return Check(id=name, title=f"plug-in check {name}", run=run, order=1000)


def _load(name: str) -> Check:
    try:
        chk = CHECKS.get(name)
    except (BrokenPlugin, ImportError, AttributeError, TypeError, ValueError) as exc:
        if CHECKS.is_builtin(name):
            raise
        return _broken(name, exc)
    if chk.id != name:
        return _broken(name, ValueError(f"its Check's id is {chk.id!r}, not {name!r}"))
    return chk


def all_checks() -> List[Check]:
    """Every registered check, in display order (``order``, then id)."""
    for name in MODULES:
        importlib.import_module(f"envtool.checks.{name}")
    return sorted((_load(n) for n in CHECKS.names()), key=lambda c: (c.order, c.id))


def select(only: Tuple[str, ...] = ()) -> List[Check]:
    """The checks named in ``only`` (all when empty), in display order.

    Raises:
        UsageError: an unknown id (the message lists the known ones).
    """
    from envtool.core.errors import UsageError

    checks = all_checks()
    if not only:
        return checks
    known = {c.id for c in checks}
    unknown = [i for i in only if i not in known]
    if unknown:
        raise UsageError(f"--only: unknown check id(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [c for c in checks if c.id in only]


def finding(chk_id: str, status: str, summary: str, fix: str = "", **details) -> Finding:
    """Shorthand used by check modules: a :class:`Finding` with ``details`` from keywords."""
    return Finding(id=chk_id, status=status, summary=summary, fix=fix, details=details)
