"""The check registry: checks register themselves with :func:`check` when their module loads.

:func:`all_checks` imports the check modules listed in :data:`MODULES` (a check module that
fails to import is a bug and raises).
"""
from __future__ import annotations

import importlib
from typing import Callable, Dict, List, Tuple

from envtool.checks.model import Check, Finding

#: Modules under ``envtool.checks`` that define checks, in the issue's order.
MODULES = ("versions", "horovod_build", "start_method", "script", "launchers", "gpu", "hygiene", "runtime",
           "site_notes", "container")

_CHECKS: Dict[str, Check] = {}


def check(id: str, title: str, fix: str = "", needs: Tuple[str, ...] = (), order: int = 0):
    """Decorator: register ``fn(ctx) -> Finding`` as check ``id``.

    Raises:
        ValueError: two checks with the same id.
    """
    def wrap(fn: Callable) -> Callable:
        if id in _CHECKS and _CHECKS[id].run is not fn:
            raise ValueError(f"duplicate doctor check id {id!r}")
        _CHECKS[id] = Check(id=id, title=title, run=fn, fix=fix, needs=tuple(needs), order=order)
        return fn
    return wrap


def all_checks() -> List[Check]:
    """Every registered check, in display order."""
    for name in MODULES:
        importlib.import_module(f"envtool.checks.{name}")
    return sorted(_CHECKS.values(), key=lambda c: (c.order, c.id))


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
