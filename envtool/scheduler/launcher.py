"""The launcher model: how a site starts the ranks of a job. One place, used by ``doctor``'s
launcher check, ``create``'s validation (``horovodrun`` on this machine) and job scripts.

A site file gives a ``launcher`` template (``srun -n {ranks}``; a stack entry may replace it, as
Bede's ``bede-ddlrun`` for WML-CE, ``N8-CIR-Bede/documentation@338157492d38:software/applications/wmlce.rst#L94-L95``),
a ``scheduler``, and optionally ``batch.launcher``, a registered launcher
(:data:`envtool.spec.registry.LAUNCHERS`) chosen apart from the scheduler. Job-script launcher
lines are built from the job's layout by a registered launcher (:mod:`envtool.scheduler.launchers`):

- ``batch.launcher`` when the site file names one (and no stack entry gives its own template);
- else the scheduler's ``DEFAULT_LAUNCHER`` (``srun`` for Slurm, ``jsrun`` for LSF on Summit,
  ``mpiexec`` for PBS on Polaris, ``aprun`` for Cobalt) when the template's program is that one;
- any other program (``bede-ddlrun``, ``horovodrun``) is used as its template says, with
  ``{ranks}`` filled in.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from envtool.core.errors import UsageError
from envtool.scheduler import get as get_scheduler
from envtool.scheduler import get_launcher

#: Launchers that start ranks through an MPI runtime found on PATH (``horovodrun --mpi`` calls mpirun).
MPI_RUNTIME_LAUNCHERS = ("mpirun", "mpiexec", "horovodrun")
#: What a site without a launcher uses.
DEFAULT_TEMPLATE = "horovodrun -np {ranks} -H localhost:{ranks}"


@dataclass(frozen=True)
class Launcher:
    """How one site launches ranks.

    Attributes:
        program: the executable (first word of the template: ``srun``, ``jsrun``, ``bede-ddlrun``).
        template: the site's template (``{ranks}`` is replaced).
        scheduler: the site's scheduler (``slurm``, ``lsf``, ``pbs``, ``cobalt``) or None.
        native: ``program`` is a registered launcher (:func:`envtool.scheduler.get_launcher`)
            that job scripts build from the layout (the site's ``batch.launcher``, or the
            scheduler's default launcher named by the template).
    """

    program: str
    template: str
    scheduler: Optional[str] = None
    native: bool = False

    @property
    def needs_mpi_runtime(self) -> bool:
        """True when the launcher starts ranks through an ``mpirun``/``mpiexec`` on PATH."""
        return self.program in MPI_RUNTIME_LAUNCHERS

    def argv(self, ranks: int) -> List[str]:
        """The template with ``{ranks}`` filled in, as words (for an interactive run)."""
        return shlex.split(self.template.replace("{ranks}", str(int(ranks))))

    def batch_argv(self, req, layout, whole_job: bool = True, mpi: Optional[str] = None) -> List[str]:
        """The launcher words of one job-script line.

        Args:
            req: the :class:`~envtool.scheduler.model.JobRequest`.
            layout: the step's :class:`~envtool.scheduler.model.Layout`.
            whole_job: the step uses the job's whole layout (the scheduler's launcher then
                inherits it from the directives where it can).
            mpi: the step's own PMI plugin (Slurm's ``--mpi=``), or None for the site's.
        Returns:
            words, without the command.
        Raises:
            SpecError: the site file lacks a value a flag needs (names the field).
            UsageError: ``mpi`` given for a launcher other than Slurm's srun.
            KeyError: ``native`` set for an unregistered program (a bug: :func:`for_site` sets it).
        """
        if self.native:
            return get_launcher(self.program).launch_argv(req, layout, whole_job, mpi=mpi)
        if mpi is not None:
            raise UsageError(f"a step with its own PMI plugin (--mpi={mpi}) needs the scheduler's own launcher "
                             f"(srun), not {self.program}")
        return self.argv(layout.ranks)


def for_site(site, mapping=None) -> Launcher:
    """The :class:`Launcher` of a site.

    Args:
        site: a :class:`envtool.spec.sites.SiteFile` or a resolved spec's
            :class:`envtool.spec.model.Site` (both have ``launcher`` and ``scheduler``; a site
            file's ``batch.launcher`` is read when there is one), or None (this machine:
            ``horovodrun`` on localhost).
        mapping: the stack entry (:class:`envtool.spec.sites.StackMapping`) whose ``launcher``
            replaces the site's, or None.
    Returns:
        the :class:`Launcher`.
    """
    own = getattr(mapping, "launcher", None)
    template = (own or getattr(site, "launcher", None) or DEFAULT_TEMPLATE).strip()
    scheduler = getattr(site, "scheduler", None)
    scheduler = None if scheduler in (None, "none") else scheduler
    words = shlex.split(template) or ["horovodrun"]
    program = os.path.basename(words[0])
    chosen = getattr(getattr(site, "batch", None), "launcher", None)
    if chosen and not own:
        # the site names its launcher apart from the scheduler (batch.launcher)
        return Launcher(program=chosen, template=template, scheduler=scheduler, native=True)
    default = get_scheduler(scheduler).DEFAULT_LAUNCHER if scheduler is not None else None
    return Launcher(program=program, template=template, scheduler=scheduler,
                    native=default is not None and default == program)


def horovodrun_argv(prefix: Path, ranks: int, controller: Optional[str] = "gloo",
                    as_root: Optional[bool] = None) -> List[str]:
    """``P/bin/python P/bin/horovodrun -np N -H localhost:N [--gloo|--mpi]``: ranks on this machine.

    Args:
        prefix: the environment.
        ranks: processes to start.
        controller: ``gloo``, ``mpi``, or None (Horovod's own choice).
        as_root: add Open MPI's ``--allow-run-as-root --oversubscribe`` (default: when uid 0);
            Open MPI's mpirun refuses root otherwise.
    Returns:
        argv words, without the command.
    """
    bin_dir = Path(prefix) / "bin"
    argv = [str(bin_dir / "python"), str(bin_dir / "horovodrun"), "-np", str(ranks), "-H", f"localhost:{ranks}"]
    if controller == "gloo":
        argv.append("--gloo")
    elif controller == "mpi":
        argv.append("--mpi")
        if as_root is None:
            as_root = hasattr(os, "geteuid") and os.geteuid() == 0
        if as_root:
            argv.append("--mpi-args=--allow-run-as-root --oversubscribe")
    return argv
