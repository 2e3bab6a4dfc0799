"""The py-rattler API envtool uses: solve, install and read conda package records (no engine, no steps).

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
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from envtool.core.errors import EnvtoolError, UsageError
from envtool.spec.channels import expand
from envtool.spec.model import Spec


def quote_path(value: object) -> str:
    """``value`` (a path or string) shell-quoted, for the ``#`` lines ``plan`` prints."""
    return shlex.quote(str(value))

#: glibc assumed when solving for Linux without an override: 2.17, the manylinux2014 floor
#: conda-forge builds against (conda-forge docs, "Using a newer glibc").
DEFAULT_GLIBC = "2.17"
_ARCHSPEC = {"linux-64": "x86_64", "linux-ppc64le": "ppc64le", "linux-aarch64": "aarch64"}

VirtualPackages = Union[Sequence[str], Mapping[str, str], None]


def run_sync(coro_or_value: Any) -> Any:
    """Await a py-rattler coroutine from synchronous code (values pass through)."""
    if asyncio.iscoroutine(coro_or_value):
        return asyncio.run(coro_or_value)
    if isinstance(coro_or_value, asyncio.Future):
        return asyncio.get_event_loop().run_until_complete(coro_or_value)
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
    gateway = rattler.Gateway(cache_dir=Path(cache_dir))
    try:
        records = run_sync(rattler.solve(sources=list(channels), specs=match_specs, gateway=gateway,
                                     platforms=[rattler.Subdir(platform), rattler.Subdir("noarch")], virtual_packages=vps))
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
    """py-rattler's ``InstallerReporter`` protocol (structural: py-rattler 0.28 documents that no
    subclass is needed, and calls only the methods a reporter has) turning its callbacks into
    progress lines.

    Args:
        callback: takes one progress line.
    """

    def __init__(self, callback: Callable[[str], None]) -> None:
        self.callback = callback
        self.total = 0
        self.done = 0
        self.downloads = 0

    def on_transaction_start(self, total_operations: int) -> None:
        self.total = total_operations
        self.callback(f"linking {total_operations} packages")

    def on_download_start(self, cache_entry: int) -> int:
        self.downloads += 1
        return cache_entry

    def on_transaction_operation_complete(self, operation: int) -> None:
        self.done += 1
        if self.total and (self.done == self.total or self.done % max(1, self.total // 10) == 0):
            self.callback(f"  {self.done}/{self.total} packages linked ({self.downloads} fetched)")


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
        kwargs["package_cache"] = rattler.PackageCache.new_layered([Path(cache_dir), *(Path(p) for p in read_only_caches)])
    else:
        kwargs["cache_dir"] = str(cache_dir)
    if progress is not None:
        kwargs["reporter"] = _Progress(progress)
    try:
        run_sync(rattler.install(list(records), target_prefix=str(prefix), show_progress=False,
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


def platform_for(spec: Spec) -> str:
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


def package_cache() -> Path:
    """envtool's writable conda package cache (``<envtool cache>/pkgs``; not created)."""
    from envtool.core.paths import cache_root

    return cache_root() / "pkgs"

