"""Schedulers and launchers: job scripts for Slurm, LSF, PBS Pro, Cobalt/ALPS and plain local runs.

One small module per scheduler (:mod:`.slurm`, :mod:`.lsf`, :mod:`.pbs`, :mod:`.cobalt`,
:mod:`.local`), each implementing :class:`~.model.Scheduler` (directives, submit and status
commands, pure parsers of their outputs). :mod:`.launchers` holds the registered launchers
(:class:`~.model.LaunchProgram`: srun, jsrun, mpiexec, aprun, mpirun), chosen apart from the
scheduler; :mod:`.launcher` is the one place that knows how a site launches ranks (``doctor``'s
launcher check, ``create``'s validation and job scripts use it); :mod:`.script` fills the
job-script template (``templates/jobscript.sh``). This package imports only the layers below
(:mod:`envtool.spec`, :mod:`envtool.core`).

The names and modules are registered once, in :mod:`envtool.spec.registry` (the site-file
reader checks names against the same table).
"""
from __future__ import annotations

import importlib
from typing import Optional, cast

from envtool.scheduler.model import LaunchProgram, Scheduler
from envtool.spec import registry


def get(name: Optional[str]) -> Scheduler:
    """The module of scheduler ``name`` (a registered name; None or ``none`` gives ``local``).

    Returns:
        the module, which implements :class:`~envtool.scheduler.model.Scheduler`.
    Raises:
        KeyError: an unregistered name (site files are checked on load, so only a bug gets here).
    """
    key = registry.NO_SCHEDULER if name in (None, registry.NONE) else str(name)
    return cast(Scheduler, importlib.import_module(registry.SCHEDULERS[key]))


def get_launcher(name: str) -> LaunchProgram:
    """The registered launcher ``name`` (``srun``, ``jsrun``, ``mpiexec``, ``aprun``, ``mpirun`` …).

    Raises:
        KeyError: an unregistered name.
    """
    module, _, attr = registry.LAUNCHERS[name].partition(":")
    return cast(LaunchProgram, getattr(importlib.import_module(module), attr))
