"""Drift between a prefix and a lock: packages added, removed and changed."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

from envtool.lock.model import LockedPackage


@dataclass(frozen=True)
class Change:
    """A package present in both with a difference.

    Attributes:
        manager: ``conda`` or ``pip``.
        name: normalized name.
        field: what differs: ``version``, ``build`` (conda build string), ``hash`` (archive
            SHA-256/MD5, compared where both sides know it; for a built Horovod, the wheel's
            SHA-256 where the lock records a wheel), ``build-key`` (a built Horovod wheel's
            wheel-cache key).
        locked: the lock's value.
        installed: the prefix's value.
    """

    manager: str
    name: str
    field: str
    locked: str
    installed: str


@dataclass(frozen=True)
class DiffReport:
    """The drift of one prefix against one lock for one platform.

    Attributes:
        platform: the platform compared.
        added: in the prefix, not in the lock.
        removed: in the lock, not in the prefix.
        changed: in both, different.
    """

    platform: str
    added: Tuple[LockedPackage, ...]
    removed: Tuple[LockedPackage, ...]
    changed: Tuple[Change, ...]

    @property
    def ok(self) -> bool:
        """True when there is no drift."""
        return not (self.added or self.removed or self.changed)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form."""
        def pkg(p: LockedPackage) -> Dict[str, str]:
            return {"manager": p.manager, "name": p.key[1], "version": p.version, "build": p.build}

        return {"ok": self.ok, "platform": self.platform, "added": [pkg(p) for p in self.added],
                "removed": [pkg(p) for p in self.removed],
                "changed": [{"manager": c.manager, "name": c.name, "field": c.field, "locked": c.locked,
                             "installed": c.installed} for c in self.changed]}


def compare(locked: Sequence[LockedPackage], installed: Sequence[LockedPackage], platform: str,
            seeded: Sequence[str] = ()) -> DiffReport:
    """Compare locked entries with a snapshot of a prefix.

    Versions are compared exactly; conda build strings and hashes when both sides have them;
    pip archive hashes where both are known. A package envtool builds (Horovod) is compared by its
    wheel-cache key when both sides have one, and by the wheel's SHA-256 when the lock records a
    wheel (a lock of an environment: ``create`` and ``lock --prefix`` record the installed wheel's
    URL and the SHA-256 pip recorded in ``direct_url.json``) and the prefix records the hash of the
    wheel it was installed from (pip's ``direct_url.json``). A lock made by a solve records the
    source archive instead: a wheel built from it has another hash by nature, so none is compared.

    Args:
        locked: the lock's entries for ``platform``.
        installed: :func:`envtool.lock.snapshot.snapshot` of the prefix (lookup not needed).
        platform: the platform compared (for the report).
        seeded: pip names the environment's creation installs by itself (``setuptools`` in a
            venv before Python 3.12): not reported as added when the lock does not name them.
    Returns:
        the :class:`DiffReport` (sorted by manager and name).
    """
    lock_by = {p.key: p for p in locked}
    inst_by = {p.key: p for p in installed}
    added = tuple(inst_by[k] for k in sorted(set(inst_by) - set(lock_by))
                  if not (k[0] == "pip" and k[1] in seeded))
    removed = tuple(lock_by[k] for k in sorted(set(lock_by) - set(inst_by)))
    changed: List[Change] = []
    for k in sorted(set(lock_by) & set(inst_by)):
        a, b = lock_by[k], inst_by[k]
        if a.version != b.version:
            changed.append(Change(k[0], k[1], "version", a.version, b.version))
            continue
        if a.manager == "conda":
            if a.build and b.build and a.build != b.build:
                changed.append(Change(k[0], k[1], "build", a.build, b.build))
            elif (a.sha256 and b.sha256 and a.sha256 != b.sha256) or (a.md5 and b.md5 and a.md5 != b.md5):
                changed.append(Change(k[0], k[1], "hash", a.sha256 or a.md5, b.sha256 or b.md5))
            continue
        if a.built or b.built:
            if _is_key(a.built) and _is_key(b.built) and a.built != b.built:
                changed.append(Change(k[0], k[1], "build-key", a.built, b.built))
            elif is_wheel(a.url) and a.sha256 and b.sha256 and a.sha256.lower() != b.sha256.lower():
                changed.append(Change(k[0], k[1], "hash", a.sha256, b.sha256))
            continue
        if a.sha256 and b.sha256 and a.sha256 != b.sha256:
            changed.append(Change(k[0], k[1], "hash", a.sha256, b.sha256))
    return DiffReport(platform=platform, added=added, removed=removed, changed=tuple(changed))


def is_wheel(url: str) -> bool:
    """True when ``url`` names a wheel (``….whl``, a ``#fragment`` ignored), not a source archive."""
    return url.split("#", 1)[0].endswith(".whl")


def _is_key(value: str) -> bool:
    """A wheel-cache key (20 hex digits, :meth:`envtool.horovod.cache.BuildKey.digest`)."""
    return len(value) == 20 and all(c in "0123456789abcdef" for c in value)


def format_report(report: DiffReport, lock_path: str, prefix: str) -> str:
    """Human-readable drift report."""
    if report.ok:
        return f"{prefix} matches {lock_path} ({report.platform})"
    lines = [f"{prefix} differs from {lock_path} ({report.platform}):"]
    for p in report.added:
        lines.append(f"  + {p.manager} {p.key[1]} {p.version}" + (f" {p.build}" if p.build else ""))
    for p in report.removed:
        lines.append(f"  - {p.manager} {p.key[1]} {p.version}" + (f" {p.build}" if p.build else ""))
    for c in report.changed:
        lines.append(f"  ~ {c.manager} {c.name}: {c.field} {c.locked} -> {c.installed}")
    lines.append(f"{len(report.added)} added, {len(report.removed)} removed, {len(report.changed)} changed")
    return "\n".join(lines)
