"""A toy engine kept in the tests: proof that a new engine is one file plus one registration call.

It "installs" a lockfile's pip entries by writing one ``.dist-info`` directory per entry (the
``METADATA`` and ``INSTALLER`` files of the core metadata and recording-installed-packages
specifications: https://packaging.python.org/en/latest/specifications/recording-installed-packages/)
into ``PREFIX/lib/toy/site-packages``, after a real ``python -m venv --without-pip`` made the
prefix. Nothing is downloaded; every step runs for real through the runner's context.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from envtool.core.errors import UsageError
from envtool.core.plan import PlanOptions, Step, StepContext
from envtool.engines.base import Engine, InstalledPackage, LockInstall
from envtool.engines.registry import register
from envtool.spec.model import Spec

#: Where the toy engine records what it installed, relative to the prefix.
TOY_SITE = Path("lib") / "toy" / "site-packages"


@dataclass(frozen=True)
class ToyInstall:
    """Payload of ``toy-install``: ``(name, version)`` pairs and the prefix."""

    packages: Tuple[Tuple[str, str], ...]
    prefix: str


class ToyEngine(Engine):
    """A venv made without pip; packages recorded as ``.dist-info`` directories (no files)."""

    name = "toy"
    summary = "test-only toy engine (records packages, installs no files)"
    spec_engine = "venv"
    install_step_ids = frozenset({"toy-install"})

    def _steps(self, options: PlanOptions, packages: Tuple[Tuple[str, str], ...], notes: Tuple[str, ...] = ()
               ) -> List[Step]:
        prefix = str(options.work_prefix)
        return [Step(id="toy-venv", title=f"Create a bare venv at {options.prefix}",
                     commands=((sys.executable, "-m", "venv", "--without-pip", prefix),), notes=notes),
                Step(id="toy-install", title=f"Record {len(packages)} packages",
                     commands=(("#", "write a .dist-info per package"),), action=_install,
                     data=ToyInstall(packages=packages, prefix=prefix))]

    def create_steps(self, spec: Spec, options: PlanOptions) -> List[Step]:
        """``toy-venv`` then ``toy-install`` of the spec's pip requirements' names (version ``0``).

        Raises:
            UsageError: the spec lists conda packages.
        """
        if spec.packages.conda:
            raise UsageError(f"spec {spec.name!r} lists conda packages; the toy engine records pip packages only")
        return self._steps(options, tuple((p.name or p.value, "0") for p in spec.packages.pip))

    def locked_steps(self, spec: Spec, options: PlanOptions, lock: LockInstall) -> List[Step]:
        """``toy-venv`` then ``toy-install`` of exactly the lock's pip entries.

        Raises:
            UsageError: the lock has conda entries.
        """
        if lock.managed("conda"):
            raise UsageError(f"{lock.path}: the toy engine installs no conda packages")
        return self._steps(options, tuple((p.name, p.version) for p in lock.managed("pip")), lock.notes)

    def lock_python(self, spec: Spec) -> Optional[str]:
        """This interpreter."""
        return sys.executable

    def holds(self, prefix: Path) -> bool:
        """A prefix with the toy engine's site directory."""
        return (Path(prefix) / TOY_SITE).is_dir()

    def installed(self, prefix: Path) -> List[InstalledPackage]:
        """The recorded packages, read back from their ``METADATA``."""
        out = []
        for meta in sorted((Path(prefix) / TOY_SITE).glob("*.dist-info/METADATA")):
            fields = dict(line.split(": ", 1) for line in meta.read_text().splitlines() if ": " in line)
            out.append(InstalledPackage(name=fields["Name"], version=fields["Version"], manager="pip"))
        return out


def _install(step: Step, context: StepContext) -> dict:
    d: ToyInstall = step.data
    site = Path(d.prefix) / TOY_SITE
    site.mkdir(parents=True, exist_ok=True)
    for name, version in d.packages:
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "INSTALLER").write_text("toy\n")
        context.note(f"recorded {name} {version}")
    return {"recorded": len(d.packages)}


register(ToyEngine)
