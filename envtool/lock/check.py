"""Stale locks: a lock whose recorded spec content hash no longer matches the spec."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from envtool.core.errors import EnvtoolError


@dataclass(frozen=True)
class CheckResult:
    """The verdict for one spec.

    Attributes:
        spec: the spec's name.
        lock: the lock file checked ('' when there is none).
        ok: True when the lock's ``envtool.spec_hash`` equals the spec's current hash.
        reason: why not (empty when ok).
        locked_hash: the hash in the lock ('' when none).
        spec_hash: the spec's hash now ('' when it could not be loaded).
    """

    spec: str
    lock: str
    ok: bool
    reason: str = ""
    locked_hash: str = ""
    spec_hash: str = ""


def lock_dirs() -> List[Path]:
    """Where committed locks are looked for: ``$ENVTOOL_LOCK_PATH`` (``:``-separated), then the
    bundled ``lockfiles/`` (source tree) or ``envtool/_bundled/lockfiles`` (installed wheel)."""
    from envtool.spec.catalog import bundled_dir

    dirs = [Path(p) for p in os.environ.get("ENVTOOL_LOCK_PATH", "").split(os.pathsep) if p]
    dirs.append(bundled_dir("lockfiles"))
    return dirs


def lock_file_name(spec_name: str) -> str:
    """``<spec>.conda-lock.yml``: the committed lock's name for a spec."""
    return f"{spec_name}.conda-lock.yml"


def committed_locks(dirs: Optional[Sequence[Path]] = None) -> Dict[str, Path]:
    """Spec name → committed lock (an earlier directory shadows a later one)."""
    found: Dict[str, Path] = {}
    for d in dirs if dirs is not None else lock_dirs():
        if d.is_dir():
            for f in sorted(d.glob("*.conda-lock.yml")):
                found.setdefault(f.name[: -len(".conda-lock.yml")], f)
    return found


def find_lock(spec) -> Optional[Path]:
    """The spec's own lock, if there is one: ``SPEC.conda-lock.yml`` beside the spec file, then —
    for the catalog's spec of that name only, not another file that happens to share the name —
    the first of :func:`lock_dirs` that has ``SPEC.conda-lock.yml``.

    Args:
        spec: a resolved :class:`~envtool.spec.model.Spec` (``name``, ``path``).
    Returns:
        the lock's path, or None.
    """
    if spec.path:
        beside = Path(spec.path).resolve().parent / lock_file_name(spec.name)
        if beside.is_file():
            return beside
    from envtool.spec.catalog import available

    catalog_file = available().get(spec.name)
    if spec.path and (catalog_file is None or Path(catalog_file).resolve() != Path(spec.path).resolve()):
        return None
    return committed_locks().get(spec.name)


def _load_spec(name: str, site: Optional[str] = None):
    if site:
        from envtool.spec import sites

        return sites.resolve(name, site=site)
    from envtool.spec.catalog import load_spec

    return load_spec(name)


def check_lock(spec_name: str, lock_path: Optional[Path]) -> CheckResult:
    """Compare the committed lock of ``spec_name`` with the spec as it is now.

    The spec is resolved for the site recorded in the lock (``envtool.site``) when that is a
    known site other than the spec's own, so the hash is computed on the same resolved spec.

    Returns:
        the :class:`CheckResult` (never raises for a bad spec or lock: that is a failed check).
    """
    from envtool.lock.lockio import read_lock
    from envtool.lock.spec_hash import spec_hash

    if lock_path is None:
        return CheckResult(spec=spec_name, lock="", ok=False, reason="no committed lock")
    try:
        lock = read_lock(lock_path)
    except EnvtoolError as exc:
        return CheckResult(spec=spec_name, lock=str(lock_path), ok=False, reason=str(exc))
    if not lock.spec_hash:
        return CheckResult(spec=spec_name, lock=str(lock_path), ok=False,
                           reason="the lock records no spec content hash (envtool.spec_hash)")
    try:
        spec = _load_spec(spec_name)
        if lock.site and lock.site != spec.site.name:
            spec = _load_spec(spec_name, site=lock.site)
        now = spec_hash(spec)
    except EnvtoolError as exc:
        return CheckResult(spec=spec_name, lock=str(lock_path), ok=False, reason=f"cannot load the spec: {exc}",
                           locked_hash=lock.spec_hash)
    if now != lock.spec_hash:
        return CheckResult(spec=spec_name, lock=str(lock_path), ok=False, locked_hash=lock.spec_hash, spec_hash=now,
                           reason=f"stale: the spec changed since it was locked (spec hash {now[:12]}, "
                                  f"lock has {lock.spec_hash[:12]}); re-lock with "
                                  f"'envtool lock {spec_name} -o {lock_path}'")
    return CheckResult(spec=spec_name, lock=str(lock_path), ok=True, locked_hash=lock.spec_hash, spec_hash=now)
