"""How a validation check's ranks start (validate layer): the launches ``validation-launch`` registers.

In a job each launch turns a :class:`~envtool.validate.checks.ValidationCheck` into one
:class:`~envtool.scheduler.model.LaunchStep` of the job script; on this machine into the argv of
one run. ``SITE``: the site's launcher with the site's PMI (``srun --mpi=pmix``, ``mpiexec``), or
inside an image through the site's container runtime (``validate --image``). ``RENDEZVOUS``:
``srun --mpi=none`` as the child of envtool's rendezvous server in the batch shell
(``rendezvous.py``, which serves Horovod's Gloo rendezvous or torch.distributed's TCPStore; why in
the batch shell, see that file). ``HOROVODRUN``: ``horovodrun -np N -H localhost:N --gloo|--mpi``.
``TORCHRUN`` and ``SRUN``: the launches PyTorch users write (``validate --submit --launch``,
:mod:`envtool.scheduler.ddp`): torchrun on each node with its c10d rendezvous, or one srun task
per rank with ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` exported (``env://``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from envtool.scheduler import ddp
from envtool.scheduler.model import LaunchStep, Layout
from envtool.validate import ranks as rk
from envtool.validate.checks import Launch, ValidationCheck

#: Where ``validate --image`` binds the run directory inside the image: ``/mnt``, which the FHS
#: defines for temporarily mounted file systems and Debian's base-files ships
#: (https://refspecs.linuxfoundation.org/FHS_3.0/fhs/ch03s12.html). A runtime that runs an image
#: read-only (Charliecloud's ``ch-run``) can bind only onto a directory the image has.
IMAGE_RUN_DIR = Path("/mnt")


@dataclass(frozen=True)
class ImageRun:
    """``validate --image``: the site file's ``container`` section, the image, extra binds."""

    section: Any
    image: str
    binds: Tuple[str, ...] = ()


@dataclass(frozen=True)
class JobContext:
    """What a job launch needs besides the check.

    Attributes:
        python: the environment's interpreter as the nodes see it.
        probe: the rank probe in the run directory; rendezvous: the rendezvous server there.
        run_dir: the run directory (shared by the nodes).
        method: the spec's DataLoader start method, or None.
        sweep: the sweep's words (``--sweep BYTES``) or ().
        wait: seconds a rendezvous step may take (words).
        site_may_fail: the site launch's step may fail without stopping the script (a pre-flight
            gate stands before it).
        image: the image the ranks run in, or None.
        caps: the scheduler's :class:`~envtool.scheduler.model.Capabilities` (the DDP launches
            need its task variables), or None.
        layout: the job's :class:`~envtool.scheduler.model.Layout` (torchrun starts each node's
            ranks), or None.
        site: the site file (its ``launch`` section names the rendezvous host and the GPU order
            of the DDP launches), or None.
    """

    python: str
    probe: Path
    rendezvous: Path
    run_dir: Path
    method: Optional[str] = None
    sweep: Tuple[str, ...] = ()
    wait: str = "900"
    site_may_fail: bool = False
    image: Optional[ImageRun] = None
    caps: Any = None
    layout: Optional[Layout] = None
    site: Any = None


@dataclass(frozen=True)
class HereContext:
    """What a launch on this machine needs: the prefix, the ranks, the probe, the run directory,
    the start method and whether the ranks count their imports' metadata calls."""

    prefix: Path
    python: str
    ranks: int
    probe: Path
    run_dir: Path
    method: Optional[str] = None
    import_trace: bool = False


def in_image(image: ImageRun, argv: Sequence[str], run_dir: Path) -> Tuple[str, ...]:
    """``argv`` run inside the image by the site's container runtime, the run directory bound at
    :data:`IMAGE_RUN_DIR` and the extra binds after it (:func:`envtool.scheduler.containers.wrap`)."""
    from envtool.scheduler import containers

    return tuple(containers.wrap(image.section, image.image, argv, [f"{run_dir}:{IMAGE_RUN_DIR}"] + list(image.binds)))


def _site(check: ValidationCheck, ctx: JobContext) -> LaunchStep:
    if ctx.image is not None:
        argv = rk.probe_argv(ctx.python, IMAGE_RUN_DIR / ctx.probe.name, IMAGE_RUN_DIR, check.phase, ctx.method,
                             framework=check.framework)
        return LaunchStep(in_image(ctx.image, argv + list(check.args) + list(ctx.sweep), ctx.run_dir),
                          mpi=ctx.image.section.mpi, may_fail=True)
    argv = rk.probe_argv(ctx.python, ctx.probe, ctx.run_dir, check.phase, ctx.method, import_trace=check.import_trace,
                         framework=check.framework)
    return LaunchStep(tuple(argv + list(check.args) + list(ctx.sweep)), may_fail=ctx.site_may_fail)


def _rendezvous(check: ValidationCheck, ctx: JobContext) -> LaunchStep:
    argv = rk.probe_argv(ctx.python, ctx.probe, ctx.run_dir, check.phase, ctx.method, framework=check.framework)
    return LaunchStep(tuple(argv + list(check.args) + list(ctx.sweep)),
                      wrap=(ctx.python, str(ctx.rendezvous), check.rendezvous, str(ctx.run_dir), check.phase,
                            ctx.wait, "--"), mpi="none", may_fail=True)


def here_phase(check: ValidationCheck) -> str:
    """The rank probe's phase of ``check`` on this machine: ``probe-KEY`` (``probe-mpi``,
    ``probe-tensorflow-gloo``; the key is unique per check)."""
    return f"probe-{check.result_key}"


def _horovodrun(check: ValidationCheck, ctx: HereContext) -> List[str]:
    from envtool.scheduler import launcher

    return launcher.horovodrun_argv(ctx.prefix, ctx.ranks, check.backend) + rk.probe_argv(
        ctx.python, ctx.probe, ctx.run_dir, here_phase(check), ctx.method, import_trace=ctx.import_trace,
        framework=check.framework)


def _torchrun(check: ValidationCheck, ctx: JobContext) -> LaunchStep:
    """torchrun on each node (:func:`envtool.scheduler.ddp.torchrun_argv`): one task per node with
    the CPUs and GPUs of its ranks, no PMI."""
    lay = ctx.layout
    assert lay is not None  # the job's launch steps set it
    argv = rk.probe_argv(ctx.python, ctx.probe, ctx.run_dir, check.phase, ctx.method, framework=check.framework)
    words = ddp.torchrun_argv(ctx.caps, ctx.python, lay.ranks_per_node,
                              argv[1:] + list(check.args) + list(ctx.sweep), ctx.site)
    per_node = Layout(nodes=lay.nodes, ranks_per_node=1, gpus_per_rank=lay.gpus_per_rank * lay.ranks_per_node,
                      cpus_per_rank=lay.cpus_per_rank * lay.ranks_per_node)
    return LaunchStep(tuple(words), layout=per_node, mpi="none", may_fail=True)


def _srun_env(check: ValidationCheck, ctx: JobContext) -> LaunchStep:
    """One task per rank exporting torch.distributed's variables (:func:`envtool.scheduler.ddp.srun_env_argv`),
    the site's GPU order on whole nodes."""
    argv = rk.probe_argv(ctx.python, ctx.probe, ctx.run_dir, check.phase, ctx.method, framework=check.framework)
    return LaunchStep(tuple(ddp.srun_env_argv(ctx.caps, argv + list(check.args) + list(ctx.sweep), ctx.site,
                                              ddp.gpu_order(ctx.site, ctx.layout))), mpi="none", may_fail=True)


SITE = Launch(name="site", where="job", build=_site, in_image=True)
RENDEZVOUS = Launch(name="rendezvous", where="job", build=_rendezvous, needs_step_launcher=True)
HOROVODRUN = Launch(name="horovodrun", where="here", build=_horovodrun)
TORCHRUN = Launch(name="torchrun", where="job", build=_torchrun, needs_step_launcher=True)
SRUN = Launch(name="srun", where="job", build=_srun_env, needs_step_launcher=True)
