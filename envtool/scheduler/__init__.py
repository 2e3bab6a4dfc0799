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
reader checks names against the same tables); another distribution adds a scheduler or a
launcher through the ``envtool.plugins`` entry-point group (``scheduler.NAME = "module"``).
"""
from __future__ import annotations

from typing import Optional, cast

from envtool.core.errors import UsageError
from envtool.scheduler.model import LaunchProgram, Scheduler
from envtool.spec import registry

#: What every scheduler module defines (:class:`~envtool.scheduler.model.Scheduler`).
_SCHEDULER_NAMES = ("NAME", "DIRECTIVE", "DEFAULT_LAUNCHER", "SUBMIT_STDIN", "directives", "submit_argv",
                    "parse_submit", "status_argv", "parse_status", "state", "cancel_argv")


def get(name: Optional[str]) -> Scheduler:
    """The module of scheduler ``name`` (a registered name; None or ``none`` gives ``local``), imported
    on first use.

    Returns:
        the module, which implements :class:`~envtool.scheduler.model.Scheduler`.
    Raises:
        envtool.core.plugins.UnknownPlugin: an unregistered name (a ``UsageError`` and a ``KeyError``;
            site files are checked on load, so only a caller's mistake gets here).
        UsageError: a plug-in scheduler that lacks part of the interface (exit 2, naming what).
        ImportError: its module cannot be imported.
    """
    key = registry.NO_SCHEDULER if name in (None, registry.NONE) else str(name)
    sched = registry.SCHEDULERS.get(key)
    missing = [n for n in _SCHEDULER_NAMES if not hasattr(sched, n)]
    if missing:
        raise UsageError(f"scheduler {key} ({registry.SCHEDULERS.origin(key)}): "
                         f"{getattr(sched, '__name__', sched)!r} lacks {', '.join(missing)} "
                         f"(see envtool.scheduler.model.Scheduler)")
    return cast(Scheduler, sched)


def get_launcher(name: str) -> LaunchProgram:
    """The registered launcher ``name`` (``srun``, ``jsrun``, ``mpiexec``, ``aprun``, ``mpirun`` …),
    imported on first use.

    Raises:
        envtool.core.plugins.UnknownPlugin: an unregistered name (a ``UsageError`` and a ``KeyError``).
        UsageError: a plug-in launcher without ``launch_argv``.
    """
    launcher = registry.LAUNCHERS.get(name)
    if not callable(getattr(launcher, "launch_argv", None)):
        raise UsageError(f"launcher {name} ({registry.LAUNCHERS.origin(name)}): {launcher!r} has no launch_argv "
                         f"(see envtool.scheduler.model.LaunchProgram)")
    return cast(LaunchProgram, launcher)
