"""The ``lock`` step of ``create``: write the environment's own lock to ``<prefix>/conda-lock.yml``.

The lock is a snapshot (:func:`envtool.lock.build.lock_prefix`) of the build prefix after
validation, with the spec's name and content hash and the Horovod wheel-cache key, so that
``envtool diff --prefix P`` can later report drift. A lock that cannot be made (no index to
look hashes up in) does not throw away a validated environment: the step notes why and the
environment is kept without its lock.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Dict, List

from envtool.spec.model import Spec
from envtool.core.plan import PlanOptions, Step, StepContext

#: The environment's own lock, relative to its prefix.
LOCK_NAME = "conda-lock.yml"


def plan_steps(spec: Spec, options: PlanOptions) -> List[Step]:
    """The ``lock`` step (always planned)."""
    target = Path(options.prefix) / LOCK_NAME
    return [Step(id="lock", title=f"Lock the environment ({target})",
                 commands=(("#", f"snapshot conda-meta and pip dist-info of {shlex.quote(str(options.work_prefix))} into "
                                 f"{shlex.quote(str(target))} "
                                 "(conda-lock v1)"),),
                 action=_run_lock, data=LockStepData(spec=spec, work_prefix=str(options.work_prefix),
                                                     site=options.site or spec.site.name,
                                                     from_lock=str(options.from_lock) if options.from_lock else ""))]


@dataclass(frozen=True)
class LockStepData:
    """Payload of ``lock``: the spec, the prefix snapshotted, the site, and the lock installed from
    (``""`` when the packages were solved)."""

    spec: Spec
    work_prefix: str
    site: str
    from_lock: str


def _run_lock(step: Step, runner: StepContext) -> Dict[str, Any]:
    d: LockStepData = step.data
    from envtool.core.errors import EnvtoolError

    try:
        from envtool.lock import build, lockio
    except ImportError as exc:  # conda-lock is a dependency, but a site install may lack it
        runner.progress(f"      warning: no lock written (cannot import {exc.name or 'conda-lock'}: "
                        "pip install conda-lock); the environment is kept")
        return {"ok": False, "error": f"cannot import the lock writer: {exc}"}
    prefix = Path(d.work_prefix)
    keys = {}
    key = (runner.results.get("build-horovod") or {}).get("cache_key")
    if key:
        keys["horovod"] = key
    try:
        known = {}
        if d.from_lock:
            # installed from that lock: its URLs and hashes are the archives pip checked
            known = {(p.key[1], p.version): (p.url, p.sha256)
                     for p in lockio.read_lock(Path(d.from_lock)).packages
                     if p.manager == "pip" and p.sha256 and not p.built}
        made = runner.results.get("create-venv") or runner.results.get("clone-layer") or {}
        data = build.lock_prefix(prefix, spec=d.spec, site=d.site, built_keys=keys,
                                 progress=runner.note, known=known,
                                 layered_over=made.get("base") if isinstance(made, dict) else None)
        lockio.write_lock(data, prefix / LOCK_NAME)
    except EnvtoolError as exc:
        runner.note(f"no lock written: {exc}")
        runner.progress(f"      warning: no lock written ({exc}); the environment is kept")
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "packages": len(data.packages), "file": LOCK_NAME}
