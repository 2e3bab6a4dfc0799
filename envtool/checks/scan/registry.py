"""The scan's rule registry, kept as the doctor check registry is (:mod:`envtool.checks.registry`):
a rule registers itself with the :func:`rule` class decorator when its module loads, and
:func:`all_rules` imports the modules listed in :data:`MODULES` (a rule module that fails to
import is a bug and raises)."""
from __future__ import annotations

import importlib
from typing import Dict, List, Type, TypeVar

from envtool.checks.scan.rule import LEVELS, Rule

#: Modules under ``envtool.checks.scan.rules`` that define rules.
MODULES = ("syntax", "fork_start_method", "no_main_guard", "dataloader_workers", "dead_supports_context",
           "hvd_init_missing", "hvd_init_late", "lr_not_scaled", "no_broadcast", "checkpoint_all_ranks",
           "checkpoint_local_rank", "no_gpu_pinning", "optimizer_not_wrapped", "data_not_sharded")

_RULES: Dict[str, Rule] = {}

R = TypeVar("R", bound=Type[Rule])


def rule(cls: R) -> R:
    """Class decorator: register one instance of the :class:`~envtool.checks.scan.rule.Rule` subclass ``cls``.

    Raises:
        ValueError: another class already registered the same id, or ``cls.severity`` is not one of
            :data:`~envtool.checks.scan.rule.LEVELS`.
    """
    old = _RULES.get(cls.id)
    if old is not None and type(old).__qualname__ != cls.__qualname__:
        raise ValueError(f"duplicate scan rule id {cls.id!r} ({type(old).__qualname__} and {cls.__qualname__})")
    if cls.severity not in LEVELS:
        raise ValueError(f"scan rule {cls.id!r}: severity {cls.severity!r} is not one of {', '.join(LEVELS)}")
    _RULES[cls.id] = cls()
    return cls


def unregister(rule_id: str) -> None:
    """Remove a registered rule (a test's toy rule); no error when it is not registered."""
    _RULES.pop(rule_id, None)


def all_rules() -> List[Rule]:
    """Every registered rule, in the order they run (``order``, then id)."""
    for name in MODULES:
        importlib.import_module(f"envtool.checks.scan.rules.{name}")
    return sorted(_RULES.values(), key=lambda r: (r.order, r.id))
