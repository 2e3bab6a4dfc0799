"""The one registry of schedulers and launchers: their names and the modules that implement them.

The site-file reader (:mod:`envtool.spec.sites`, this layer) checks a site's ``scheduler`` and
``batch.launcher`` against these names; :func:`envtool.scheduler.get` and
:func:`envtool.scheduler.launcher.get_launcher` (the layer above) import the registered modules.
Both sides read the same table, and the spec layer never imports the scheduler layer: an entry
holds the implementing module's dotted path as a string, imported only by the scheduler layer.

Adding a scheduler is one new module (implementing :class:`envtool.scheduler.model.Scheduler`)
plus one :func:`register_scheduler` call (or one line in :data:`SCHEDULERS`). A launcher is one
object implementing :class:`envtool.scheduler.model.LaunchProgram` plus one
:func:`register_launcher`. This follows ReFrame's registry of scheduler and launcher back-ends
keyed by the name a configuration file uses (``reframe-hpc/reframe@v4.5.0:reframe/core/backends.py``).
"""
from __future__ import annotations

import re
from typing import Dict, Tuple

from envtool.core.plugins import Registry

#: scheduler name (a site file's ``scheduler``) → dotted path of the module implementing it.
SCHEDULERS: Dict[str, str] = {
    "slurm": "envtool.scheduler.slurm",
    "lsf": "envtool.scheduler.lsf",
    "pbs": "envtool.scheduler.pbs",
    "cobalt": "envtool.scheduler.cobalt",
    "local": "envtool.scheduler.local",
}
#: the registered scheduler of a site without one (a site file writes ``scheduler: none``).
NO_SCHEDULER = "local"
#: what a site file writes for "no scheduler" (its jobs run on this machine with :data:`NO_SCHEDULER`).
NONE = "none"

#: launcher name (a site file's ``batch.launcher``, the program's name) → ``module:attribute`` of
#: the object that builds its job-script words from a layout.
LAUNCHERS: Dict[str, str] = {
    "srun": "envtool.scheduler.launchers:SRUN",
    "jsrun": "envtool.scheduler.launchers:JSRUN",
    "mpiexec": "envtool.scheduler.launchers:PALS_MPIEXEC",
    "aprun": "envtool.scheduler.launchers:APRUN",
    "mpirun": "envtool.scheduler.launchers:MPIRUN",
}

_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_TARGET_RE = re.compile(r"[A-Za-z_][\w.]*(?::[A-Za-z_]\w*)?")


def _register(table: Dict[str, str], kind: str, name: str, target: str) -> None:
    if not _NAME_RE.fullmatch(name) or name == NONE:
        raise ValueError(f"{kind} name {name!r}: expected lower-case letters, digits, '_' or '-' "
                         f"(at most 32, not {NONE!r})")
    if not _TARGET_RE.fullmatch(target):
        raise ValueError(f"{kind} {name}: {target!r} is not a dotted module path (optionally ':attribute')")
    if table.get(name, target) != target:
        raise ValueError(f"{kind} {name} is already registered as {table[name]}")
    table[name] = target


def register_scheduler(name: str, module: str) -> None:
    """Register scheduler ``name`` as implemented by ``module`` (a dotted path, imported on first use).

    Raises:
        ValueError: a malformed name or path, or ``name`` already registered to another module.
    """
    _register(SCHEDULERS, "scheduler", name, module)


def register_launcher(name: str, target: str) -> None:
    """Register launcher ``name`` as ``module:attribute`` (imported on first use).

    Raises:
        ValueError: a malformed name or path, or ``name`` already registered elsewhere.
    """
    _register(LAUNCHERS, "launcher", name, target)


def site_scheduler_names() -> Tuple[str, ...]:
    """What a site file's ``scheduler`` may be: every registered scheduler except :data:`NO_SCHEDULER`,
    then ``none``."""
    return tuple(n for n in SCHEDULERS if n != NO_SCHEDULER) + (NONE,)


def launcher_names() -> Tuple[str, ...]:
    """What a site file's ``batch.launcher`` may be: every registered launcher."""
    return tuple(LAUNCHERS)


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
