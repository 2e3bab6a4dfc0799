"""Validation checks as data (validate layer): what ``validate`` runs, declared, registered, selected.

A :class:`ValidationCheck` names the framework binding its ranks import (``horovod.torch``,
``torch.distributed``), the controller or backend they communicate with (``mpi``, ``gloo``,
``nccl``), the device its tensors live on (``cpu``, ``gpu``), how its ranks are started in a job
(a :class:`Launch` registered under ``validation-launch``: ``site`` — the site's launcher with the
site's PMI, ``rendezvous`` — ``srun --mpi=none`` with envtool's rendezvous server in the batch
shell) and on this machine (``horovodrun``, or none), and what every rank runs (the rank probe's
phase and its extra words).

Checks live in one :class:`~envtool.core.plugins.Registry` of kind ``validation-check``;
:func:`select` picks those a spec and a site imply, and both ``validate`` on this machine and
``validate --submit`` run that list (a job turns each into a
:class:`~envtool.scheduler.model.LaunchStep`, this machine runs each local form). A new framework,
backend or launch is one module declaring its check (or launch) plus one registration, here or
through an ``envtool.plugins`` entry point (``validation-check.NAME = module:attr``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

from envtool.core.plugins import Registry

#: The devices a check's tensors may live on.
DEVICES = ("cpu", "gpu")


@dataclass(frozen=True)
class ValidationCheck:
    """One validation check, declared as data.

    Attributes:
        name: the registry name (``horovod-mpi``).
        framework: the spec's framework it validates, as ``horovod.frameworks`` names it
            (``pytorch``, ``tensorflow``; :mod:`envtool.core.frameworks`).
        binding: the module its ranks import to communicate (``horovod.torch``,
            ``horovod.tensorflow``, ``torch.distributed``).
        backend: the controller or backend (``mpi``, ``gloo``, ``nccl``); a check whose backend
            the build lacks is not run here (check-build says which it has).
        device: ``cpu`` or ``gpu`` (a ``gpu`` check is selected only where the site has GPUs).
        launch: the :class:`Launch` that starts its ranks in a job (``site``, ``rendezvous``,
            ``torchrun``), or ``""``: not run in a job.
        local: the launch that starts its ranks on this machine (``horovodrun``), or ``""``.
        phase: the rank probe's phase (its records go to ``RUN_DIR/PHASE/``).
        args: extra words after the rank probe's own in a job, where the launch does not set the
            controller up (``--controller gloo``); ``horovodrun`` here sets it up itself.
        key: its entry under ``controllers`` in the result (``mpi``, ``gloo``, ``torch``).
        rendezvous: what envtool's rendezvous server serves for it (``horovod-gloo``,
            ``horovod-gloo:horovod.tensorflow``: Horovod's server, Gloo asked of that binding;
            ``torch-gloo``; ``rendezvous.py``), or ``""``.
        import_trace: in a job, its ranks also count the metadata calls of their imports.
    """

    name: str
    framework: str
    binding: str
    backend: str
    device: str
    launch: str
    local: str
    phase: str
    args: Tuple[str, ...] = ()
    key: str = ""
    rendezvous: str = ""
    import_trace: bool = False

    @property
    def result_key(self) -> str:
        """Where its outcome goes under ``controllers`` (``key``, else the backend)."""
        return self.key or self.backend

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (``validate --submit --dry-run --json`` lists the selected checks)."""
        return {"name": self.name, "framework": self.framework, "binding": self.binding, "backend": self.backend,
                "device": self.device, "launch": self.launch or None, "local": self.local or None,
                "phase": self.phase, "args": list(self.args), "key": self.result_key}


def _check_check(obj: object) -> None:
    if not isinstance(obj, ValidationCheck):
        raise TypeError(f"a validation-check plug-in must be a ValidationCheck, got {type(obj).__name__}")
    if obj.device not in DEVICES:
        raise ValueError(f"validation check {obj.name}: device {obj.device!r}, expected one of {', '.join(DEVICES)}")
    if not (obj.framework and obj.binding and obj.backend and obj.phase):
        raise ValueError(f"validation check {obj.name}: framework, binding, backend and phase are required")


@dataclass(frozen=True)
class Launch:
    """How a check's ranks start: in a job (``where == "job"``) or on this machine (``"here"``).

    Attributes:
        name: the registry name (``site``, ``rendezvous``, ``horovodrun``).
        where: ``job`` or ``here``.
        needs_step_launcher: in a job, only where the scheduler's step launcher can choose a PMI
            plug-in per step (:attr:`envtool.scheduler.model.Capabilities.step_launcher`: ``srun --mpi=none``).
        in_image: it can start ranks inside an image (``validate --image``).
        build: ``(check, context) -> LaunchStep`` (job) or ``-> argv words`` (here), given by
            :mod:`envtool.validate.launches`.
    """

    name: str
    where: str
    build: Any
    needs_step_launcher: bool = False
    in_image: bool = False


def _check_launch(obj: object) -> None:
    if not isinstance(obj, Launch) or obj.where not in ("job", "here") or not callable(obj.build):
        raise TypeError("a validation-launch plug-in must be a Launch with where 'job' or 'here' and a build function")


#: Every validation check (kind ``validation-check``).
CHECKS: Registry[ValidationCheck] = Registry("validation-check", check=_check_check)
#: Every launch a check may name (kind ``validation-launch``).
LAUNCHES: Registry[Launch] = Registry("validation-launch", check=_check_launch)

CHECKS.register("horovod-mpi", "envtool.validate.check_horovod:MPI", "horovod.torch, MPI controller, site launcher")
CHECKS.register("horovod-gloo", "envtool.validate.check_horovod:GLOO", "horovod.torch, Gloo, srun --mpi=none")
CHECKS.register("horovod-tf-mpi", "envtool.validate.check_horovod_tf:MPI",
                "horovod.tensorflow and its Keras binding, MPI controller, site launcher")
CHECKS.register("horovod-tf-gloo", "envtool.validate.check_horovod_tf:GLOO",
                "horovod.tensorflow and its Keras binding, Gloo, srun --mpi=none")
CHECKS.register("torch-gloo", "envtool.validate.check_torch:GLOO", "torch.distributed, gloo, srun --mpi=none")
CHECKS.register("torch-nccl", "envtool.validate.check_torch:NCCL",
                "torch.distributed, NCCL on each rank's GPU, srun --mpi=none (GPU sites)")
LAUNCHES.register("site", "envtool.validate.launches:SITE", "the site's launcher with the site's PMI (a job)")
LAUNCHES.register("rendezvous", "envtool.validate.launches:RENDEZVOUS",
                  "srun --mpi=none, envtool's rendezvous in the batch shell (a job)")
LAUNCHES.register("horovodrun", "envtool.validate.launches:HOROVODRUN", "horovodrun -np N on this machine")
LAUNCHES.register("torchrun", "envtool.validate.launches:TORCHRUN",
                  "torchrun on each node, c10d rendezvous on the first (a job; validate --launch torchrun)")
LAUNCHES.register("srun", "envtool.validate.launches:SRUN",
                  "one srun task per rank with RANK/WORLD_SIZE/MASTER_ADDR exported (a job; validate --launch srun)")


@dataclass(frozen=True)
class Selection:
    """What a spec and a site allow, for :func:`select`.

    Attributes:
        where: ``job`` or ``here``.
        frameworks: the spec's ``horovod.frameworks`` (``pytorch``), or None: any (no spec).
        gpus: the site's nodes have GPUs and the job asks for them.
        step_launcher: the scheduler's step launcher takes a PMI plug-in per step (job only).
        image: the ranks run inside an image (``--image``).
        built: the backends the build has (check-build, lower case), or None: not known yet.
    """

    where: str
    frameworks: Optional[Tuple[str, ...]] = None
    gpus: bool = False
    step_launcher: bool = False
    image: bool = False
    built: Optional[FrozenSet[str]] = None


def _launch_of(check: ValidationCheck, where: str) -> Optional[Launch]:
    name = check.launch if where == "job" else check.local
    return LAUNCHES.get(name) if name else None


def _fits(check: ValidationCheck, sel: Selection) -> bool:
    launch = _launch_of(check, sel.where)
    if launch is None or launch.where != sel.where:
        return False
    if sel.image and not launch.in_image:
        return False
    if launch.needs_step_launcher and not sel.step_launcher:
        return False
    if check.device == "gpu" and not sel.gpus:
        return False
    if sel.frameworks is not None and check.framework not in sel.frameworks:
        return False
    return sel.built is None or check.backend in sel.built


def select(sel: Selection, names: Optional[Sequence[str]] = None) -> List[ValidationCheck]:
    """The checks ``sel`` implies, in registration order.

    Args:
        sel: the spec's frameworks, the site's GPUs and scheduler, the image, the build's backends.
        names: the registered names to consider (default every one).
    Returns:
        the checks whose launch exists where they run and suits the scheduler and the image,
        whose device the site has, whose framework the spec names and whose backend the build has.
    Raises:
        UnknownPlugin, ImportError: a check or launch that cannot be loaded (a broken plug-in).
    """
    return [c for c in (CHECKS.get(n) for n in (names if names is not None else CHECKS.names())) if _fits(c, sel)]


def launch_for(check: ValidationCheck, where: str) -> Launch:
    """The launch that starts ``check``'s ranks ``where`` (``job`` or ``here``).

    Raises:
        KeyError: the check has no launch there (:func:`select` leaves such checks out).
    """
    launch = _launch_of(check, where)
    if launch is None:
        raise KeyError(f"validation check {check.name} has no {where} launch")
    return launch


def dataloader_skipped(frameworks: Sequence[str]) -> str:
    """Why the DataLoader start-method check does not apply to a spec with ``frameworks`` (its
    ``horovod.frameworks``), or ``""`` when it does: PyTorch is among them, or none is named. The
    check is PyTorch's: it starts ``torch.utils.data.DataLoader`` workers."""
    fws = tuple(frameworks)
    if not fws or "pytorch" in fws:
        return ""
    return (f"the spec's frameworks ({', '.join(fws)}) do not include PyTorch, whose DataLoader the check "
            "starts workers with")


#: The frameworks the rank probe has a synthetic training step for (``--benchmark``), preferred first.
BENCHMARK_FRAMEWORKS = ("pytorch", "tensorflow")


def benchmark_framework(frameworks: Optional[Sequence[str]]) -> str:
    """Whose synthetic step ``--benchmark`` times for a spec with ``frameworks``: the first of
    :data:`BENCHMARK_FRAMEWORKS` among them (PyTorch's CNN, else the same network in Keras), and
    ``pytorch`` when the spec names neither or there is no spec (None)."""
    return next((f for f in BENCHMARK_FRAMEWORKS if f in (frameworks or ())), "pytorch")
