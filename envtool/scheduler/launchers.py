"""The registered launchers (:data:`envtool.spec.registry.LAUNCHERS`): each builds the words that
start a job step's ranks from the step's :class:`~envtool.scheduler.model.Layout`, whatever the
site's scheduler. A site file picks one with ``batch.launcher``; otherwise its scheduler's
``DEFAULT_LAUNCHER`` is used when the site's ``launcher`` template names that program
(:func:`envtool.scheduler.launcher.for_site`).

Layout facts, each with its source:

- ``srun`` (Slurm): inside an allocation srun inherits the job's layout; a smaller step gives
  ``-N``/``-n`` (and ``-c``); ``--mpi=`` picks the PMI plugin (srun(1),
  https://slurm.schedmd.com/srun.html; the KISTI Perlmutter tutorial,
  ``hwang2006/distributed-training-with-horovod-on-perlmutter@db9db9a20292:README.md#L302-L313``).
- ``jsrun`` (IBM JSM on Summit): ``jsrun -r1 -g6 -a6 -c42 -bpacked:7``: one resource set per
  node holding its GPUs, ranks and cores, each rank bound to ``cores / ranks`` cores
  (``olcf/olcf-user-docs@6c07271c3d12:software/analytics/distributed-dl-env.rst#L120-L130``).
- ``mpiexec`` (Cray PALS on Polaris): ``mpiexec -n TOTAL --ppn RANKS_PER_NODE --depth=D
  --cpu-bind depth`` (ALCF's Polaris job scripts, https://docs.alcf.anl.gov/polaris/running-jobs/).
- ``aprun`` (Cray ALPS on Theta): ``aprun -n 8 -N 4 --cc depth -d 16``
  (``argonne-lcf/ALCF_Hands_on_HPC_Workshop@5b4beb1902b8:learningFrameworks/distributedDeepLearning/README.md#L199-L202``).
- ``mpirun`` (Open MPI): ``-np`` all ranks, ``--map-by ppr:N:node`` N ranks on each node, and
  ``:PE=n`` binding each rank to n cores (mpirun(1) of Open MPI 4.1,
  https://www.open-mpi.org/doc/v4.1/man1/mpirun.1.php, "Mapping, Ranking, and Binding").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from envtool.core.errors import UsageError
from envtool.scheduler.model import JobRequest, Layout, missing


def _no_mpi_plugin(name: str, mpi: Optional[str]) -> None:
    if mpi is not None:
        raise UsageError(f"a step with its own PMI plugin (--mpi={mpi}) needs Slurm's srun as launcher, not {name}")


@dataclass(frozen=True)
class Srun:
    """``srun [--mpi=P]`` (+ ``-N n -n r [-c c]`` for a step smaller than the job); ``mpi`` replaces
    the site's ``batch.mpi`` for this step (``none``: no PMI set-up, srun(1))."""

    name: str = "srun"

    def launch_argv(self, req: JobRequest, layout: Layout, whole_job: bool = True,
                    mpi: Optional[str] = None) -> List[str]:
        """See :meth:`envtool.scheduler.model.LaunchProgram.launch_argv`."""
        argv = ["srun"]
        plugin = mpi or req.site.batch.mpi
        if plugin:
            argv.append(f"--mpi={plugin}")
        if not whole_job:
            argv += ["-N", str(layout.nodes), "-n", str(layout.ranks)]
            if layout.cpus_per_rank:
                argv += ["-c", str(layout.cpus_per_rank)]
        return argv


@dataclass(frozen=True)
class Jsrun:
    """``jsrun -r1 -g{G} -a{R} -c{C} -bpacked:{C/R}`` (``-n{nodes}`` for a partial step)."""

    name: str = "jsrun"

    def launch_argv(self, req: JobRequest, layout: Layout, whole_job: bool = True,
                    mpi: Optional[str] = None) -> List[str]:
        """See :meth:`envtool.scheduler.model.LaunchProgram.launch_argv`.

        Raises:
            SpecError: ``batch.cpus_per_node`` missing (``-c`` and ``-bpacked`` need it), or GPUs
                asked of a site with ``gpus_per_node`` 0.
        """
        _no_mpi_plugin(self.name, mpi)
        site = req.site
        if not layout.cpus_per_rank:
            raise missing(site, "batch.cpus_per_node", "the cores a job may use on one node (an integer)",
                          "jsrun -c and -bpacked need it")
        argv = ["jsrun"]
        if not whole_job:
            argv.append(f"-n{layout.nodes}")
        argv.append("-r1")
        if layout.gpus_per_rank:
            if not site.gpus_per_node:
                raise missing(site, "gpus_per_node", "the GPUs of one node", "jsrun -g needs it")
            argv.append(f"-g{layout.gpus_per_node}")
        argv += [f"-a{layout.ranks_per_node}", f"-c{layout.cpus_per_rank * layout.ranks_per_node}",
                 f"-bpacked:{layout.cpus_per_rank}"]
        return argv


@dataclass(frozen=True)
class PalsMpiexec:
    """``mpiexec -n T --ppn R --depth=D --cpu-bind depth`` (Cray PALS)."""

    name: str = "mpiexec"

    def launch_argv(self, req: JobRequest, layout: Layout, whole_job: bool = True,
                    mpi: Optional[str] = None) -> List[str]:
        """See :meth:`envtool.scheduler.model.LaunchProgram.launch_argv`.

        Raises:
            SpecError: ``batch.cpus_per_node`` missing (``--depth`` needs it).
        """
        _no_mpi_plugin(self.name, mpi)
        if not layout.cpus_per_rank:
            raise missing(req.site, "batch.cpus_per_node", "the cores a job may use on one node (an integer)",
                          "mpiexec --depth needs it")
        return ["mpiexec", "-n", str(layout.ranks), "--ppn", str(layout.ranks_per_node),
                f"--depth={layout.cpus_per_rank}", "--cpu-bind", "depth"]


@dataclass(frozen=True)
class Aprun:
    """``aprun -n T -N R --cc depth -d D`` (Cray ALPS)."""

    name: str = "aprun"

    def launch_argv(self, req: JobRequest, layout: Layout, whole_job: bool = True,
                    mpi: Optional[str] = None) -> List[str]:
        """See :meth:`envtool.scheduler.model.LaunchProgram.launch_argv`.

        Raises:
            SpecError: ``batch.cpus_per_node`` missing (``-d`` needs it).
        """
        _no_mpi_plugin(self.name, mpi)
        if not layout.cpus_per_rank:
            raise missing(req.site, "batch.cpus_per_node", "the cores a job may use on one node (an integer)",
                          "aprun -d needs it")
        return ["aprun", "-n", str(layout.ranks), "-N", str(layout.ranks_per_node), "--cc", "depth",
                "-d", str(layout.cpus_per_rank)]


@dataclass(frozen=True)
class Mpirun:
    """``mpirun -np T --map-by ppr:R:node[:PE=c]`` (Open MPI), inside any scheduler's allocation."""

    name: str = "mpirun"

    def launch_argv(self, req: JobRequest, layout: Layout, whole_job: bool = True,
                    mpi: Optional[str] = None) -> List[str]:
        """See :meth:`envtool.scheduler.model.LaunchProgram.launch_argv`."""
        _no_mpi_plugin(self.name, mpi)
        mapping = f"ppr:{layout.ranks_per_node}:node" + (f":PE={layout.cpus_per_rank}" if layout.cpus_per_rank else "")
        return ["mpirun", "-np", str(layout.ranks), "--map-by", mapping]


SRUN = Srun()
JSRUN = Jsrun()
PALS_MPIEXEC = PalsMpiexec()
APRUN = Aprun()
MPIRUN = Mpirun()
