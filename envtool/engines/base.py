"""The engine interface shared by the venv/pip and conda engines.

An engine turns a spec into plan steps (plain data with an ``action``) and answers questions
about an existing prefix. It does no I/O when planning.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from envtool.spec.model import Spec
from envtool.core.plan import PlanOptions, Step


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


class Engine(ABC):
    """What every engine provides."""

    #: engine id as used by ``--engine`` and ``spec.engine``.
    name: str = ""

    @abstractmethod
    def create_steps(self, spec: Spec, options: PlanOptions) -> List[Step]:
        """Steps that create ``options.work_prefix`` and install the spec's packages."""

    def clone_steps(self, spec: Spec, source: str, options: PlanOptions) -> List[Step]:
        """Steps that clone ``source`` into ``options.work_prefix`` (then install the spec's extras).

        Raises:
            UsageError: the engine cannot clone.
        """
        from envtool.core.errors import UsageError

        raise UsageError(f"the {self.name} engine cannot clone; use a conda spec or engine")

    @abstractmethod
    def installed(self, prefix: Path) -> List[InstalledPackage]:
        """Packages installed in ``prefix`` (reads metadata; runs nothing heavy)."""

    @staticmethod
    def python(prefix: Path) -> Path:
        """The environment's interpreter (``bin/python``)."""
        return Path(prefix) / "bin" / "python"


def get_engine(name: str) -> Engine:
    """The engine for ``name`` (``venv``; ``conda`` means py-rattler unless an external tool is named).

    Raises:
        UsageError: unknown engine name.
    """
    from envtool.core.errors import UsageError

    if name == "venv":
        from envtool.engines.venv import VenvEngine

        return VenvEngine()
    if name in ("conda", "rattler"):
        from envtool.engines import conda as conda_engine

        return conda_engine.RattlerEngine()
    if name in ("conda-external", "mamba", "micromamba"):
        from envtool.engines import conda as conda_engine

        return conda_engine.ExternalCondaEngine(name if name != "conda-external" else "conda")
    raise UsageError(f"unknown engine {name!r}: expected venv, rattler, conda, mamba or micromamba")


def active_prefix() -> Optional[Path]:
    """The active environment: ``$CONDA_PREFIX``, else ``$VIRTUAL_ENV``, else None."""
    for var in ("CONDA_PREFIX", "VIRTUAL_ENV"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return None
