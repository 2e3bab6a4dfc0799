"""The one registry of schedulers and launchers: their names and the modules that implement them.

The site-file reader (:mod:`envtool.spec.sites`, this layer) checks a site's ``scheduler`` and
``batch.launcher`` against these names; :func:`envtool.scheduler.get` and
:func:`envtool.scheduler.get_launcher` (the layer above) load the registered modules.
Both sides read the same tables, two :class:`envtool.core.plugins.Registry` objects, and the spec
layer never imports the scheduler layer: an entry holds the implementing module's dotted path as
a string, imported on first use by the scheduler layer.

Adding a scheduler is one new module (implementing :class:`envtool.scheduler.model.Scheduler`)
plus one :func:`register_scheduler` call (or one line below). A launcher is one object
implementing :class:`envtool.scheduler.model.LaunchProgram` plus one :func:`register_launcher`.
Another distribution adds either through the ``envtool.plugins`` entry-point group:
``scheduler.NAME = "module"`` (or ``"module:attribute"``) and ``launcher.NAME = "module:attribute"``.
This follows ReFrame's registry of scheduler and launcher back-ends keyed by the name a
configuration file uses (``reframe-hpc/reframe@v4.5.0:reframe/core/backends.py``).
"""
from __future__ import annotations

from typing import Tuple

from envtool.core.plugins import Registry

#: scheduler name (a site file's ``scheduler``) → the module implementing it (a dotted path,
#: imported on first use).
SCHEDULERS: Registry[object] = Registry("scheduler")
#: the registered scheduler of a site without one (a site file writes ``scheduler: none``).
NO_SCHEDULER = "local"
#: what a site file writes for "no scheduler" (its jobs run on this machine with :data:`NO_SCHEDULER`).
NONE = "none"

#: launcher name (a site file's ``batch.launcher``, the program's name) → ``module:attribute`` of
#: the object that builds its job-script words from a layout.
LAUNCHERS: Registry[object] = Registry("launcher")


def register_scheduler(name: str, module: str) -> None:
    """Register scheduler ``name`` as implemented by ``module`` (a dotted path, imported on first use).

    Raises:
        ValueError: a malformed name or path, ``none``, or ``name`` already registered to another module.
    """
    if name == NONE:
        raise ValueError(f"scheduler name {NONE!r} is what a site file writes for no scheduler")
    SCHEDULERS.register(name, module)


def register_launcher(name: str, target: str) -> None:
    """Register launcher ``name`` as ``module:attribute`` (imported on first use).

    Raises:
        ValueError: a malformed name or path, or ``name`` already registered elsewhere.
    """
    LAUNCHERS.register(name, target)


for _name in ("slurm", "lsf", "pbs", "cobalt", "local"):
    register_scheduler(_name, f"envtool.scheduler.{_name}")
for _name, _attr in (("srun", "SRUN"), ("jsrun", "JSRUN"), ("mpiexec", "PALS_MPIEXEC"), ("aprun", "APRUN"),
                     ("mpirun", "MPIRUN")):
    register_launcher(_name, f"envtool.scheduler.launchers:{_attr}")


#: DDP launch name (``jobscript --launch``, a site file's ``launch.default``) → ``module:attribute``
#: of its :class:`envtool.scheduler.ddp.DdpLaunch`, imported only when a launch line is written.
#: Each launch declares what it needs of the site (the scheduler's
#: :attr:`~envtool.scheduler.model.Capabilities.ddp_ready`, and for a launch with one task per
#: rank the registered launcher that starts the tasks); a new one is one ``DdpLaunch`` plus one
#: ``DDP_LAUNCHES.register(NAME, "module:ATTR")`` (or an ``envtool.plugins`` entry point
#: ``ddp-launch.NAME``).
DDP_LAUNCHES: Registry[object] = Registry("ddp-launch")
for _name, _attr in (("torchrun", "TORCHRUN_LAUNCH"), ("srun", "SRUN_LAUNCH"), ("mpiexec", "MPIEXEC_LAUNCH")):
    DDP_LAUNCHES.register(_name, f"envtool.scheduler.ddp:{_attr}")


def ddp_launch_names() -> Tuple[str, ...]:
    """The registered DDP launches (:data:`DDP_LAUNCHES`; none is imported)."""
    return DDP_LAUNCHES.names()


def site_scheduler_names() -> Tuple[str, ...]:
    """What a site file's ``scheduler`` may be: every registered scheduler except :data:`NO_SCHEDULER`,
    then ``none``."""
    return tuple(n for n in SCHEDULERS.names() if n not in (NO_SCHEDULER, NONE)) + (NONE,)


def launcher_names() -> Tuple[str, ...]:
    """What a site file's ``batch.launcher`` may be: every registered launcher."""
    return LAUNCHERS.names()


#: container runtime name (a site file's ``container.runtime``) → ``module:attribute`` of its
#: :class:`envtool.scheduler.containers.Runtime`, imported only when a run line is written. The one
#: table of runtime names: the site-file reader checks ``container.runtime`` against it and
#: :func:`envtool.scheduler.containers.runtime` loads from it. A new runtime is one class implementing
#: ``Runtime`` plus one ``CONTAINER_RUNTIMES.register(NAME, "module:ATTR")`` (or an
#: ``envtool.plugins`` entry point ``container-runtime.NAME``).
CONTAINER_RUNTIMES: Registry = Registry("container-runtime")
for _name, _target in (("shifter", "envtool.scheduler.containers:SHIFTER"),
                       ("podman-hpc", "envtool.scheduler.containers:PODMAN_HPC"),
                       ("apptainer", "envtool.scheduler.containers:APPTAINER"),
                       ("charliecloud", "envtool.scheduler.containers:CHARLIECLOUD")):
    CONTAINER_RUNTIMES.register(_name, _target)


def container_runtime_names() -> Tuple[str, ...]:
    """What a site file's ``container.runtime`` may be: every registered container runtime (none is
    imported)."""
    return CONTAINER_RUNTIMES.names()
