"""The scan's rule registry: :data:`RULES`, a :class:`envtool.core.plugins.Registry` of
:class:`~envtool.checks.scan.rule.Rule` instances keyed by rule id, kept as the doctor check
registry is (:mod:`envtool.checks.registry`).

envtool's rules register themselves with the :func:`rule` class decorator when their module loads,
and :func:`all_rules` imports the modules listed in :data:`MODULES` (a rule module that fails to
import is a bug and raises). Another distribution adds a rule through the ``envtool.plugins``
entry-point group: ``scan.ID = "module:RuleClass"`` naming a :class:`Rule` subclass (or instance)
whose ``id`` is ``ID``, not decorated with :func:`rule`. A plug-in rule that cannot be loaded is
left out with a warning on stderr (the scan's findings must not depend on it silently).
"""
from __future__ import annotations

import importlib
import sys
from typing import List, Type, TypeVar

from envtool.checks.scan.rule import LEVELS, Rule
from envtool.core.plugins import BrokenPlugin, Registry

#: Modules under ``envtool.checks.scan.rules`` that define rules.
MODULES = ("syntax", "fork_start_method", "no_main_guard", "dataloader_workers", "dead_supports_context",
           "hvd_init_missing", "hvd_init_late", "lr_not_scaled", "no_broadcast", "checkpoint_all_ranks",
           "checkpoint_local_rank", "no_gpu_pinning", "optimizer_not_wrapped", "data_not_sharded",
           "sampler_no_set_epoch", "split_every_rank", "log_all_ranks", "download_all_ranks")


def _check_rule(obj: object) -> None:
    """A rule is a :class:`Rule` subclass or instance whose severity is one of :data:`LEVELS`."""
    cls = obj if isinstance(obj, type) else type(obj)
    if not issubclass(cls, Rule):
        raise TypeError(f"a scan rule must be an envtool.checks.scan.rule.Rule subclass, not {obj!r}")
    if cls.severity not in LEVELS:
        raise ValueError(f"scan rule {cls.id!r}: severity {cls.severity!r} is not one of {', '.join(LEVELS)}")


#: rule id → rule (envtool's, then plug-ins').
RULES: Registry[Rule] = Registry("scan", check=_check_rule)

R = TypeVar("R", bound=Type[Rule])


def rule(cls: R) -> R:
    """Class decorator: register one instance of the :class:`~envtool.checks.scan.rule.Rule` subclass ``cls``.

    Raises:
        ValueError: another class already registered the same id, or ``cls.severity`` is not one of
            :data:`~envtool.checks.scan.rule.LEVELS`.
    """
    _check_rule(cls)
    old = RULES.loaded().get(cls.id)
    if old is not None and type(old).__qualname__ == cls.__qualname__:
        RULES.unregister(cls.id)  # the same rule's module imported again
    try:
        RULES.register(cls.id, cls())
    except ValueError:
        raise ValueError(f"duplicate scan rule id {cls.id!r} ({type(old).__qualname__ if old else RULES.origin(cls.id)} "
                         f"and {cls.__qualname__})") from None
    RULES.get(cls.id)
    return cls


def unregister(rule_id: str) -> None:
    """Remove a registered rule (a test's toy rule); no error when it is not registered."""
    RULES.unregister(rule_id)


def _load(rule_id: str):
    try:
        obj = RULES.get(rule_id)
    except (BrokenPlugin, ImportError, AttributeError, TypeError, ValueError) as exc:
        if RULES.is_builtin(rule_id):
            raise
        print(f"envtool: warning: scan rule {rule_id} ({RULES.origin(rule_id)}) left out: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    instance = obj() if isinstance(obj, type) else obj
    if instance.id != rule_id:
        print(f"envtool: warning: scan rule {rule_id} ({RULES.origin(rule_id)}) left out: its id is "
              f"{instance.id!r}", file=sys.stderr)
        return None
    return instance


def all_rules() -> List[Rule]:
    """Every registered rule, in the order they run (``order``, then id)."""
    for name in MODULES:
        importlib.import_module(f"envtool.checks.scan.rules.{name}")
    rules = [r for r in (_load(n) for n in RULES.names()) if r is not None]
    return sorted(rules, key=lambda r: (r.order, r.id))
