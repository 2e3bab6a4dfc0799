"""The rattler engine: embedded py-rattler solves and installs conda packages (the default for
``engine: conda`` specs), clones conda environments (:mod:`envtool.engines.clone_steps`), and
installs a lock's conda records exactly.

The py-rattler calls themselves are in :mod:`envtool.engines.rattler_api`.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envtool.core.errors import EnvtoolError, StepFailed, UsageError
from envtool.core.plan import PlanOptions, Step, StepContext
from envtool.engines.base import CloneSettings, Engine, InstalledPackage, LockInstall
from envtool.engines.clone_steps import clone_source_steps
from envtool.engines.pip import spec_pip_steps
from envtool.engines.venv import create_venv_step
from envtool.engines.rattler_api import (run_sync, install_records, package_cache, parse_virtual_packages, platform_for,
                                         quote_path as _q, read_prefix_records, solve_records, spec_virtual_packages)
from envtool.spec.channels import expand
from envtool.spec.model import Spec
from envtool.core.prefix import PrefixData


@dataclass(frozen=True)
class SolveData:
    """Payload of the py-rattler solve-and-install steps (``conda-create``, ``conda-install-extra``,
    ``conda-install-build``, ``conda-remove-build``).

    Attributes:
        channels: channel URLs, highest priority first (expanded).
        specs: conda match specs.
        platform: the target platform.
        virtual_packages: name -> ``VERSION[=BUILD]`` for the solve.
        prefix: the prefix installed into (the build prefix).
        final_prefix: the prefix written into files with placeholders.
        added: shared between ``conda-install-build`` and ``conda-remove-build`` of one plan: the
            names of the records the first added (``{"names": [...]}``), for the second to remove.
    """

    channels: Tuple[str, ...]
    specs: Tuple[str, ...]
    platform: str
    virtual_packages: Dict[str, str]
    prefix: str
    final_prefix: str
    added: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PrefixStepData:
    """Payload of ``conda-remove-horovod``: the build prefix, the final prefix and the platform."""

    prefix: str
    final_prefix: str
    platform: str


@dataclass(frozen=True)
class LockedCondaData:
    """Payload of ``install-locked-conda``: the lock's conda entries and where they go.

    Attributes:
        lock: the lock (its entries, channels, platform and record lookup).
        prefix: the prefix installed into.
        target_prefix: the prefix written into files with placeholders.
    """

    lock: LockInstall
    prefix: str
    target_prefix: str


class RattlerEngine(Engine):
    """The embedded conda engine: py-rattler solves and installs; clones read-only envs."""

    name = "rattler"
    summary = "embedded py-rattler (default for conda specs)"
    spec_engine = "conda"
    install_step_ids = frozenset({"conda-create", "conda-install-extra", "pip-install", "install-locked-conda"})

    def create_steps(self, spec: Spec, options: PlanOptions) -> List[Step]:
        """``conda-create`` (py-rattler solve + install, final prefix written into placeholders), then
        ``pip-install`` with the env's pip when ``packages.pip`` is non-empty.

        Raises:
            UsageError: the spec lists no conda packages.
        """
        if not spec.packages.conda:
            raise UsageError(f"spec {spec.name!r} uses the conda engine but lists no conda packages "
                             "(packages.conda)")
        platform = platform_for(spec)
        vps = spec_virtual_packages(spec, platform)
        specs = [p.value for p in spec.packages.conda]
        if spec.python is not None and not any(s.split()[0] == "python" for s in specs):
            specs.append("python " + spec.python.value.strip())
        prefix = Path(options.work_prefix)
        channels = expand(spec.channels, platform)
        steps = [Step(
            id="conda-create", title=f"Solve and install {len(specs)} conda specs for {platform} with py-rattler",
            commands=(("#", f"py-rattler solve {shlex.join(specs)} from {shlex.join(channels)} for {platform} "
                            f"with virtual packages {shlex.join(k + '=' + v for k, v in vps.items())}"),
                      ("#", f"py-rattler install into {_q(prefix)} (package cache {_q(package_cache())}, "
                            f"prefix written into files: {_q(options.prefix)})")),
            action=_create_action,
            data=SolveData(channels=tuple(channels), specs=tuple(specs), platform=platform, virtual_packages=vps,
                           prefix=str(prefix), final_prefix=str(options.prefix)))]
        return steps + spec_pip_steps(spec, prefix, options)

    def clone_steps(self, spec: Optional[Spec], source: str, options: PlanOptions,
                    how: Optional[CloneSettings] = None) -> List[Step]:
        """The clone path (:func:`envtool.engines.clone_steps.clone_source_steps`), then, for
        ``create --clone``, the spec's conda packages the clone lacks, its pip packages and, when
        Horovod is rebuilt with pip, the removal of the clone's conda ``horovod``.

        Raises:
            UsageError: the source cannot be found or is not an environment.
        """
        prefix = Path(options.work_prefix)
        steps = clone_source_steps(source, options, how or CloneSettings())
        if spec is not None:
            steps += _extra_conda_steps(spec, prefix, options.prefix) + spec_pip_steps(spec, prefix, options)
            if spec.horovod.install == "pip-build":
                steps += _drop_conda_horovod_steps(spec, prefix, options.prefix)
        return steps

    def locked_steps(self, spec: Spec, options: PlanOptions, lock: LockInstall) -> List[Step]:
        """``install-locked-conda``: the lock's conda records looked up by URL (no solve) and installed
        with py-rattler; a lock without conda entries makes a venv (:func:`create_venv_step`)."""
        conda = lock.managed("conda")
        if not conda:
            return [create_venv_step(spec, options, notes=lock.notes)]
        prefix = Path(options.work_prefix)
        return [Step(
            id="install-locked-conda", title=f"Install {len(conda)} locked conda packages ({lock.platform}) with py-rattler",
            commands=(("#", f"look up the {len(conda)} locked records by URL in their channels (no solve)"),
                      ("#", "py-rattler install into " + shlex.quote(str(prefix)))),
            notes=lock.notes, action=_install_locked_conda,
            data=LockedCondaData(lock=lock, prefix=str(prefix), target_prefix=str(options.prefix)))]

    def holds(self, prefix: Path) -> bool:
        """A conda prefix: it has ``conda-meta/``."""
        return PrefixData(Path(prefix)).is_conda

    def installed(self, prefix: Path) -> List[InstalledPackage]:
        """conda records then the distributions pip installed (not conda's), as
        :class:`~envtool.core.prefix.PrefixData` reads them."""
        from envtool.core.prefix import PrefixData

        data = PrefixData(prefix)
        out = [InstalledPackage(name=r.name.normalized, version=str(r.version), manager="conda", build=str(r.build),
                                url=str(r.url), sha256=r.sha256.hex() if r.sha256 else "")
               for r in sorted(data.read_conda_records(strict=True), key=lambda r: r.name.normalized)]
        out += [InstalledPackage(name=d.name, version=d.version, manager="pip") for d in data.pip_installed()]
        return out


def _install_locked_conda(step: Step, runner: StepContext) -> None:
    d: LockedCondaData = step.data
    lock = d.lock
    if lock.lookup is None:
        raise StepFailed(step.id, "no way to look the locked conda records up was given", runner.log_path)
    try:
        records = lock.lookup(lock.managed("conda"), lock.channels, lock.platform, runner.note)
        install_records(records, Path(d.prefix), package_cache(), target_prefix=Path(d.target_prefix),
                        progress=runner.note)
    except StepFailed:
        raise
    except EnvtoolError as exc:
        raise StepFailed(step.id, str(exc), runner.log_path) from None


def _create_action(step: Step, runner: StepContext) -> dict:
    d: SolveData = step.data
    try:
        runner.progress(f"      solving {' '.join(d.specs)} ({d.platform})")
        records = solve_records(list(d.channels), list(d.specs), d.platform,
                                virtual_packages=d.virtual_packages)
        runner.note("solved: " + ", ".join(f"{r.name.normalized} {r.version} {r.build}" for r in records))
        install_records(records, Path(d.prefix), package_cache(), target_prefix=Path(d.final_prefix),
                        platform=d.platform, progress=runner.progress)
    except StepFailed:
        raise
    except EnvtoolError as exc:
        raise StepFailed(step.id, str(exc), runner.log_path) from None
    return {"packages": len(records), "platform": d.platform}


def _extra_conda_steps(spec: Spec, prefix: Path, final_prefix: Path) -> List[Step]:
    """Install the spec's conda packages that the clone does not already satisfy (decided when it runs)."""
    if not spec.packages.conda or not spec.channels:
        return []
    platform = platform_for(spec)
    channels = expand(spec.channels, platform)
    return [Step(id="conda-install-extra", title="Install the spec's conda packages the clone lacks",
                 commands=(("#", "py-rattler solve, from " + shlex.join(channels) + f" for {platform}, the "
                                 "specs not met by the clone's records (" + shlex.join(p.value for p in spec.packages.conda)
                                 + "), with those records pinned; install the additions"),),
                 action=_extra_action,
                 data=SolveData(channels=tuple(channels), specs=tuple(p.value for p in spec.packages.conda),
                                platform=platform, virtual_packages=spec_virtual_packages(spec, platform),
                                prefix=str(prefix), final_prefix=str(final_prefix)))]


def _extra_action(step: Step, runner: StepContext) -> None:
    import rattler

    d: SolveData = step.data
    have = read_prefix_records(Path(d.prefix))
    missing = [s for s in d.specs if not any(rattler.MatchSpec(s).matches(r) for r in have)]
    if not missing:
        runner.note("the clone already satisfies every conda spec")
        return
    try:
        added = run_sync(rattler.solve(sources=list(d.channels), specs=[rattler.MatchSpec(s) for s in missing],
                                   platforms=[rattler.Subdir(d.platform), rattler.Subdir("noarch")], pinned_packages=have,
                                   virtual_packages=parse_virtual_packages(d.virtual_packages, d.platform)))
        # py-rattler's install makes the prefix hold exactly the records given: pass the whole env
        merged = {r.name.normalized: r for r in have}
        merged.update({r.name.normalized: r for r in added})
        runner.note("adding: " + ", ".join(f"{r.name.normalized} {r.version} {r.build}" for r in added
                                           if r.name.normalized not in {h.name.normalized for h in have}))
        install_records(list(merged.values()), Path(d.prefix), package_cache(),
                        target_prefix=Path(d.final_prefix), platform=d.platform, progress=runner.progress)
    except EnvtoolError as exc:
        raise StepFailed(step.id, str(exc), runner.log_path) from None
    except Exception as exc:
        raise StepFailed(step.id, f"cannot add {' '.join(missing)} to the clone: {exc}", runner.log_path) from None


def build_package_steps(spec: Spec, prefix: Path, final_prefix: Path) -> Tuple[List[Step], List[Step]]:
    """The steps around the Horovod build for ``horovod.build_packages``: ``conda-install-build``
    (before) adds the build-only packages the environment lacks, solved from the spec's channels
    with the environment's records pinned; ``conda-remove-build`` (after) removes exactly the
    records that step added, so neither the environment nor its lockfile keeps them. This is
    OLCF's WML-CE 1.6.2 recipe: ``conda install gxx_linux-ppc64le=7.3.0``, the pip build,
    ``conda remove gxx_linux-ppc64le`` (olcf/olcf-user-docs@f674c627dd63:
    software/analytics/ibm-wml-ce.rst#L153-L155).

    Args:
        spec: the resolved spec (engine ``conda``).
        prefix: the environment being made (the build prefix).
        final_prefix: where it will live (written into files with prefix placeholders).
    Returns:
        ``(before, after)``; both empty when the spec has no build packages.
    """
    pins = spec.horovod.build_packages
    if not pins:
        return [], []
    platform = platform_for(spec)
    channels = expand(spec.channels, platform)
    specs = tuple(p.value for p in pins)
    # one payload for both steps: ``added`` carries the records the first added to the second
    data = SolveData(channels=tuple(channels), specs=specs, platform=platform,
                     virtual_packages=spec_virtual_packages(spec, platform), prefix=str(prefix),
                     final_prefix=str(final_prefix))
    before = Step(id="conda-install-build", title="Install the Horovod build's build-only conda packages: "
                  + " ".join(specs),
                  commands=(("#", "py-rattler solve, from " + shlex.join(channels) + f" for {platform}, "
                                  + shlex.join(specs) + " with the environment's records pinned; install the "
                                  "additions (removed again after the build)"),),
                  notes=("horovod.build_packages: needed to build Horovod, not kept in the environment",),
                  action=_install_build_action, data=data)
    after = Step(id="conda-remove-build", title="Remove the build-only conda packages added for the Horovod build",
                 commands=(("#", "py-rattler: remove the records conda-install-build added (" + shlex.join(specs)
                                 + " and what they pulled in); the rest of the environment stays as it was"),),
                 action=_remove_build_action, data=data)
    return [before], [after]


def _install_build_action(step: Step, runner: StepContext) -> dict:
    """Action of ``conda-install-build``; returns ``{"added": [name, …]}`` (sorted)."""
    import rattler

    d: SolveData = step.data
    have = read_prefix_records(Path(d.prefix))
    missing = [s for s in d.specs if not any(rattler.MatchSpec(s).matches(r) for r in have)]
    d.added["names"] = []
    if not missing:
        runner.note("the environment already has every build-only package; nothing to add or remove")
        return {"added": []}
    try:
        solved = run_sync(rattler.solve(sources=list(d.channels), specs=[rattler.MatchSpec(s) for s in missing],
                                    platforms=[rattler.Subdir(d.platform), rattler.Subdir("noarch")], pinned_packages=have,
                                    virtual_packages=parse_virtual_packages(d.virtual_packages, d.platform)))
        before = {r.name.normalized for r in have}
        merged = {r.name.normalized: r for r in have}
        merged.update({r.name.normalized: r for r in solved})
        added = sorted(n for n in merged if n not in before)
        runner.note("adding for the build: " + ", ".join(f"{merged[n].name.normalized} {merged[n].version} "
                                                         f"{merged[n].build}" for n in added))
        # recorded before the install, so that a failed install is undone by the transaction, not half-known here
        d.added["names"] = added
        install_records(list(merged.values()), Path(d.prefix), package_cache(),
                        target_prefix=Path(d.final_prefix), platform=d.platform, progress=runner.progress)
    except EnvtoolError as exc:
        raise StepFailed(step.id, str(exc), runner.log_path) from None
    except Exception as exc:
        raise StepFailed(step.id, f"cannot add the build-only packages {' '.join(missing)}: {exc}",
                         runner.log_path) from None
    return {"added": added}


def _remove_build_action(step: Step, runner: StepContext) -> dict:
    """Action of ``conda-remove-build``; returns ``{"removed": [name, …]}``."""
    d: SolveData = step.data
    names = set(d.added.get("names") or ())
    if not names:
        runner.note("nothing was added for the build")
        return {"removed": []}
    have = read_prefix_records(Path(d.prefix))
    keep = [r for r in have if r.name.normalized not in names]
    runner.note("removing the build-only packages: " + ", ".join(sorted(names)))
    try:
        install_records(keep, Path(d.prefix), package_cache(), target_prefix=Path(d.final_prefix),
                        platform=d.platform, progress=runner.progress)
    except EnvtoolError as exc:
        raise StepFailed(step.id, str(exc), runner.log_path) from None
    return {"removed": sorted(names)}


def _drop_conda_horovod_steps(spec: Spec, prefix: Path, final_prefix: Path) -> List[Step]:
    """When Horovod is rebuilt with pip in a clone, the clone's conda ``horovod`` package is removed
    first with py-rattler (its files and its ``conda-meta`` record), so conda's and pip's views of
    the environment agree; decided when it runs (a source without one needs nothing)."""
    return [Step(id="conda-remove-horovod", title="Remove the clone's conda horovod package (Horovod is rebuilt with pip)",
                 commands=(("#", f"py-rattler install the clone's records without horovod into {_q(prefix)} "
                                 "(removes its files and conda-meta record)"),),
                 action=_drop_conda_horovod, data=PrefixStepData(prefix=str(prefix), final_prefix=str(final_prefix),
                                                           platform=platform_for(spec)))]


def _drop_conda_horovod(step: Step, runner: StepContext) -> dict:
    """Action of ``conda-remove-horovod``; returns ``{"removed": "horovod VERSION BUILD" or None}``."""
    d: PrefixStepData = step.data
    have = read_prefix_records(Path(d.prefix))
    gone = [r for r in have if r.name.normalized == "horovod"]
    if not gone:
        runner.note("the clone has no conda horovod package")
        return {"removed": None}
    needs = [r.name.normalized for r in have if r.name.normalized != "horovod"
             and any(str(dep).split()[0] == "horovod" for dep in r.depends)]
    if needs:
        raise StepFailed(step.id, "the clone's conda packages " + ", ".join(needs) + " depend on conda's horovod; "
                         "it cannot be replaced by a pip build (set horovod.install: conda, or drop them)",
                         runner.log_path)
    label = f"horovod {gone[0].version} {gone[0].build}"
    runner.note(f"removing conda's {label}")
    try:
        install_records([r for r in have if r.name.normalized != "horovod"], Path(d.prefix), package_cache(),
                        target_prefix=Path(d.final_prefix), platform=d.platform, progress=runner.progress)
    except EnvtoolError as exc:
        raise StepFailed(step.id, str(exc), runner.log_path) from None
    return {"removed": label}
