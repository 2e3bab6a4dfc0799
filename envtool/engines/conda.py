"""The conda engines: embedded py-rattler (default) and an external ``conda``/``mamba``/``micromamba``.

:func:`solve_records` and :func:`install_records` are the two py-rattler entry points the rest
of envtool uses (``envtool.lock`` imports them too); their signatures are stable.
py-rattler is imported lazily inside functions.

Solving is for a target platform with an explicit set of virtual packages (``__glibc``,
``__cuda``, ``__archspec`` …) so a ``linux-ppc64le`` + CUDA 10.2 environment can be solved on an
x86 laptop. Installing links from a writable package cache; the prefix written into files
with prefix placeholders can differ from the directory installed into
(``alternative_target_prefix``), which is how ``create`` builds in a temporary sibling and
still gets conda's binary-prefix replacement right for the final prefix.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from envtool.engines.base import Engine, InstalledPackage
from envtool.core.errors import EnvtoolError, StepFailed, UsageError
from envtool.spec.channels import expand
from envtool.spec.model import Spec
from envtool.core.plan import PlanOptions, Step


def _q(value) -> str:
    """``value`` (a path or string) shell-quoted, for the ``#`` lines ``plan`` prints."""
    return shlex.quote(str(value))

#: glibc assumed when solving for Linux without an override: 2.17, the manylinux2014 floor
#: conda-forge builds against (conda-forge docs, "Using a newer glibc").
DEFAULT_GLIBC = "2.17"
_ARCHSPEC = {"linux-64": "x86_64", "linux-ppc64le": "ppc64le", "linux-aarch64": "aarch64"}

VirtualPackages = Union[Sequence[str], Mapping[str, str], None]


def _run(coro_or_value):
    """Await a py-rattler coroutine from synchronous code (values pass through)."""
    if asyncio.iscoroutine(coro_or_value) or isinstance(coro_or_value, asyncio.Future):
        return asyncio.run(coro_or_value)
    return coro_or_value


def default_virtual_packages(platform: str) -> Dict[str, str]:
    """The virtual packages assumed for ``platform``: name → ``version`` or ``version=build``.

    Linux: ``__unix``, ``__linux=5.10``, ``__glibc=2.17`` and ``__archspec=1=<arch>``
    (x86_64, ppc64le, aarch64). No ``__cuda``: pass it (``__cuda=10.2``) for GPU stacks.
    """
    out: Dict[str, str] = {}
    if platform.startswith("linux-"):
        out.update({"__unix": "0", "__linux": "5.10", "__glibc": DEFAULT_GLIBC})
        if platform in _ARCHSPEC:
            out["__archspec"] = "1=" + _ARCHSPEC[platform]
    elif platform.startswith("osx-"):
        out.update({"__unix": "0", "__osx": "11.0"})
    return out


def parse_virtual_packages(virtual_packages: VirtualPackages, platform: str) -> List[Any]:
    """``GenericVirtualPackage`` objects for a solve.

    Args:
        virtual_packages: None (the defaults of :func:`default_virtual_packages`), a list of
            ``NAME=VERSION[=BUILD]`` strings (``__glibc=2.28``, ``__cuda=10.2``,
            ``__archspec=1=ppc64le``), or a mapping NAME → ``VERSION[=BUILD]``. A given list or
            mapping is the complete set (nothing is added to it).
        platform: the target platform (for the defaults).
    Returns:
        a list of ``rattler.GenericVirtualPackage``.
    Raises:
        UsageError: an entry that is not ``__name=version[=build]``.
    """
    from rattler import BuildString, GenericVirtualPackage, PackageName, Version

    if virtual_packages is None:
        items = list(default_virtual_packages(platform).items())
    elif isinstance(virtual_packages, Mapping):
        items = list(virtual_packages.items())
    else:
        items = []
        for entry in virtual_packages:
            name, sep, rest = str(entry).partition("=")
            if not sep:
                raise UsageError(f"virtual package {entry!r}: expected NAME=VERSION[=BUILD], e.g. __cuda=10.2")
            items.append((name, rest))
    out = []
    for name, value in items:
        version, _, build = str(value).partition("=")
        if not name.startswith("__") or not version:
            raise UsageError(f"virtual package {name}={value}: expected __NAME=VERSION[=BUILD], e.g. __glibc=2.28")
        try:
            out.append(GenericVirtualPackage(PackageName(name), Version(version), BuildString(build or "0")))
        except Exception as exc:  # rattler raises its own parse errors
            raise UsageError(f"virtual package {name}={value}: {exc}") from None
    return out


def solve_records(channels: List[str], specs: List[str], platform: str,
                  virtual_packages: VirtualPackages = None, cache_dir: Optional[Path] = None) -> list:
    """Solve conda match specs with py-rattler for one platform.

    Args:
        channels: channel names or URLs (``conda-forge``, ``file:///tmp/ch``), highest priority
            first (strict channel priority); ``defaults`` is expanded as conda means it
            (:func:`envtool.spec.channels.expand`).
        specs: conda match specs (``pytorch-base 1.7.1.*``).
        platform: target platform (``linux-64``, ``linux-ppc64le``); ``noarch`` is added.
        virtual_packages: see :func:`parse_virtual_packages` (None: defaults for ``platform``).
        cache_dir: repodata cache (default ``<envtool cache>/repodata``).
    Returns:
        a list of ``rattler.RepoDataRecord`` (topologically sorted, dependencies first).
    Raises:
        UsageError: no channels, or a malformed match spec / virtual package.
        EnvtoolError: the solve failed (unsatisfiable, channel unreachable) — message from py-rattler.
    """
    import rattler

    if not channels:
        raise UsageError("solving conda packages needs at least one channel (spec field `channels`)")
    channels = expand(channels, platform)
    vps = parse_virtual_packages(virtual_packages, platform)
    if cache_dir is None:
        from envtool.core.paths import cache_dir as own_cache_dir

        cache_dir = own_cache_dir("repodata")
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    try:
        match_specs = [rattler.MatchSpec(s) for s in specs]
    except Exception as exc:
        raise UsageError(f"conda match spec: {exc}") from None
    gateway = rattler.Gateway(cache_dir=str(cache_dir))
    try:
        records = _run(rattler.solve(sources=list(channels), specs=match_specs, gateway=gateway,
                                     platforms=[platform, "noarch"], virtual_packages=vps))
    except Exception as exc:
        raise EnvtoolError(f"cannot solve {' '.join(specs)} for {platform} from {', '.join(channels)}: "
                           f"{str(exc).strip()}") from None
    return sort_records_topologically(records)


def sort_records_topologically(records: Sequence[Any]) -> list:
    """``records`` (``rattler.RepoDataRecord``) ordered dependencies first, still as RepoDataRecords.

    ``rattler.PackageRecord.sort_topologically`` (py-rattler 0.2x) returns ``PackageRecord``
    wrappers that hide ``url`` and ``channel``; its order is kept and mapped back onto the
    original records by (name, version, build).

    Args:
        records: solved records, each with ``name``, ``version``, ``build``.
    Returns:
        the same record objects, dependencies before their dependents; the input order when
        py-rattler cannot sort them (a dependency cycle).
    """
    import rattler

    records = list(records)
    try:
        order = rattler.PackageRecord.sort_topologically(records)
    except Exception:
        return records
    by_key = {(r.name.normalized, str(r.version), r.build): r for r in records}
    out = [by_key.pop((o.name.normalized, str(o.version), o.build), None) for o in order]
    out = [r for r in out if r is not None]
    return out + list(by_key.values())


class _Progress:
    """An ``InstallerReporter`` that turns py-rattler's callbacks into progress lines."""

    def __new__(cls, callback: Callable[[str], None]):
        import rattler

        class Reporter(rattler.InstallerReporter):
            def __init__(self):
                self.total = 0
                self.done = 0
                self.downloads = 0

            def on_transaction_start(self, total_operations: int) -> None:
                self.total = total_operations
                callback(f"linking {total_operations} packages")

            def on_download_start(self, cache_entry: int) -> int:
                self.downloads += 1
                return cache_entry

            def on_transaction_operation_complete(self, operation: int) -> None:
                self.done += 1
                if self.total and (self.done == self.total or self.done % max(1, self.total // 10) == 0):
                    callback(f"  {self.done}/{self.total} packages linked ({self.downloads} fetched)")

        return Reporter()


def install_records(records: Sequence[Any], prefix: Path, cache_dir: Path, *,
                    target_prefix: Optional[Path] = None, read_only_caches: Sequence[Path] = (),
                    platform: Optional[str] = None, progress: Optional[Callable[[str], None]] = None) -> None:
    """Install exactly ``records`` into ``prefix`` with py-rattler.

    Args:
        records: ``rattler.RepoDataRecord`` (or ``PrefixRecord``) objects.
        prefix: the directory to install into (created).
        cache_dir: writable package cache: archives are downloaded and extracted here, files
            are hard-linked from here into the prefix when the file system allows.
        target_prefix: the prefix written into files with prefix placeholders when it differs
            from ``prefix`` (``create`` builds in a temporary sibling of the target).
        read_only_caches: package caches looked up after ``cache_dir``; never written
            (copied into ``cache_dir`` by :func:`envtool.engines.clone.seed_cache` if needed).
        platform: the records' platform (default: the host's); a foreign platform installs
            files but runs no link scripts.
        progress: a callback for progress lines.
    Raises:
        EnvtoolError: a download, hash check, extraction or link failed (message names the
            package and URL when py-rattler does).
    """
    import rattler

    from envtool.core.paths import ensure_dir

    cache_dir = ensure_dir(Path(cache_dir))
    Path(prefix).mkdir(parents=True, exist_ok=True)
    kwargs: Dict[str, Any] = {}
    if target_prefix is not None and str(target_prefix) != str(prefix):
        kwargs["alternative_target_prefix"] = str(target_prefix)
    if platform:
        kwargs["platform"] = rattler.Subdir(platform)
    if read_only_caches:
        kwargs["package_cache"] = rattler.PackageCache.new_layered([str(cache_dir)] + [str(p) for p in read_only_caches])
    else:
        kwargs["cache_dir"] = str(cache_dir)
    if progress is not None:
        kwargs["reporter"] = _Progress(progress)
    try:
        _run(rattler.install(list(records), target_prefix=str(prefix), show_progress=False,
                             execute_link_scripts=False, **kwargs))
    except Exception as exc:
        _wait_quiet(Path(prefix))
        raise EnvtoolError(f"installing {len(records)} conda packages into {prefix} failed: "
                           f"{str(exc).strip()}") from None


def _wait_quiet(prefix: Path, timeout: float = 10.0, interval: float = 0.2) -> None:
    """Wait until nothing changes under ``prefix`` (at most ``timeout`` seconds).

    When one package fails, py-rattler 0.28 raises while its other link tasks may still be
    writing (seen: a ``conda-meta/*.json`` appearing after the error), which would race the
    caller's clean-up of the prefix.
    """
    def snap():
        out = []
        for dirpath, dirnames, filenames in os.walk(prefix):
            for n in filenames:
                try:
                    st = os.lstat(os.path.join(dirpath, n))
                    out.append((dirpath, n, st.st_size, st.st_mtime_ns))
                except OSError:
                    pass
        return sorted(out)

    deadline = time.monotonic() + timeout
    last = snap()
    while time.monotonic() < deadline:
        time.sleep(interval)
        now = snap()
        if now == last:
            return
        last = now


def read_prefix_records(prefix: Path) -> list:
    """The ``rattler.PrefixRecord`` of every ``conda-meta/*.json`` in ``prefix``, sorted by name
    (:class:`~envtool.core.prefix.PrefixData`, strict).

    Raises:
        EnvtoolError: a record file that py-rattler cannot read (names the file).
    """
    from envtool.core.prefix import PrefixData

    return sorted(PrefixData(prefix).read_conda_records(strict=True), key=lambda r: r.name.normalized)


def record_key(record) -> tuple:
    """``(name, version, build, url)`` — what makes two records the same package."""
    return (record.name.normalized, str(record.version), str(record.build), str(record.url))


# --------------------------------------------------------------------------- engines
def _platform_for(spec: Spec) -> str:
    """The platform to solve for: the host's when the spec supports it, else the spec's first."""
    import platform as _pf

    host = {"x86_64": "linux-64", "ppc64le": "linux-ppc64le", "aarch64": "linux-aarch64"}.get(_pf.machine(), "")
    if sys.platform.startswith("linux") and host in spec.platforms:
        return host
    return spec.platforms[0] if spec.platforms else host or "linux-64"


def spec_virtual_packages(spec: Spec, platform: str) -> Dict[str, str]:
    """:func:`default_virtual_packages` plus ``__cuda`` = the spec's CUDA version when it has one."""
    out = default_virtual_packages(platform)
    if spec.cuda is not None:
        out["__cuda"] = spec.cuda.version or spec.cuda.value.strip()
    return out


def _package_cache() -> Path:
    from envtool.core.paths import cache_root

    return cache_root() / "pkgs"


def _pip_step(spec: Spec, prefix: Path, options: PlanOptions) -> List[Step]:
    reqs = [p.value for p in spec.packages.pip]
    if not reqs:
        return []
    if spec.horovod.install == "pip-build":
        reqs = ["setuptools", "wheel"] + reqs
    from envtool.engines.venv import pip_install_step

    py = str(Path(prefix) / "bin" / "python")
    return [pip_install_step("pip-install", "Install pip packages into the env: " + " ".join(p.value for p in spec.packages.pip),
                             py, Path(prefix), reqs, options)]


class RattlerEngine(Engine):
    """The embedded conda engine: py-rattler solves and installs; clones read-only envs."""

    name = "rattler"

    def create_steps(self, spec: Spec, options: PlanOptions) -> List[Step]:
        """``conda-create`` (py-rattler solve + install, final prefix written into placeholders), then
        ``pip-install`` with the env's pip when ``packages.pip`` is non-empty.

        Raises:
            UsageError: the spec lists no conda packages.
        """
        if not spec.packages.conda:
            raise UsageError(f"spec {spec.name!r} uses the conda engine but lists no conda packages "
                             "(packages.conda)")
        platform = _platform_for(spec)
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
                      ("#", f"py-rattler install into {_q(prefix)} (package cache {_q(_package_cache())}, "
                            f"prefix written into files: {_q(options.prefix)})")),
            action=_create_action,
            data={"channels": tuple(channels), "specs": tuple(specs), "platform": platform,
                  "virtual_packages": vps, "prefix": str(prefix), "final_prefix": str(options.prefix)})]
        return steps + _pip_step(spec, prefix, options)

    def clone_steps(self, spec: Optional[Spec], source: str, options: PlanOptions) -> List[Step]:
        """Steps that clone ``source`` into ``options.work_prefix`` (see :mod:`envtool.engines.clone`).

        Raises:
            UsageError: the source cannot be found or is not an environment.
        """
        from envtool.engines import clone

        prefix = Path(options.work_prefix)
        try:
            src = clone.resolve_source(source)
        except UsageError as exc:
            if not (options.preview and source.startswith("/")):
                raise
            # plan for a site from elsewhere: the site's base env only exists on the site
            steps = clone_conda_steps(Path(source), prefix, options.prefix, source_label=source, notes=(
                f"{source} is not on this machine ({exc}); it is read when create runs on the site",))
        else:
            if clone.source_kind(src) == "venv":
                steps = [clone_layer_step(src, prefix, options.prefix)]
            else:
                steps = clone_conda_steps(src, prefix, options.prefix, source_label=source or str(src))
        if spec is not None:
            steps += _extra_conda_steps(spec, prefix, options.prefix) + _pip_step(spec, prefix, options)
            if spec.horovod.install == "pip-build":
                steps += _drop_conda_horovod_steps(spec, prefix, options.prefix)
        return steps

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


def _create_action(step: Step, runner) -> dict:
    d = step.data
    try:
        runner.progress(f"      solving {' '.join(d['specs'])} ({d['platform']})")
        records = solve_records(list(d["channels"]), list(d["specs"]), d["platform"],
                                virtual_packages=d["virtual_packages"])
        runner.note("solved: " + ", ".join(f"{r.name.normalized} {r.version} {r.build}" for r in records))
        install_records(records, Path(d["prefix"]), _package_cache(), target_prefix=Path(d["final_prefix"]),
                        platform=d["platform"], progress=runner.progress)
    except StepFailed:
        raise
    except EnvtoolError as exc:
        raise StepFailed(step.id, str(exc), runner.log_path) from None
    return {"packages": len(records), "platform": d["platform"]}


def _extra_conda_steps(spec: Spec, prefix: Path, final_prefix: Path) -> List[Step]:
    """Install the spec's conda packages that the clone does not already satisfy (decided when it runs)."""
    if not spec.packages.conda or not spec.channels:
        return []
    platform = _platform_for(spec)
    channels = expand(spec.channels, platform)
    return [Step(id="conda-install-extra", title="Install the spec's conda packages the clone lacks",
                 commands=(("#", "py-rattler solve, from " + shlex.join(channels) + f" for {platform}, the "
                                 "specs not met by the clone's records (" + shlex.join(p.value for p in spec.packages.conda)
                                 + "), with those records pinned; install the additions"),),
                 action=_extra_action,
                 data={"channels": tuple(channels), "specs": tuple(p.value for p in spec.packages.conda),
                       "platform": platform, "virtual_packages": spec_virtual_packages(spec, platform),
                       "prefix": str(prefix), "final_prefix": str(final_prefix)})]


def _extra_action(step: Step, runner) -> None:
    import rattler

    d = step.data
    have = read_prefix_records(Path(d["prefix"]))
    missing = [s for s in d["specs"] if not any(rattler.MatchSpec(s).matches(r) for r in have)]
    if not missing:
        runner.note("the clone already satisfies every conda spec")
        return
    try:
        added = _run(rattler.solve(sources=list(d["channels"]), specs=[rattler.MatchSpec(s) for s in missing],
                                   platforms=[d["platform"], "noarch"], pinned_packages=have,
                                   virtual_packages=parse_virtual_packages(d["virtual_packages"], d["platform"])))
        # py-rattler's install makes the prefix hold exactly the records given: pass the whole env
        merged = {r.name.normalized: r for r in have}
        merged.update({r.name.normalized: r for r in added})
        runner.note("adding: " + ", ".join(f"{r.name.normalized} {r.version} {r.build}" for r in added
                                           if r.name.normalized not in {h.name.normalized for h in have}))
        install_records(list(merged.values()), Path(d["prefix"]), _package_cache(),
                        target_prefix=Path(d["final_prefix"]), platform=d["platform"], progress=runner.progress)
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
    platform = _platform_for(spec)
    channels = expand(spec.channels, platform)
    specs = tuple(p.value for p in pins)
    shared: Dict[str, Any] = {}  # the records the first step added, for the second to remove
    data = {"channels": tuple(channels), "specs": specs, "platform": platform,
            "virtual_packages": spec_virtual_packages(spec, platform), "prefix": str(prefix),
            "final_prefix": str(final_prefix), "added": shared}
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


def _install_build_action(step: Step, runner) -> dict:
    """Action of ``conda-install-build``; returns ``{"added": [name, …]}`` (sorted)."""
    import rattler

    d = step.data
    have = read_prefix_records(Path(d["prefix"]))
    missing = [s for s in d["specs"] if not any(rattler.MatchSpec(s).matches(r) for r in have)]
    d["added"]["names"] = []
    if not missing:
        runner.note("the environment already has every build-only package; nothing to add or remove")
        return {"added": []}
    try:
        solved = _run(rattler.solve(sources=list(d["channels"]), specs=[rattler.MatchSpec(s) for s in missing],
                                    platforms=[d["platform"], "noarch"], pinned_packages=have,
                                    virtual_packages=parse_virtual_packages(d["virtual_packages"], d["platform"])))
        before = {r.name.normalized for r in have}
        merged = {r.name.normalized: r for r in have}
        merged.update({r.name.normalized: r for r in solved})
        added = sorted(n for n in merged if n not in before)
        runner.note("adding for the build: " + ", ".join(f"{merged[n].name.normalized} {merged[n].version} "
                                                         f"{merged[n].build}" for n in added))
        # recorded before the install, so that a failed install is undone by the transaction, not half-known here
        d["added"]["names"] = added
        install_records(list(merged.values()), Path(d["prefix"]), _package_cache(),
                        target_prefix=Path(d["final_prefix"]), platform=d["platform"], progress=runner.progress)
    except EnvtoolError as exc:
        raise StepFailed(step.id, str(exc), runner.log_path) from None
    except Exception as exc:
        raise StepFailed(step.id, f"cannot add the build-only packages {' '.join(missing)}: {exc}",
                         runner.log_path) from None
    return {"added": added}


def _remove_build_action(step: Step, runner) -> dict:
    """Action of ``conda-remove-build``; returns ``{"removed": [name, …]}``."""
    d = step.data
    names = set(d["added"].get("names") or ())
    if not names:
        runner.note("nothing was added for the build")
        return {"removed": []}
    have = read_prefix_records(Path(d["prefix"]))
    keep = [r for r in have if r.name.normalized not in names]
    runner.note("removing the build-only packages: " + ", ".join(sorted(names)))
    try:
        install_records(keep, Path(d["prefix"]), _package_cache(), target_prefix=Path(d["final_prefix"]),
                        platform=d["platform"], progress=runner.progress)
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
                 action=_drop_conda_horovod, data={"prefix": str(prefix), "final_prefix": str(final_prefix),
                                                   "platform": _platform_for(spec)})]


def _drop_conda_horovod(step: Step, runner) -> dict:
    """Action of ``conda-remove-horovod``; returns ``{"removed": "horovod VERSION BUILD" or None}``."""
    d = step.data
    have = read_prefix_records(Path(d["prefix"]))
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
        install_records([r for r in have if r.name.normalized != "horovod"], Path(d["prefix"]), _package_cache(),
                        target_prefix=Path(d["final_prefix"]), platform=d["platform"], progress=runner.progress)
    except EnvtoolError as exc:
        raise StepFailed(step.id, str(exc), runner.log_path) from None
    return {"removed": label}


def clone_conda_steps(source: Path, prefix: Path, final_prefix: Path, source_label: str = "",
                      verify_content: bool = True, cache_dir: Optional[Path] = None,
                      source_caches: Optional[Sequence[Path]] = None, notes: Sequence[str] = ()) -> List[Step]:
    """The steps that clone conda env ``source`` into ``prefix`` (which will live at ``final_prefix``).

    ``notes`` are added to the first step's (shown by ``plan``).

    Step ids: ``clone-install`` (records from caches, then URLs), ``clone-untracked`` (untracked
    files, pinned, history), ``clone-verify``. Each returns its result; :func:`clone_view` gathers them.
    """
    data = {"source": str(source), "prefix": str(prefix), "final_prefix": str(final_prefix),
            "label": source_label or str(source), "content": verify_content, "run": CloneRun(),
            "cache_dir": str(cache_dir or _package_cache()),
            "source_caches": None if source_caches is None else tuple(str(c) for c in source_caches)}
    check = "sha256 of every file" if verify_content else "stat data incl. ctime of every file"
    return [
        Step(id="clone-install", title=f"Clone {source}: install its exact package records",
             commands=(("#", f"fingerprint {_q(source)} ({check})"),
                       ("#", f"read {_q(str(source) + '/conda-meta')}/*.json; copy extracted packages from existing "
                             f"caches (read only) into {_q(data['cache_dir'])}"),
                       ("#", f"py-rattler install the same records (same builds and URLs) into {_q(prefix)}")),
             notes=("the source and its package caches are only read", *notes),
             action=_clone_install, data=data),
        Step(id="clone-untracked", title="Copy untracked files (pip-installed, user-added); carry pinned and history",
             commands=(("#", f"copy files of {_q(source)} no record tracks, {_q(source)} -> {_q(final_prefix)} in "
                             "text files"),
                       ("#", "copy conda-meta/pinned; conda-meta/history + a clone entry")),
             action=_clone_untracked, data=data),
        Step(id="clone-verify", title="Verify the clone (records, source unchanged, importlib.metadata view)",
             commands=(("#", "compare conda-meta records, the source fingerprint, and importlib.metadata of both"),),
             action=_clone_verify, data=data),
    ]


def _clone_install(step: Step, runner) -> dict:
    from envtool.engines import clone

    d = step.data
    src = Path(d["source"])
    t0 = time.monotonic()
    run: CloneRun = d["run"]
    run.fingerprint = clone.fingerprint(src, content=d["content"])
    runner.note(f"fingerprinted {len(run.fingerprint)} entries of {src} in {time.monotonic() - t0:.1f} s")
    try:
        records = read_prefix_records(src)
        caches = (clone.source_pkgs_dirs(src, records) if d.get("source_caches") is None
                  else [Path(c) for c in d["source_caches"]])
        seed = clone.seed_cache(records, Path(d["cache_dir"]), caches)
        for stale in seed.stale_removed:
            runner.note(f"removed {stale}, the staging directory of an envtool process that no longer runs")
        runner.note(f"package cache: {len(seed.cached)} already cached, {len(seed.copied)} copied from "
                    f"{', '.join(map(str, caches)) or '-'}, {len(seed.missing)} to fetch from their URLs")
        runner.progress(f"      {len(records)} records: {len(seed.cached)} cached, {len(seed.copied)} from the "
                        f"source's caches, {len(seed.missing)} to download")
        install_records(records, Path(d["prefix"]), Path(d["cache_dir"]), target_prefix=Path(d["final_prefix"]),
                        platform=next((r.subdir for r in records if r.subdir != "noarch"), None),
                        progress=runner.progress)
    except EnvtoolError as exc:
        raise StepFailed(step.id, str(exc), runner.log_path) from None
    run.records = records
    return {"source": str(src), "records": len(records),
            "cache": {"cached": len(seed.cached), "copied": len(seed.copied),
                                         "fetched": seed.missing, "bytes_copied": seed.bytes_copied}}


@dataclass
class CloneRun:
    """What the clone steps of one plan hand each other, carried in their steps' data (one object
    per plan, never module state): the source's fingerprint taken before anything was copied,
    and its package records.

    Attributes:
        fingerprint: :func:`envtool.engines.clone.fingerprint` of the source, or None until taken.
        records: the source's ``rattler.PrefixRecord`` objects, or None until read.
    """

    fingerprint: Optional[Dict[str, Any]] = None
    records: Optional[list] = None


def _clone_untracked(step: Step, runner) -> dict:
    from envtool.engines import clone

    d = step.data
    run: CloneRun = d["run"]
    records = run.records if run.records is not None else read_prefix_records(Path(d["source"]))
    report = clone.copy_untracked(Path(d["source"]), Path(d["prefix"]), Path(d["final_prefix"]),
                                  clone.tracked_paths(records))
    clone.carry_meta(Path(d["source"]), Path(d["prefix"]), d["label"], Path(d["final_prefix"]), report)
    for b in report.binaries:
        runner.progress(f"      warning: {b} embeds the source prefix {d['source']} (binary; not rewritten)")
    runner.note(f"untracked: {len(report.copied)} copied, {len(report.rewritten)} text files rewritten, "
                f"{len(report.binaries)} binaries embed the old prefix")
    return report.to_dict()


def _clone_verify(step: Step, runner) -> dict:
    from envtool.engines import clone

    d = step.data
    src, prefix = Path(d["source"]), Path(d["prefix"])
    run: CloneRun = d["run"]
    report = clone.VerifyReport()
    report.records = clone.compare_records(run.records if run.records is not None else read_prefix_records(src),
                                           read_prefix_records(prefix))
    if run.fingerprint is not None:
        report.source_changed = clone.fingerprint_diff(run.fingerprint, clone.fingerprint(src, d["content"]))
    report.pip_view = clone.compare_pip_views(clone.pip_view(src), clone.pip_view(prefix))
    if not report.ok:
        lines = ([f"records differ: {x}" for x in report.records] + [f"source changed: {x}" for x in report.source_changed]
                 + [f"importlib.metadata differs: {x}" for x in report.pip_view])
        raise StepFailed(step.id, "the clone does not match its source:\n  " + "\n  ".join(lines), runner.log_path,
                         step_result=report.to_dict())
    return report.to_dict()


def clone_view(results: Dict[str, Any]) -> Dict[str, Any]:
    """The clone's steps' results as one ``clone`` entry (``source``, ``records``, ``cache``,
    ``mode``, ``untracked``, ``verify``; what ``envtool clone --json`` shows), or ``{}``.

    Args:
        results: step id → result, as the runner recorded them.
    """
    view: Dict[str, Any] = {}
    for sid in ("clone-install", "clone-layer", "clone-copy", "clone-external"):
        view.update(results.get(sid) or {})
    if "clone-untracked" in results:
        view["untracked"] = results["clone-untracked"]
    if "clone-verify" in results:
        view["verify"] = results["clone-verify"]
    return view


def clone_layer_step(source: Path, prefix: Path, final_prefix: Path, mode: str = "layer") -> Step:
    """Clone a venv-style source (a module's Python): a ``--system-site-packages`` layer or a full copy.

    Args:
        source: the source prefix (has ``bin/python``).
        prefix: where to build.
        final_prefix: where it will live.
        mode: ``layer`` (``python -m venv --system-site-packages``; the source stays in use) or
            ``copy`` (a full copy with the source prefix rewritten in text files).
    """
    py = str(Path(source) / "bin" / ("python" if (Path(source) / "bin" / "python").exists() else "python3"))
    if mode == "layer":
        return Step(id="clone-layer", title=f"Layer a venv on {source} (--system-site-packages)",
                    commands=((py, "-m", "venv", "--system-site-packages", "--prompt", Path(final_prefix).name,
                               str(prefix)),
                              ("#", f"when {_q(source)} is itself a venv: a .pth file naming its site-packages")),
                    notes=("the source's packages stay visible through the layer; new packages go to the layer",),
                    action=_layer_action, data={"source": str(source), "prefix": str(prefix)})
    return Step(id="clone-copy", title=f"Copy {source} and rewrite its prefix",
                commands=(("#", f"copy {_q(source)} -> {_q(prefix)}, {_q(source)} -> {_q(final_prefix)} in text "
                                "files"),),
                action=_copy_action, data={"source": str(source), "prefix": str(prefix), "final_prefix": str(final_prefix)})


def _layer_action(step: Step, runner) -> dict:
    """Run ``venv --system-site-packages``; for a venv source add a ``.pth`` naming its site-packages.

    ``venv`` run from a venv bases the new one on the *base* interpreter (PEP 405
    ``sys._base_executable``), so the source venv's own packages would not be visible.
    """
    from envtool.core.prefix import PrefixData

    runner.run(step.commands[0])
    src = Path(step.data["source"])
    if (src / "pyvenv.cfg").is_file():
        src_sp, new_sp = PrefixData(src).site_packages, PrefixData(Path(step.data["prefix"])).site_packages
        if src_sp and new_sp:
            (new_sp / "_envtool_layer.pth").write_text(str(src_sp) + "\n")
            runner.note(f"{new_sp}/_envtool_layer.pth -> {src_sp}")
    return {"source": str(src), "mode": "layer"}


def _copy_action(step: Step, runner) -> dict:
    from envtool.engines import clone

    d = step.data
    report = clone.copy_untracked(Path(d["source"]), Path(d["prefix"]), Path(d["final_prefix"]), set())
    return {"source": d["source"], "mode": "copy", "untracked": report.to_dict()}


class ExternalCondaEngine(Engine):
    """Drives a real ``conda``, ``mamba`` or ``micromamba`` (``--json``), with a writable package cache.

    ``CONDA_PKGS_DIRS`` (conda's documented variable; micromamba reads it too) points at
    envtool's cache so that a read-only site installation is never written to.
    """

    def __init__(self, tool: str = "conda"):
        self.tool = tool
        self.name = tool

    def executable(self) -> str:
        """The tool's path (``$CONDA_EXE``/``$MAMBA_EXE`` when they name it, else ``PATH``).

        Raises:
            UsageError: the tool is not installed.
        """
        for var in ("CONDA_EXE", "MAMBA_EXE"):
            exe = os.environ.get(var)
            if exe and Path(exe).name == self.tool and os.access(exe, os.X_OK):
                return exe
        found = shutil.which(self.tool)
        if not found:
            raise UsageError(f"--engine {self.tool}: {self.tool} is not on PATH (use the default rattler engine)")
        return found

    def _env(self) -> tuple:
        return (("CONDA_PKGS_DIRS", str(_package_cache())),)

    def create_steps(self, spec: Spec, options: PlanOptions) -> List[Step]:
        """``<tool> create --yes --json --prefix P --override-channels -c … SPECS`` then pip.

        Raises:
            UsageError: the tool is not installed.
        """
        exe = self.executable()
        specs = [p.value for p in spec.packages.conda]
        argv = [exe, "create", "--yes", "--json", "--prefix", str(options.work_prefix), "--override-channels"]
        for ch in spec.channels:
            argv += ["-c", ch]
        step = Step(id="conda-create", title=f"{self.tool} create ({len(specs)} specs)",
                    commands=(tuple(argv + specs),), env=self._env(), action=_external_action,
                    data={"tool": self.tool})
        return [step] + _pip_step(spec, Path(options.work_prefix), options)

    def clone_steps(self, spec: Optional[Spec], source: str, options: PlanOptions) -> List[Step]:
        """``<tool> create --yes --json --prefix P --clone SRC`` (``CONDA_PKGS_DIRS`` = envtool's cache).

        Raises:
            UsageError: the tool is not installed, or the source is not found.
        """
        from envtool.engines import clone

        src = clone.resolve_source(source)
        exe = self.executable()
        argv = (exe, "create", "--yes", "--json", "--prefix", str(options.work_prefix), "--clone", str(src))
        steps = [Step(id="clone-external", title=f"{self.tool} create --clone {src}", commands=(argv,),
                      env=self._env(), action=_external_action, data={"tool": self.tool},
                      notes=(f"{self.tool}'s clone does not carry untracked files or rewrite their prefixes; "
                             "the rattler engine does",))]
        if spec is not None:
            steps += _pip_step(spec, Path(options.work_prefix), options)
        return steps

    def installed(self, prefix: Path) -> List[InstalledPackage]:
        """Same as :meth:`RattlerEngine.installed` (reads ``conda-meta``; runs no tool)."""
        return RattlerEngine().installed(prefix)


def parse_conda_json(output: str) -> Dict[str, Any]:
    """The JSON document in a ``conda … --json`` output (the last top-level object).

    conda prints one object; mamba/micromamba may print progress lines before it.

    Raises:
        EnvtoolError: no JSON object in the output.
    """
    text = output.strip()
    start = text.find("{")
    while start != -1:
        try:
            return json.loads(text[start:])
        except ValueError:
            start = text.find("\n{", start + 1)
            start = start + 1 if start != -1 else -1
    raise EnvtoolError("no JSON document in the tool's output")


def _external_action(step: Step, runner) -> dict:
    proc = runner.run(step.commands[0], env=dict(step.env), check=False)
    try:
        doc = parse_conda_json(proc.stdout)
    except EnvtoolError:
        doc = {}
    if proc.returncode != 0 or doc.get("success") is False or "error" in doc or "exception_name" in doc:
        msg = doc.get("message") or doc.get("error") or proc.stdout.strip().splitlines()[-1:] or ["(no output)"]
        name = doc.get("exception_name", "")
        raise StepFailed(step.id, f"{step.data['tool']} failed (exit {proc.returncode}){': ' + name if name else ''}: "
                                  f"{msg if isinstance(msg, str) else msg[0]}", runner.log_path)
    actions = doc.get("actions", {})
    return {"tool": step.data["tool"], "prefix": doc.get("prefix"), "linked": len(actions.get("LINK", []))}
