"""The launcher model: how a site starts the ranks of a job. One place, used by ``doctor``'s
launcher check, ``create``'s validation (``horovodrun`` on this machine) and job scripts.

A site file gives a ``launcher`` template (``srun -n {ranks}``; a stack entry may replace it, as
Bede's ``bede-ddlrun`` for WML-CE, ``N8-CIR-Bede/documentation@338157492d38:software/applications/wmlce.rst#L94-L95``) and a ``scheduler``. When the template's program is
the scheduler's own launcher (``srun`` for Slurm, ``jsrun`` for LSF on Summit, ``mpiexec`` for PBS
on Polaris, ``aprun`` for Cobalt), a job script's launcher line is built from the job's layout by
the scheduler module; any other program (``bede-ddlrun``, ``horovodrun``, ``mpirun``) is used as
its template says, with ``{ranks}`` filled in.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from envtool.core.errors import UsageError

#: Scheduler → the launcher it brings (sources: the KISTI Perlmutter tutorial's srun,
#: ``hwang2006/distributed-training-with-horovod-on-perlmutter@db9db9a20292:README.md#L302-L313``;
#: OLCF's jsrun, ``olcf/olcf-user-docs@6c07271c3d12:software/analytics/distributed-dl-env.rst#L120-L130``;
#: the ALCF Polaris guide's mpiexec; ALCF's aprun,
#: ``argonne-lcf/ALCF_Hands_on_HPC_Workshop@5b4beb1902b8:learningFrameworks/distributedDeepLearning/README.md#L199-L202``).
NATIVE = {"slurm": "srun", "lsf": "jsrun", "pbs": "mpiexec", "cobalt": "aprun"}
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
        native: the program is the scheduler's own launcher, so job scripts build its flags
            from the layout.
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
        """
        if self.native:
            from envtool import scheduler

            sched = scheduler.get(self.scheduler)
            if mpi is not None:
                if self.scheduler != "slurm":
                    raise UsageError(f"a step with its own PMI plugin (--mpi={mpi}) is written for Slurm only, "
                                     f"not {self.scheduler}")
                return sched.launch_argv(req, layout, whole_job, mpi=mpi)
            return sched.launch_argv(req, layout, whole_job)
        if mpi is not None:
            raise UsageError(f"a step with its own PMI plugin (--mpi={mpi}) needs the scheduler's own launcher "
                             f"(srun), not {self.program}")
        return self.argv(layout.ranks)


def for_site(site, mapping=None) -> Launcher:
    """The :class:`Launcher` of a site.

    Args:
        site: a :class:`envtool.spec.sites.SiteFile` or a resolved spec's
            :class:`envtool.spec.model.Site` (both have ``launcher`` and ``scheduler``), or None
            (this machine: ``horovodrun`` on localhost).
        mapping: the stack entry (:class:`envtool.spec.sites.StackMapping`) whose ``launcher``
            replaces the site's, or None.
    Returns:
        the :class:`Launcher`.
    """
    template = (getattr(mapping, "launcher", None) or getattr(site, "launcher", None) or DEFAULT_TEMPLATE).strip()
    scheduler = getattr(site, "scheduler", None)
    scheduler = None if scheduler in (None, "none") else scheduler
    words = shlex.split(template) or ["horovodrun"]
    program = os.path.basename(words[0])
    return Launcher(program=program, template=template, scheduler=scheduler,
                    native=scheduler is not None and NATIVE.get(scheduler) == program)


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
