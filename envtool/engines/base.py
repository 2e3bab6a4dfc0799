"""The engine interface: what every engine (venv/pip, py-rattler, an external conda …) provides.

An engine turns a spec into plan steps (plain data with an ``action``) and answers questions
about an existing prefix. It does no I/O when composing steps: what planning needs to know about
this machine is probed once, up front (:meth:`Engine.probe_tools`, :func:`envtool.steps.kernel.machine.probe`),
into the :class:`~envtool.core.plan.MachineFacts` the planner hands over in
:attr:`PlanOptions.machine <envtool.core.plan.PlanOptions>`.

An engine is one module: a subclass of :class:`Engine`, named by one line in
:mod:`envtool.engines.registry` (its ``module:attribute``, imported on first use) or, from another
distribution, by an ``engine.NAME`` entry point of the ``envtool.plugins`` group. This module
imports no engine.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from envtool.core.errors import UsageError
from envtool.core.plan import PlanOptions, Step
from envtool.spec.model import Spec
from envtool.core.prefix import PrefixData


@dataclass(frozen=True)
class InstalledPackage:
    """One package installed in a prefix.

    Attributes:
        name: normalized distribution or conda package name.
        version: its version string.
        manager: ``conda`` or ``pip``.
        build: conda build string ('' for pip).
        url: where it came from ('' when unknown).
        sha256: archive hash ('' when unknown).
    """

    name: str
    version: str
    manager: str
    build: str = ""
    url: str = ""
    sha256: str = ""


@dataclass(frozen=True)
class LockInstall:
    """A lock, read and checked by the steps layer, that an engine installs exactly (no solve).

    Attributes:
        path: the lockfile.
        entries: its package entries for :attr:`platform` (``envtool.lock.model.LockedPackage``:
            ``manager``, ``name``, ``version``, ``url``, ``sha256``, ``built``).
        channels: the lock's channels (highest priority first).
        platform: this machine's platform, which the lock covers (``linux-64`` …).
        notes: lines for the plan (hash match, interpreter).
        lookup: ``(conda entries, channels, platform, progress) -> records``: finds the locked conda
            records by URL in their channels (``envtool.lock.conda_resolve.records_for``; handed down
            because the lock layer sits above the engines).
    """

    path: Path
    entries: Tuple[Any, ...]
    channels: Tuple[str, ...]
    platform: str
    notes: Tuple[str, ...] = ()
    lookup: Optional[Callable[[Sequence[Any], Sequence[str], str, Callable[[str], None]], List[Any]]] = None

    def managed(self, manager: str) -> Tuple[Any, ...]:
        """The entries of ``manager`` (``conda`` or ``pip``) that are installed from the lock as they
        are: a *built* entry (``LockedPackage.built``, Horovod) is made by the ``build-horovod`` step
        from its locked source archive, never installed by the engine (as ``install-locked-pip``
        leaves it out, :func:`envtool.steps.create.from_lock.requirements_lines`)."""
        return tuple(p for p in self.entries if p.manager == manager and not p.built)


@dataclass(frozen=True)
class CloneSettings:
    """How ``envtool clone`` clones (``create --clone`` takes the defaults).

    Attributes:
        mode: for a venv-style source: ``layer`` (``--system-site-packages``) or ``copy``.
        verify_content: prove the source unchanged by sha256 of every file (True) or by ``stat``.
        cache_dir: writable package cache, or None for ``<envtool cache>/pkgs``.
        source_caches: read-only package caches to copy from, or None for the source's own.
    """

    mode: str = "layer"
    verify_content: bool = True
    cache_dir: Optional[Path] = None
    source_caches: Optional[Tuple[Path, ...]] = None


class Engine(ABC):
    """What every engine provides.

    Class attributes:
        name: engine id, as ``--engine`` takes it.
        summary: one line for ``--help`` (what the engine runs).
        spec_engine: the spec ``engine:`` value it serves (``venv`` or ``conda``).
        install_step_ids: ids of the steps it makes that install packages: the spec's ``env``
            applies to them (package scripts read it; :func:`envtool.steps.create.planner.with_spec_env`).
    """

    name: str = ""
    summary: str = ""
    spec_engine: str = "venv"
    install_step_ids: FrozenSet[str] = frozenset()

    @abstractmethod
    def create_steps(self, spec: Spec, options: PlanOptions) -> List[Step]:
        """Steps that create ``options.work_prefix`` and install the spec's packages.

        Raises:
            UsageError: the spec asks for what this engine cannot make (exit 2).
        """

    def clone_steps(self, spec: Optional[Spec], source: str, options: PlanOptions,
                    how: Optional[CloneSettings] = None) -> List[Step]:
        """Steps that clone ``source`` into ``options.work_prefix`` (then install the spec's extras,
        when ``spec`` is given: ``create --clone``; ``envtool clone`` passes None).

        Raises:
            UsageError: the engine cannot clone.
        """
        raise UsageError(f"the {self.name} engine cannot clone; use a conda spec or --engine rattler")

    def locked_steps(self, spec: Spec, options: PlanOptions, lock: LockInstall) -> List[Step]:
        """Steps that create ``options.work_prefix`` holding exactly the lock's packages this engine
        manages (the pip entries are installed after them by the steps layer, for every engine).

        Raises:
            UsageError: the lock holds packages this engine cannot install (exit 2).
        """
        raise UsageError(f"{lock.path}: the {self.name} engine cannot install a lockfile; use --resolve")

    def lock_python(self, spec: Spec) -> Optional[str]:
        """The interpreter whose pip resolves the spec's pip packages for a lock of this machine
        (``envtool lock``), or None when the engine's own solve provides Python (conda).

        Raises:
            UsageError: the spec pins a Python this machine lacks.
        """
        return None

    def probe_tools(self) -> Dict[str, str]:
        """The executables this engine drives, name → absolute path, as found on this machine now (a
        missing one is left out). Called once before planning (:func:`envtool.steps.kernel.machine.probe`);
        the steps read the result from ``options.machine``. Default: none."""
        return {}

    def holds(self, prefix: Path) -> bool:
        """Whether ``prefix`` is an environment this engine's kind makes (reads the prefix; used when
        a lock is made from a prefix without its spec)."""
        return False

    @abstractmethod
    def installed(self, prefix: Path) -> List[InstalledPackage]:
        """Packages installed in ``prefix`` (reads metadata; runs nothing heavy)."""

    @staticmethod
    def python(prefix: Path) -> Path:
        """The environment's interpreter (:attr:`envtool.core.prefix.PrefixData.python`)."""
        return PrefixData(Path(prefix)).python


def active_prefix() -> Optional[Path]:
    """The active environment: ``$CONDA_PREFIX``, else ``$VIRTUAL_ENV``, else None."""
    for var in ("CONDA_PREFIX", "VIRTUAL_ENV"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return None
