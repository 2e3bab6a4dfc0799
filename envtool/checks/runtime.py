"""Check 8, ``runtime-vars``: Horovod runtime variables in effect, for information.

Defaults (horovod.md, "Runtime variables worth showing"): ``HOROVOD_FUSION_THRESHOLD``
64 MiB up to 0.20.3, 128 MiB from 0.21.0; ``HOROVOD_CYCLE_TIME`` 5 ms → 1 ms from 0.21.0.
"""
from __future__ import annotations

from envtool.checks.common import version_tuple, visible_pip
from envtool.checks.registry import check, finding

ID = "runtime-vars"
SHOWN = ("HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_TIMELINE", "HOROVOD_TIMELINE_MARK_CYCLES",
         "HOROVOD_AUTOTUNE", "HOROVOD_AUTOTUNE_LOG", "HOROVOD_HIERARCHICAL_ALLREDUCE",
         "HOROVOD_HIERARCHICAL_ALLGATHER", "HOROVOD_CACHE_CAPACITY", "HOROVOD_STALL_CHECK_TIME_SECONDS",
         "HOROVOD_LOG_LEVEL", "HOROVOD_GLOO_IFACE", "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS")
_NUMERIC = ("HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_CACHE_CAPACITY",
            "HOROVOD_STALL_CHECK_TIME_SECONDS")


@check(ID, "Horovod runtime variables (information)", order=80)
def run(ctx):
    version = visible_pip(ctx).get("horovod")
    new = version_tuple(version, 2) >= (0, 21) if version else True
    defaults = {"HOROVOD_FUSION_THRESHOLD": f"{(128 if new else 64) * 1024 * 1024} (default, bytes)",
                "HOROVOD_CYCLE_TIME": f"{1 if new else 5} (default, ms)"}
    values = {}
    for key in SHOWN:
        if key in ctx.environ:
            values[key] = ctx.environ[key]
    extra = sorted(k for k in ctx.environ if k.startswith("HOROVOD_") and k not in SHOWN)
    items = [f"{k}={v}" for k, v in values.items()] + [f"{k}={ctx.environ[k]}" for k in extra]
    items += [f"{k}={v}" for k, v in defaults.items() if k not in values]
    bad = []
    for key in _NUMERIC:
        if key in values:
            try:
                float(values[key])
            except ValueError:
                bad.append(f"{key}={values[key]!r} is not a number")
    details = {"set": {**values, **{k: ctx.environ[k] for k in extra}}, "defaults": defaults,
               "horovod": version}
    if bad:
        return finding(ID, "warn", "; ".join(bad), "set it to a number (bytes for FUSION_THRESHOLD, ms for "
                       "CYCLE_TIME)", items=items, **details)
    summary = (", ".join(f"{k}={v}" for k, v in values.items()) if values else "no HOROVOD_* runtime variable set")
    if "HOROVOD_TIMELINE" in values:
        summary += " (timeline on: rank 0 writes every tensor event; slows large jobs)"
    return finding(ID, "ok", summary, "", items=items, **details)
