"""Deciding what publishing each spec does, touching nothing (:mod:`envtool.steps.publish`)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from envtool.core.errors import UsageError
from envtool.core.plan import PlanOptions
from envtool.core.targets import check_replaceable
from envtool.modules import ModuleContent
from envtool.spec.model import Spec
from envtool.steps.publish.model import MARKER

if TYPE_CHECKING:
    from envtool.core.plan import Plan


def module_version(spec: Spec, now: Optional[float] = None) -> str:
    """The version a stack is published under: the spec's ``distribution.version``, else the
    day (UTC, ``YYYY.MM.DD``)."""
    from envtool.modules.content import NAME_RE

    version = spec.distribution.version or time.strftime("%Y.%m.%d", time.gmtime(now))
    if not NAME_RE.match(version) or version == "default":
        raise UsageError(f"{spec.path}: distribution.version {version!r} cannot be a module version "
                         "(letters, digits and . _ + -)")
    return version


@dataclass(frozen=True)
class Stack:
    """One spec's publication, decided before anything is touched (:func:`prepare`).

    Attributes:
        spec: the resolved spec; version: the module version; target: ``ROOT/NAME/VERSION``;
        sbom: ``ROOT/NAME/VERSION.cdx.json``; modulefile: its path in the module tree.
        action: ``published`` (new), ``replaced`` (``force``) or ``unchanged``.
        options: how ``create`` builds it; None when ``action`` is ``unchanged`` (nothing is built).
        create_plan: the plan ``create`` makes for ``target`` (:func:`envtool.steps.create.planner.make_plan`,
            as ``envtool plan`` shows it), or None when nothing is built.
    """

    spec: Spec
    version: str
    target: Path
    sbom: Path
    modulefile: Path
    action: str
    options: Optional[PlanOptions]
    create_plan: Optional["Plan"] = None

    @property
    def module(self) -> str:
        """``NAME/VERSION``."""
        return f"{self.spec.name}/{self.version}"


def _check_target(target: Path, force: bool) -> bool:
    """Whether ``target`` holds a publish record; refuses what publish may not replace (see :func:`prepare`)."""
    if os.path.islink(target):
        raise UsageError(f"{target} is a symbolic link, not a published environment; publish never replaces "
                         "or follows one (move it away)")
    published = (target / MARKER).is_file() and not (target / MARKER).is_symlink()
    if os.path.lexists(target) and not published and not force:
        raise UsageError(f"{target} exists but was not published by envtool (no {MARKER}: another "
                         "tool's, or a publish that was interrupted); move it away, or pass --force to "
                         "rebuild and replace it")
    if os.path.lexists(target) and force:
        check_replaceable(target, option="publish target")  # --force replaces only an environment
    return published


def _check_modulefile(spec: Spec, version: str, target: Path, modulefiles: Path, fmt: str, force: bool) -> Path:
    """The modulefile's path; refuses one publish did not write, or one in the other format (without ``force``)."""
    from envtool.modules import modulefile_path, other_format, other_format_message

    stub = ModuleContent(name=spec.name, version=version, prefix=str(target), kind="prefix")
    modulefile = modulefile_path(modulefiles, stub, fmt)
    if not os.path.lexists(target) and os.path.lexists(modulefile) and not force:
        raise UsageError(f"{modulefile} exists but {target} does not: a modulefile publish did not write; move "
                         "it away, or pass --force to replace it")
    found = other_format(modulefiles, stub, fmt)
    if found is not None and not force:
        other, other_writer = found
        raise UsageError(f"{other_format_message(other, other_writer, f'{spec.name}/{version}')}: publish with "
                         f"--format {other_writer.name}, or pass --force to replace it")
    return modulefile


def _build_options(spec: Spec, target: Path, clone_site_base: bool, lock: Optional[Path], resolve: bool,
                   installer: str) -> PlanOptions:
    """How ``create`` builds ``target``: the spec's lock exactly, as ``create`` decides
    (:func:`envtool.steps.create.from_lock.choose`), unless ``resolve`` or a clone of the site's base."""
    from envtool.steps.create.from_lock import choose

    clone = bool(clone_site_base and spec.site.base_env)
    if clone and lock is not None:
        raise UsageError(f"--lock: spec {spec.name} is cloned from site {spec.site.name}'s base environment "
                         f"({spec.site.base_env}), which no lock describes; publish it without --site, or "
                         "without --lock")
    choice = choose(spec, explicit=Path(lock) if lock else None, resolve=resolve, clone=clone)
    return PlanOptions(prefix=target, clone="" if clone else None, from_lock=choice.path,
                       lock_reason=choice.reason, cpu_count=os.cpu_count() or 2, site=spec.site.name,
                       installer=installer,
                       link_files=False)  # its files' mode and group change: no shared inodes


def prepare(spec: Spec, root: Path, modulefiles: Path, fmt: str, force: bool, clone_site_base: bool,
            lock: Optional[Path], resolve: bool, installer: str) -> Stack:
    """Decide what publishing ``spec`` does, touching nothing: the target, whether it is new,
    replaced or already published, the packages (:func:`_build_options`) and the plan ``create``
    makes for it (previewed, as ``envtool plan`` makes it).

    Raises:
        UsageError: a target or modulefile that publish did not make (without ``force``), a
            symlinked target, with ``force`` a target that is not an environment
            (:func:`envtool.core.targets.check_replaceable`), a lock that cannot install the spec
            here (exit 2).
    """
    from dataclasses import replace

    from envtool.steps.create.planner import make_plan

    version = module_version(spec)
    target = root / spec.name / version
    published = _check_target(target, force)
    modulefile = _check_modulefile(spec, version, target, modulefiles, fmt, force)
    sbom = root / spec.name / f"{version}.cdx.json"
    if published and not force:
        return Stack(spec, version, target, sbom, modulefile, "unchanged", None)
    options = _build_options(spec, target, clone_site_base, lock, resolve, installer)
    plan = make_plan(spec, replace(options, preview=True))
    return Stack(spec, version, target, sbom, modulefile, "replaced" if os.path.lexists(target) else "published",
                 options, plan)
