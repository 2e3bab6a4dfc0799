"""The site file's published reference numbers (``validation.references``, list form) against an
environment: comparable only when the environment runs the stack the number was measured on.

A reference states its stack (modules, image, uenv, NCCL version, network plug-in;
:class:`envtool.spec.sites.RefStack`). What validate knows of the environment's stack is
:func:`environment_stack`: the modules the job loads, the NCCL version (the job's
``NCCL_DEBUG=INFO`` lines when there are some, else the spec's exact pin or ``nccl/`` module) and
the network plug-in (the site's ``gpu.nccl_plugins``; ``none`` when NCCL said it found none). A
reference whose stack differs, or names what the environment's stack does not say, is "not
comparable", with why; it neither passes nor fails. References of the mapping form have no stack
and are compared as before.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional, Sequence

from envtool.spec.sites import RefStack, Reference
from envtool.validate import sweep

#: ``NCCL INFO NCCL version 2.21.5+cuda12.4`` (NCCL's first INFO line; RCCL prints the same).
_NCCL_VERSION = re.compile(r"NCCL INFO (?:NCCL|RCCL) version (\d+(?:\.\d+)+)")

NOT_COMPARABLE = "not comparable"


def nccl_version_in(lines: Iterable[str]) -> Optional[str]:
    """The NCCL version NCCL printed (``NCCL INFO NCCL version 2.21.5+cuda12.4`` → ``2.21.5``), or None."""
    for line in lines:
        m = _NCCL_VERSION.search(line)
        if m:
            return m.group(1)
    return None


def environment_stack(target, nccl: Optional[str] = None, plugin_in_use: Optional[bool] = None) -> RefStack:
    """What validate knows of the environment's stack.

    Args:
        target: the :class:`~envtool.steps.jobscript.Target` (its ``modules``, ``spec`` and ``site``).
        nccl: the NCCL version the job's NCCL printed, or None (then the spec's exact one, if any:
            :func:`envtool.checks.gpu.spec_nccl_version`).
        plugin_in_use: whether NCCL's logs show the network plug-in in use; None without logs.
    Returns:
        a :class:`RefStack`; no image or uenv (validate does not know them).
    """
    from envtool.checks.gpu import spec_nccl_version

    if nccl is None and target.spec is not None:
        try:
            nccl = spec_nccl_version(target.spec)
        except AttributeError:  # a spec without site facts
            nccl = None
    gpu = getattr(target.site, "gpu", None)
    listed = [f"{n} {v}" if v else n for n, v in (gpu.nccl_plugins if gpu is not None else ())]
    plugin = "none" if plugin_in_use is False else (listed[0] if listed else None)
    return RefStack(modules=tuple(target.modules), nccl=nccl, plugin=plugin)


def published(site) -> List[Reference]:
    """The site's references that carry a stack (the list form of ``validation.references``)."""
    return [r for r in getattr(site, "references", ()) if r.stack is not None]


def verdict(ref: Reference, env: RefStack, rows: Sequence[dict]) -> Dict[str, Any]:
    """One reference against a run: ``{..., "status": "passed" | "failed" | "not measured" |
    "not comparable", "why": [...], "got": number or None, "environment_stack_hash": ...}``.

    Args:
        ref: the reference (with a stack).
        env: :func:`environment_stack`.
        rows: the sweep rows (:func:`envtool.validate.sweep.rows`) of the controller it names.
    """
    out: Dict[str, Any] = dict(ref.to_dict(), environment_stack=env.describe(), environment_stack_hash=env.digest(),
                               got=None)
    why = ref.differences(env)
    if why:
        return dict(out, status=NOT_COMPARABLE, why=why)
    row = next((r for r in rows if r["bytes"] == ref.size), None) if ref.size is not None else None
    if row is None:
        size = sweep.human_size(ref.size) if ref.size is not None else "no size"
        return dict(out, status="not measured", why=[f"the run has no allreduce of {size}"])
    if ref.unit in sweep.BANDWIDTH_UNITS:
        got = row["busbw_gbs"] / sweep.BANDWIDTH_UNITS[ref.unit]
    else:
        got = row["latency_us"] / sweep.TIME_UNITS[ref.unit]
    low = ref.value * (1 + ref.lower) if ref.lower is not None else None
    high = ref.value * (1 + ref.upper) if ref.upper is not None else None
    if low is not None and got < low:
        return dict(out, status="failed", got=got, why=[f"{got:.4g} {ref.unit} is below {low:.4g} {ref.unit}"])
    if high is not None and got > high:
        return dict(out, status="failed", got=got, why=[f"{got:.4g} {ref.unit} is above {high:.4g} {ref.unit}"])
    return dict(out, status="passed", got=got, why=[])


def line(v: Dict[str, Any]) -> str:
    """``NAME (VALUE UNIT on N node(s), DATE, SOURCE; stack HASH): STATUS: why`` (one line)."""
    head = (f"{v['name']} ({v['value']:g} {v['unit']} on {v['nodes']} node(s), {v['date']}, {v['source']}; "
            f"stack {v['stack_hash']})")
    got = f" (measured {v['got']:.4g} {v['unit']})" if v.get("got") is not None else ""
    return f"{head}: {v['status']}{got}" + (": " + "; ".join(v["why"]) if v.get("why") else "")
