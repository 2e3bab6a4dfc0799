"""Launch lines for PyTorch's own distributed training (DDP) in a job: ``torchrun``, ``srun`` and
``mpiexec`` (issue 41, item 2), each a registered :class:`DdpLaunch`
(:data:`envtool.spec.registry.DDP_LAUNCHES`). All wrap the command every rank runs; all need a
scheduler that declares how to name each task's rank and the job's first node
(:attr:`~envtool.scheduler.model.Capabilities.ddp_ready`: Slurm, and PBS with Cray PALS), never a
check of the scheduler's name.

* :data:`TORCHRUN`: one task per node (the step is ``per_node``); on each, ``python -m
  torch.distributed.run --nnodes N --nproc_per_node R --rdzv_backend c10d --rdzv_endpoint
  FIRST_NODE:PORT --rdzv_id JOB COMMAND``: torchrun starts the node's R ranks and sets ``RANK``,
  ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` for them (PyTorch's torchrun
  documentation, https://pytorch.org/docs/stable/elastic/run.html, "Environment Variables" and
  "--rdzv-backend=c10d"). The c10d rendezvous is served by the torchrun of the first node.
* :data:`SRUN` and :data:`MPIEXEC`: one task per rank, started by the site's launcher (Slurm's
  ``srun``; Cray PALS's ``mpiexec -n T --ppn R --depth=D --cpu-bind depth`` on PBS, ALCF's way,
  ``argonne-lcf/user-guides@7d04a3f91d5e:docs/polaris/running-jobs/index.md#L81-L92``); each
  exports ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` from the launcher's own (``SLURM_PROCID``,
  ``SLURM_LOCALID``, ``SLURM_NTASKS``; ``PALS_RANKID``, ``PALS_LOCAL_RANKID``, ``PMI_SIZE``: the
  scheduler's :attr:`~envtool.scheduler.model.Capabilities.ddp_exprs`), ``MASTER_ADDR`` (the first
  node) and ``MASTER_PORT``, then runs the command: ``init_process_group`` then takes them from the
  environment (``env://``, PyTorch's "Environment variable initialization",
  https://pytorch.org/docs/stable/distributed.html#environment-variable-initialization); rank 0,
  on the first node, serves the store. Which launcher starts the tasks is the launch's declared
  need (:attr:`DdpLaunch.through`), checked against the site's launcher.

The port is ``29500`` (torchrun's default ``MASTER_PORT``) plus the job number modulo 1000, so two
jobs sharing a first node do not collide. The first node's name is what the scheduler gives, put
in the site file's ``launch.rendezvous_host`` pattern when it has one (a site whose nodes reach
each other under an interface-specific name, ``{node}.hsn...``). On a job that takes every GPU of
its nodes a per-rank launch exports the site's ``launch.gpu_order`` as ``CUDA_VISIBLE_DEVICES``, so
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
from envtool.spec import registry

TORCHRUN = "torchrun"
SRUN = "srun"
MPIEXEC = "mpiexec"
#: The site's launcher line (what MPI and Horovod programs need): no DDP variables.
LAUNCHER = "launcher"
#: The registered DDP launches ``jobscript --launch`` takes (:data:`envtool.spec.registry.DDP_LAUNCHES`).
LAUNCHES = registry.ddp_launch_names()
#: Everything ``--launch`` and a site file's ``launch.default`` may name.
CHOICES = LAUNCHES + (LAUNCHER,)
#: torchrun's default ``MASTER_PORT`` (https://pytorch.org/docs/stable/elastic/run.html).
BASE_PORT = 29500


@dataclass(frozen=True)
class DdpLaunch:
    """A registered DDP launch and what it needs of a site (its declared capabilities).

    Attributes:
        name: the registered name (``jobscript --launch NAME``).
        per_rank: one task per rank exporting torch.distributed's variables
            (:func:`per_rank_argv`); False: one torchrun per node (:func:`torchrun_argv`).
        through: the registered launcher (:data:`envtool.spec.registry.LAUNCHERS`) that must start
            the tasks, the site's job-script launcher (``srun``, ``mpiexec``), or ``""``: any.
        summary: one line for help texts.
    """

    name: str
    per_rank: bool
    through: str = ""
    summary: str = ""

    def unmet(self, caps: Any, program: Optional[str]) -> Optional[str]:
        """What the site lacks for this launch, in words, or None.

        Args:
            caps: the scheduler's :class:`~envtool.scheduler.model.Capabilities`.
            program: the site's job-script launcher program (``srun``, ``mpiexec``), or None when
                not known (then only the scheduler is checked).
        """
        if not caps.ddp_ready:
            return ("a scheduler that names each task's rank and the job's first node (Slurm; PBS with "
                    "Cray PALS)")
        if self.through and program is not None and program != self.through:
            return f"a site whose launcher is {self.through} (its tasks carry the rank variables), not {program}"
        return None


TORCHRUN_LAUNCH = DdpLaunch(TORCHRUN, per_rank=False,
                            summary="one torchrun per node, c10d rendezvous on the first node")
SRUN_LAUNCH = DdpLaunch(SRUN, per_rank=True, through="srun",
                        summary="one srun task per rank, RANK/LOCAL_RANK/WORLD_SIZE from SLURM_*")
MPIEXEC_LAUNCH = DdpLaunch(MPIEXEC, per_rank=True, through="mpiexec",
                           summary="one Cray PALS mpiexec rank per GPU, RANK/LOCAL_RANK from PALS_*")


def get(name: str) -> DdpLaunch:
    """The registered DDP launch ``name``.

    Raises:
        UsageError: an unregistered name, or a plug-in that is not a :class:`DdpLaunch`-like object.
    """
    launch = registry.DDP_LAUNCHES.get(name)
    if not isinstance(getattr(launch, "per_rank", None), bool) or not callable(getattr(launch, "unmet", None)):
        raise UsageError(f"DDP launch {name} ({registry.DDP_LAUNCHES.origin(name)}): {launch!r} has no per_rank "
                         "and unmet() (see envtool.scheduler.ddp.DdpLaunch)")
    return launch  # type: ignore[return-value]


@dataclass(frozen=True)
class LaunchChoice:
    """How a job starts its ranks, and why.

    Attributes:
        name: a registered DDP launch or ``launcher`` (:data:`CHOICES`).
        origin: where the choice came from, in words (``--launch srun``, ``site perlmutter's default
            launch (source nersc-ddp: …)``, ``the site's launcher (...)``).
        from_site: the site file's ``launch.default`` chose it.
    """

    name: str
    origin: str
    from_site: bool = False

    @property
    def ddp(self) -> bool:
        """A DDP launch (torchrun, srun, mpiexec), not the site's launcher line."""
        return self.name in LAUNCHES


def choose(site: Any, given: Optional[str], caps: Any = None, program: Optional[str] = None) -> LaunchChoice:
    """The launch of a job on ``site``: ``given`` (``--launch``), else the site file's
    ``launch.default``, else :data:`LAUNCHER`.

    Args:
        site: the :class:`~envtool.spec.sites.SiteFile` (its ``launch`` section, name, path, sources).
        given: ``--launch``'s value, or None.
        caps: the scheduler's :class:`~envtool.scheduler.model.Capabilities`; when given, a DDP
            default the site cannot start (:meth:`DdpLaunch.unmet`) is refused here, naming the site file.
        program: the site's job-script launcher program (``srun``, ``mpiexec``), or None.
    Raises:
        SpecError: the site file's default is a DDP launch its scheduler or launcher cannot start
            (exit 2, naming the file and ``launch.default``).
    """
    if given:
        return LaunchChoice(given, f"--launch {given}")
    sec = getattr(site, "launch", None)
    if sec is None or not sec.default:
        return LaunchChoice(LAUNCHER, f"the site's launcher (site {site.name}'s file names no launch.default)")
    where = dict(site.sources).get(sec.source, "").split(" (", 1)[0].strip()  # the location, not its gloss
    origin = f"site {site.name}'s default launch (source {sec.source}: {where})" if where else \
        f"site {site.name}'s default launch (source {sec.source})"
    unmet = get(sec.default).unmet(caps, program) if sec.default in LAUNCHES and caps is not None else None
    if unmet:
        raise SpecError(site.path, "launch.default", f"a DDP launch only where the site has what it needs ({unmet}), "
                        f"else launcher; site {site.name} uses scheduler {site.scheduler or 'none'}"
                        + (f" and launcher {program}" if program else ""), got=sec.default)
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


def _exprs(caps, launch: str) -> Tuple[str, ...]:
    if not caps.ddp_ready:
        raise UsageError(f"--launch {launch}: written for schedulers that name each task's rank and the job's "
                         "first node (Slurm; PBS with Cray PALS); this site's scheduler does not")
    return tuple(caps.ddp_exprs)


def _port(job: str) -> str:
    return f"$(( {BASE_PORT} + {job} % 1000 ))"


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
    _, _, _, nodes, job = _exprs(caps, TORCHRUN)
    script = (f'first=$({caps.first_node}); exec "$0" -m torch.distributed.run --nnodes="{nodes}" '
              f'--nproc_per_node={int(ranks_per_node)} --rdzv_backend=c10d '
              f'--rdzv_endpoint="{_host(site, "$first")}:{_port(job)}" --rdzv_id="envtool-{job}" "$@"')
    return ["bash", "-c", script, python, *command]


def per_rank_argv(caps, command: Sequence[str], site: Any = None, order: Sequence[int] = (),
                  launch: str = SRUN) -> List[str]:
    """The words of a per-rank task that exports torch.distributed's variables, then runs ``command``.

    Args:
        caps: the scheduler's :class:`~envtool.scheduler.model.Capabilities`.
        command: what each rank runs.
        site: the site file, whose ``launch.rendezvous_host`` names the first node (optional).
        order: GPU indices exported as ``CUDA_VISIBLE_DEVICES`` (:func:`gpu_order`), or ().
        launch: the launch's name, for the message.
    Returns:
        ``bash -c SCRIPT envtool-ddp COMMAND...`` words, for after the site's launcher words.
    Raises:
        UsageError: the scheduler does not declare its task variables.
    """
    rank, local, tasks, _, job = _exprs(caps, launch)
    devices = f' CUDA_VISIBLE_DEVICES={",".join(str(int(i)) for i in order)}' if order else ""
    script = (f'first=$({caps.first_node}); export RANK="{rank}" LOCAL_RANK="{local}" WORLD_SIZE="{tasks}" '
              f'MASTER_ADDR="{_host(site, "$first")}" MASTER_PORT="{_port(job)}"{devices}; exec "$@"')
    return ["bash", "-c", script, "envtool-ddp", *command]


#: The name the validation launches and older callers use.
srun_env_argv = per_rank_argv
