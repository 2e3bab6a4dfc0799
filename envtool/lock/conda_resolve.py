"""The conda part of a lock: py-rattler records, solved per platform, and back again.

Solving uses :func:`envtool.engines.conda.solve_records`; this module turns its records into
:class:`~envtool.lock.model.LockedPackage` and locked entries back into py-rattler
``RepoDataRecord`` objects for :func:`envtool.engines.conda.install_records`.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from envtool.core.errors import EnvtoolError
from envtool.lock.model import LockedPackage
from envtool.spec.model import Spec


def _depends(depends: Iterable[str]) -> Tuple[Tuple[str, str], ...]:
    """conda ``depends`` strings (``python >=3.8,<3.9``) as ``(name, constraint)`` pairs."""
    out: Dict[str, str] = {}
    for dep in depends:
        name, _, rest = dep.strip().partition(" ")
        out[name] = rest.strip() or "*"
    return tuple(out.items())


def record_to_package(record, platform: str) -> LockedPackage:
    """A py-rattler ``RepoDataRecord`` (or ``PrefixRecord``) as a lock entry.

    Args:
        record: the record (``name``, ``version``, ``build``, ``url``, ``md5``/``sha256`` bytes, ``depends``).
        platform: the platform the lock entry is for (a ``noarch`` record is listed per platform).
    Raises:
        EnvtoolError: the record has no MD5 (conda-lock requires one for conda packages).
    """
    md5 = record.md5.hex() if record.md5 else ""
    sha256 = record.sha256.hex() if record.sha256 else ""
    name = record.name.normalized if hasattr(record.name, "normalized") else str(record.name)
    if not md5:
        raise EnvtoolError(f"conda package {name} {record.version} ({record.url}) has no MD5; conda-lock needs one")
    return LockedPackage(manager="conda", name=name, version=str(record.version), platform=platform,
                         url=str(record.url), sha256=sha256, md5=md5, build=str(record.build),
                         dependencies=_depends(record.depends))


def virtual_packages_for(spec: Spec, platform: str, overrides: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The virtual packages a solve for ``platform`` assumes: name → ``version[=build]``.

    The conda engine's defaults for the platform (:func:`envtool.engines.conda.default_virtual_packages`:
    ``__unix``, ``__linux``, ``__glibc`` 2.17, ``__archspec``), plus ``__cuda`` = the spec's
    CUDA version when it has one (the site's driver supports it), then ``overrides``.

    Args:
        spec: the resolved spec.
        platform: ``linux-64``-style platform.
        overrides: ``--virtual-package NAME=VERSION`` values (an empty version drops one).
    Returns:
        name → version (``{"__glibc": "2.17", "__cuda": "11.3", …}``).
    """
    from envtool.engines.conda import spec_virtual_packages

    out: Dict[str, str] = dict(spec_virtual_packages(spec, platform))
    for k, v in (overrides or {}).items():
        if v:
            out[k] = v
        else:
            out.pop(k, None)
    return out


def solve(spec: Spec, platform: str, virtual_packages: Mapping[str, str],
          progress: Optional[Callable[[str], None]] = None) -> List[LockedPackage]:
    """Solve the spec's conda packages (and Python) for ``platform`` with py-rattler.

    Args:
        spec: a conda-engine spec.
        platform: target platform.
        virtual_packages: name → version (:func:`virtual_packages_for`).
        progress: progress callback.
    Returns:
        one entry per record, in the solver's order.
    Raises:
        UsageError: no channels, or a malformed match spec / virtual package (from the engine).
        EnvtoolError: the solve failed (from the engine).
    """
    from envtool.engines.conda import solve_records

    specs = conda_specs(spec)
    if progress:
        progress(f"py-rattler solves for {platform}: " + " ".join(specs))
    records = solve_records(list(spec.channels), specs, platform, virtual_packages=dict(virtual_packages))
    return [record_to_package(r, platform) for r in records]


def conda_specs(spec: Spec) -> List[str]:
    """Match specs to solve, as the rattler engine's ``create`` does: the spec's conda packages,
    then ``python <version>`` when the spec pins Python and does not list it."""
    specs = [p.value for p in spec.packages.conda]
    if spec.python is not None and not any(s.split()[0] == "python" for s in specs if s.strip()):
        specs.append("python " + spec.python.value.strip())
    return specs


def records_for(packages: Sequence[LockedPackage], channels: Sequence[str], platform: str,
                progress: Optional[Callable[[str], None]] = None) -> list:
    """py-rattler ``RepoDataRecord`` objects for locked conda entries, looked up (not solved).

    Each entry's record is read from its channel's repodata by file name (py-rattler
    ``Gateway.query`` for the entry's name, no dependencies), and its MD5/SHA-256 must equal
    the lock's, so the install uses exactly the locked archives with their full metadata
    (``noarch``, ``build_number``) that a lock does not store.

    Args:
        packages: lock entries (pip ones are skipped).
        channels: the lock's channels (for the record; each entry is looked up in the channel
            its URL names, ``<channel>/<subdir>/<file>``).
        platform: the platform being installed.
        progress: progress callback.
    Returns:
        ``rattler.RepoDataRecord`` objects in the order of ``packages``.
    Raises:
        EnvtoolError: an entry is not in its channel any more, or its hash differs.
    """
    import asyncio

    from rattler import Channel, Gateway, Platform

    wanted = [p for p in packages if p.manager == "conda"]
    if not wanted:
        return []
    if progress:
        progress(f"looking up {len(wanted)} locked conda records in their channels (no solve)")
    by_channel: Dict[str, List[LockedPackage]] = {}
    for p in wanted:
        base = p.url.rsplit("/", 2)[0]
        by_channel.setdefault(base, []).append(p)

    from envtool.core.paths import cache_dir

    repodata = cache_dir("repodata")

    async def query():
        gateway = Gateway(cache_dir=repodata)
        found = {}
        for base, pkgs in by_channel.items():
            subdirs = sorted({p.url.rsplit("/", 2)[1] for p in pkgs})
            result = await gateway.query([Channel(base)], [Platform(s) for s in subdirs],
                                         [p.name for p in pkgs], recursive=False)
            for group in result:
                for rec in group:
                    found[str(rec.url)] = rec
        return found

    found = asyncio.run(query())
    out = []
    for p in wanted:
        rec = found.get(p.url)
        if rec is None:
            raise EnvtoolError(f"locked conda package {p.name} {p.version} ({p.url}) is not in its channel's repodata")
        md5 = rec.md5.hex() if rec.md5 else ""
        sha256 = rec.sha256.hex() if rec.sha256 else ""
        if (p.md5 and md5 and p.md5 != md5) or (p.sha256 and sha256 and p.sha256 != sha256):
            raise EnvtoolError(f"locked conda package {p.name} {p.version}: the channel's hash differs from the lock's "
                               f"({p.url})")
        out.append(rec)
    return out
