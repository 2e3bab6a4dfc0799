"""``lock-drift``: compare a prefix with a lockfile through ``envtool.lock`` (the same path as
``envtool diff``: :func:`envtool.lock.lockio.read_lock`, :func:`envtool.lock.snapshot.snapshot`
without index look-ups, :func:`envtool.lock.diff.compare`).

Packages only added to the prefix (a user's ``pip install``) are a warning whose fix records them
(``envtool lock --prefix``); a locked package removed or changed fails.

While ``envtool.lock`` is not importable the check is skipped with that reason.
"""
from __future__ import annotations

from pathlib import Path

from envtool.checks.registry import finding

ID = "lock-drift"


def read(ctx):
    """``(lock, platform)`` for ``ctx.lock``, or None when ``envtool.lock`` is not importable.

    Raises:
        UsageError: unreadable lock or no entry for this platform (exit 2; the CLI calls this
            before any check runs).
    """
    try:
        from envtool.lock import lockio
        from envtool.lock.model import pick_platform
    except ImportError:
        return None
    lock = lockio.read_lock(Path(ctx.lock))
    return lock, pick_platform(lock, None, str(ctx.lock))


def check(ctx):
    """Drift of ``ctx.prefix`` against ``ctx.lock`` (a :class:`~envtool.checks.model.Finding`)."""
    try:
        from envtool.lock import diff, snapshot
    except ImportError as exc:
        return finding(ID, "skipped", f"lock drift needs envtool.lock, not importable here ({exc})",
                       lock=str(ctx.lock))
    lock, platform = read(ctx)
    installed = snapshot.snapshot(Path(ctx.prefix), platform, lookup=False)
    report = diff.compare(lock.for_platform(platform), installed, platform, seeded=snapshot.seeded(Path(ctx.prefix)))
    details = report.to_dict()
    if report.ok:
        return finding(ID, "ok", f"matches {ctx.lock} ({platform})", **details)
    items = [f"+ {p.manager} {p.key[1]} {p.version} (not in the lock)" for p in report.added]
    items += [f"- {p.manager} {p.key[1]} {p.version} (locked, not installed)" for p in report.removed]
    items += [f"~ {c.manager} {c.name}: {c.field} {c.locked} -> {c.installed}" for c in report.changed]
    import shlex

    spec = ctx.spec.name if ctx.spec is not None else (lock.spec or "SPEC")
    prefix, lockfile = shlex.quote(str(ctx.prefix)), shlex.quote(str(ctx.lock))
    recreate = (f"envtool create {shlex.quote(spec)} --from-lock {lockfile} --prefix {prefix} --force")
    summary = (f"drift against {ctx.lock}: {len(report.added)} added, {len(report.removed)} removed, "
               f"{len(report.changed)} changed")
    if report.added and not (report.removed or report.changed):
        # Only packages added (a user's `pip install`): every locked package is still there as locked,
        # so nothing the lock promised is broken; the other checks judge what the addition does. Like
        # pixi, which re-syncs an environment to its lock only when asked (`pixi install`), and conda,
        # which records each change as a revision (`conda list --revisions`), this is a difference to
        # record, not a failure: the fix keeps the package by snapshotting the prefix into the lock.
        names = ", ".join(p.key[1] for p in report.added)
        return finding(ID, "warn", summary + f" (only added: {names}; every locked package is as locked)",
                       f"keep it and record it in the lock: envtool lock --prefix {prefix} -o {lockfile}; or "
                       f"go back to the lock, which REMOVES {names}: {recreate}", items=items, **details)
    return finding(ID, "fail", summary, f"recreate from the lock: {recreate}", items=items, **details)


def locked_versions(ctx) -> dict:
    """``{normalized name: version}`` of the lock's entries for this platform ({} without a lock)."""
    got = read(ctx) if ctx.lock else None
    if got is None:
        return {}
    lock, platform = got
    return {p.key[1]: p.version for p in lock.for_platform(platform)}
