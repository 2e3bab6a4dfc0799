"""Schedulers and launchers: job scripts for Slurm, LSF, PBS Pro, Cobalt/ALPS and plain local runs.

One small module per scheduler (:mod:`.slurm`, :mod:`.lsf`, :mod:`.pbs`, :mod:`.cobalt`,
:mod:`.local`), each giving its directives, its launcher line for a :class:`~.model.Layout`, and
how to submit, watch and cancel a job. :mod:`.launcher` is the one place that knows how a site
launches ranks (``doctor``'s launcher check, ``create``'s validation and job scripts use it);
:mod:`.script` fills the job-script template (``templates/jobscript.sh``); :mod:`.jobs` submits
and watches. This package imports only the core (:mod:`envtool.spec`, :mod:`envtool.core.errors`).

The registry maps a site file's ``scheduler`` (None for ``none``) to its module.
"""
from __future__ import annotations

import importlib
from typing import Optional

#: scheduler name (site file ``scheduler``; ``local`` for none) → module under envtool.scheduler.
REGISTRY = {"slurm": "slurm", "lsf": "lsf", "pbs": "pbs", "cobalt": "cobalt", "local": "local"}


def get(name: Optional[str]):
    """The module of scheduler ``name`` (``slurm``, ``lsf``, ``pbs``, ``cobalt``; None or ``none``
    gives ``local``).

    Returns:
        a module with ``NAME``, ``DIRECTIVE``, ``LAUNCHER``, ``directives(req)``,
        ``launch_argv(req, layout, whole_job)``, ``submit_argv(script)``, ``parse_job_id(text)``,
        ``state(job_id)`` and ``cancel_argv(job_id)``.
    Raises:
        KeyError: an unknown name (site files are checked on load, so only a bug gets here).
    """
    key = "local" if name in (None, "none") else name
    return importlib.import_module(f"envtool.scheduler.{REGISTRY[key]}")
