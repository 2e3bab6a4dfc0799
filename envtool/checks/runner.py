"""Run doctor checks in parallel.

The shared probes that the selected checks need are started first (each in its own thread,
each a subprocess of the environment's interpreter), then every check runs in a thread pool;
checks that need a probe wait for it. Findings come back in display order.
"""
from __future__ import annotations

import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Callable, List, Optional, Sequence

from envtool.checks.model import Check, Context, Finding


def _run_one(chk: Check, ctx: Context) -> Finding:
    started = time.monotonic()
    try:
        found = chk.run(ctx)
    except Exception as exc:  # a bug in a check must not hide the other findings
        last = traceback.format_exc().strip().splitlines()[-1]
        found = Finding(id=chk.id, status="fail", summary=f"check crashed: {type(exc).__name__}: {exc}",
                        details={"traceback_last_line": last})
    if found.id != chk.id:
        found = replace(found, id=chk.id)
    if not found.fix and found.status in ("warn", "fail"):
        found = replace(found, fix=chk.fix)
    return replace(found, title=chk.title, seconds=time.monotonic() - started)


def run_checks(ctx: Context, checks: Sequence[Check], jobs: Optional[int] = None,
               on_done: Optional[Callable[[Finding, int, int], None]] = None) -> List[Finding]:
    """Run ``checks`` against ``ctx`` concurrently.

    Args:
        ctx: the inputs and probe cache.
        checks: the checks to run (from :func:`envtool.checks.registry.select`).
        jobs: threads for the checks (default: one per check; they mostly wait on subprocesses).
        on_done: called as each check finishes, with its finding, the number done and the total
            (from the checks' threads; for a progress line).
    Returns:
        one :class:`Finding` per check, in the order of ``checks``.
    """
    needed = []
    for chk in checks:
        for name in chk.needs:
            if name not in needed:
                needed.append(name)
    ctx.start(needed)
    try:
        with ThreadPoolExecutor(max_workers=jobs or max(1, len(checks)), thread_name_prefix="check") as pool:
            futures = [pool.submit(_run_one, chk, ctx) for chk in checks]
            if on_done is not None:
                done = [0]
                for fut in futures:
                    def report(f, done=done):
                        done[0] += 1
                        if not f.cancelled() and f.exception() is None:
                            on_done(f.result(), done[0], len(futures))
                    fut.add_done_callback(report)
            return [f.result() for f in futures]
    finally:
        ctx.close()


def exit_status(findings: Sequence[Finding]) -> int:
    """0 when nothing failed, 1 when any finding is ``fail``."""
    return 1 if any(f.status == "fail" for f in findings) else 0
