"""Launch lines for PyTorch's own distributed training (DDP) in a job: ``torchrun`` and ``srun``
(issue 41, item 2). Both wrap the command every rank runs; both need a scheduler that declares
its tasks' variables and how to name the job's first node (:class:`~envtool.scheduler.model.Capabilities`
``task_vars`` and ``first_node``: Slurm so far).

* :data:`TORCHRUN`: one task per node (the step is ``per_node``); on each, ``python -m
  torch.distributed.run --nnodes N --nproc_per_node R --rdzv_backend c10d --rdzv_endpoint
  FIRST_NODE:PORT --rdzv_id JOB COMMAND``: torchrun starts the node's R ranks and sets ``RANK``,
  ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` for them (PyTorch's torchrun
  documentation, https://pytorch.org/docs/stable/elastic/run.html, "Environment Variables" and
  "--rdzv-backend=c10d"). The c10d rendezvous is served by the torchrun of the first node.
* :data:`SRUN`: one task per rank; each exports ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` from the
  launcher's own (``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS``), ``MASTER_ADDR`` (the
  first node) and ``MASTER_PORT``, then runs the command: ``init_process_group`` then takes them
  from the environment (``env://``, PyTorch's "Environment variable initialization",
  https://pytorch.org/docs/stable/distributed.html#environment-variable-initialization); rank 0,
  on the first node, serves the store.

The port is ``29500`` (torchrun's default ``MASTER_PORT``) plus the job id modulo 1000, so two
jobs sharing a first node do not collide. The first node's name is what the scheduler gives, put
in the site file's ``launch.rendezvous_host`` pattern when it has one (a site whose nodes reach
each other under an interface-specific name, ``{node}.hsn...``). On a job that takes every GPU of
its nodes the srun launch exports the site's ``launch.gpu_order`` as ``CUDA_VISIBLE_DEVICES``, so
the ``cuda:LOCAL_RANK`` a DDP script picks is the GPU nearest the rank's CPUs while every rank
still sees every GPU of its node (NCCL's peer-to-peer paths need that; ``srun --gpu-bind=closest``
would leave each rank one device, and ``cuda:1`` would not exist).

:func:`choose` decides the launch of a job: ``--launch``, else the site file's ``launch.default``,
else ``launcher`` (the site's launcher line), and says where the choice came from.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from envtool.core.errors import SpecError, UsageError

TORCHRUN = "torchrun"
SRUN = "srun"
#: The site's launcher line (what MPI and Horovod programs need): no DDP variables.
LAUNCHER = "launcher"
#: The DDP launches ``jobscript --launch`` and ``validate --submit --launch`` take.
LAUNCHES = (TORCHRUN, SRUN)
#: Everything ``--launch`` and a site file's ``launch.default`` may name.
CHOICES = (TORCHRUN, SRUN, LAUNCHER)
#: torchrun's default ``MASTER_PORT`` (https://pytorch.org/docs/stable/elastic/run.html).
BASE_PORT = 29500


@dataclass(frozen=True)
class LaunchChoice:
    """How a job starts its ranks, and why.

    Attributes:
        name: ``torchrun``, ``srun`` or ``launcher`` (:data:`CHOICES`).
        origin: where the choice came from, in words (``--launch srun``, ``site perlmutter's default
            launch (source nersc-ddp: …)``, ``the site's launcher (...)``).
        from_site: the site file's ``launch.default`` chose it.
    """

    name: str
    origin: str
    from_site: bool = False

    @property
    def ddp(self) -> bool:
        """A DDP launch (torchrun or srun), not the site's launcher line."""
        return self.name in LAUNCHES


def choose(site: Any, given: Optional[str], caps: Any = None) -> LaunchChoice:
    """The launch of a job on ``site``: ``given`` (``--launch``), else the site file's
    ``launch.default``, else :data:`LAUNCHER`.

    Args:
        site: the :class:`~envtool.spec.sites.SiteFile` (its ``launch`` section, name, path, sources).
        given: ``--launch``'s value, or None.
        caps: the scheduler's :class:`~envtool.scheduler.model.Capabilities`; when given, a DDP
            default on a scheduler without task variables is refused here, naming the site file.
    Raises:
        SpecError: the site file's default is a DDP launch its scheduler cannot write (exit 2,
            naming the file and ``launch.default``).
    """
    if given:
        return LaunchChoice(given, f"--launch {given}")
    sec = getattr(site, "launch", None)
    if sec is None or not sec.default:
        return LaunchChoice(LAUNCHER, f"the site's launcher (site {site.name}'s file names no launch.default)")
    where = dict(site.sources).get(sec.source, "").split(" (", 1)[0].strip()  # the location, not its gloss
    origin = f"site {site.name}'s default launch (source {sec.source}: {where})" if where else \
        f"site {site.name}'s default launch (source {sec.source})"
    if sec.default in LAUNCHES and caps is not None and (len(caps.task_vars) != 5 or not caps.first_node):
        raise SpecError(site.path, "launch.default", "torchrun or srun only where the scheduler names each task's "
                        "rank and the job's first node (Slurm so far), else launcher; site "
                        f"{site.name} uses scheduler {site.scheduler or 'none'}", got=sec.default)
    return LaunchChoice(sec.default, origin, from_site=True)


def _host(site: Any, node: str) -> str:
    """The rendezvous host for inside double quotes: ``node`` (a shell expansion) in the site's
    ``launch.rendezvous_host`` pattern, or ``node`` alone."""
    sec = getattr(site, "launch", None)
    return sec.host_words(node) if sec is not None else node


def gpu_order(site: Any, layout: Any) -> Tuple[int, ...]:
    """The site's ``launch.gpu_order`` when the job's ranks take every GPU of each node (a whole
    node: the indices then mean the node's GPUs), else ``()``."""
    sec = getattr(site, "launch", None)
    if sec is None or not sec.gpu_order or layout is None:
        return ()
    whole = layout.gpus_per_rank * layout.ranks_per_node == len(sec.gpu_order) == getattr(site, "gpus_per_node", 0)
    return tuple(sec.gpu_order) if whole else ()


def _vars(caps, launch: str) -> Tuple[str, ...]:
    if len(caps.task_vars) != 5 or not caps.first_node:
        raise UsageError(f"--launch {launch}: written for schedulers that name each task's rank and the job's "
                         "first node (Slurm so far); this site's scheduler does not")
    return tuple(caps.task_vars)


def _port(job_var: str) -> str:
    return f"$(( {BASE_PORT} + ${{{job_var}:-0}} % 1000 ))"


def torchrun_argv(caps, python: str, ranks_per_node: int, command: Sequence[str], site: Any = None) -> List[str]:
    """The words of a per-node task that starts ``ranks_per_node`` ranks of ``command`` with torchrun.

    Args:
        caps: the scheduler's :class:`~envtool.scheduler.model.Capabilities`.
        python: the environment's interpreter on the nodes (``torch.distributed.run`` is torchrun).
        ranks_per_node: ranks on each node (``--nproc_per_node``).
        command: what each rank runs, without the interpreter when it is a Python script
            (``script.py ARGS``; torchrun runs it with ``python``), else the program.
        site: the site file, whose ``launch.rendezvous_host`` names the first node (optional).
    Returns:
        ``bash -c SCRIPT python ARGS...`` words (each quoted as one word in the job script).
    Raises:
        UsageError: the scheduler does not declare its task variables.
    """
    _, _, _, nodes, job = _vars(caps, TORCHRUN)
    script = (f'first=$({caps.first_node}); exec "$0" -m torch.distributed.run --nnodes="${nodes}" '
              f'--nproc_per_node={int(ranks_per_node)} --rdzv_backend=c10d '
              f'--rdzv_endpoint="{_host(site, "$first")}:{_port(job)}" --rdzv_id="envtool-${{{job}:-0}}" "$@"')
    return ["bash", "-c", script, python, *command]


def srun_env_argv(caps, command: Sequence[str], site: Any = None, order: Sequence[int] = ()) -> List[str]:
    """The words of a per-rank task that exports torch.distributed's variables, then runs ``command``.

    Args:
        caps: the scheduler's :class:`~envtool.scheduler.model.Capabilities`.
        command: what each rank runs.
        site: the site file, whose ``launch.rendezvous_host`` names the first node (optional).
        order: GPU indices exported as ``CUDA_VISIBLE_DEVICES`` (:func:`gpu_order`), or ().
    Raises:
        UsageError: the scheduler does not declare its task variables.
    """
    rank, local, tasks, _, job = _vars(caps, SRUN)
    devices = f' CUDA_VISIBLE_DEVICES={",".join(str(int(i)) for i in order)}' if order else ""
    script = (f'first=$({caps.first_node}); export RANK="${rank}" LOCAL_RANK="${local}" WORLD_SIZE="${tasks}" '
              f'MASTER_ADDR="{_host(site, "$first")}" MASTER_PORT="{_port(job)}"{devices}; exec "$@"')
    return ["bash", "-c", script, "envtool-ddp", *command]
