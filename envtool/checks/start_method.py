"""Check 3, ``start-method``: the DataLoader start method.

The effective default comes from a fresh interpreter of the env; the probe
(``envtool/probes/dataloader.py --hvd-init``, the one ``create``'s validation runs) calls
``hvd.init()`` (Gloo, one process) and then runs a real ``DataLoader`` with 2 workers under that
method (and the spec's ``expect.dataloader_start_method``) within a timeout. No torch in the env
is a skip; a torch that does not import is a failure. ``fork`` on Python < 3.14 with an
MPI/InfiniBand launch present is a warning: workers forked after MPI/Horovod init segfault or
deadlock on some InfiniBand stacks; the fix is ``forkserver`` (OLCF's Summit page, ``olcf/olcf-user-docs@6c07271c3d12:software/analytics/distributed-dl-env.rst#L340-L384``, "Problems
Distributing Pytorch with Multiple Data Loader Workers"; horovod.md).
"""
from __future__ import annotations

from envtool.checks.common import launch_markers, version_tuple
from envtool.checks.registry import check, finding

ID = "start-method"

FORKSERVER_FIX = ('use forkserver: DataLoader(..., multiprocessing_context="forkserver"), or '
                  'torch.multiprocessing.set_start_method("forkserver") inside if __name__ == "__main__":')


@check(ID, "DataLoader start method", needs=("dataloader", "info"), order=30, fix=FORKSERVER_FIX)
def run(ctx):
    probe = ctx.probe("dataloader")
    info = ctx.probe("info")
    details = probe.to_dict()
    if probe.error:
        if "torch is not installed" in probe.error:
            from envtool.validate.checks import dataloader_skipped

            why = dataloader_skipped(ctx.spec.horovod.frameworks) if ctx.spec is not None else ""
            return finding(ID, "skipped", f"torch is not installed: no DataLoader to probe{'; ' + why if why else ''}",
                           **details)
        if probe.error.startswith("torch fails to import"):
            # no start method was tried: the import error is the finding, not the start method
            return finding(ID, "fail", probe.error, "repair torch first (reinstall it, or load the modules its "
                           "libraries need), then run doctor again", **details)
        return finding(ID, "fail", f"the DataLoader probe failed before trying a start method: {probe.error}",
                       "see the probe's error; the start method was not tested", **details)
    default = probe.default
    py = info.data.get("python") or ""
    markers = launch_markers(ctx)
    details["launch_markers"] = markers
    items = []
    hvd = (f"after hvd.init() ({probe.controller})" if probe.hvd_init
           else f"without Horovod ({probe.init_error or 'not initialized'})")
    failed = [r for r in probe.results if not r.ok]
    for r in probe.results:
        if r.ok:
            items.append(f"{r.method}: a DataLoader with 2 workers worked {hvd} in {r.seconds} s")
        else:
            items.append(f"{r.method}: a DataLoader with 2 workers FAILED {hvd}: {r.error}")
    summary = f"default start method {default!r} (Python {py or '?'})"
    if failed:
        return finding(ID, "fail", summary + "; " + ", ".join(r.method for r in failed) + " failed",
                       FORKSERVER_FIX if any(r.method == "fork" for r in failed) else
                       "see the items; run the probe's DataLoader by hand to see the worker's error",
                       items=items, **details)
    risky = default == "fork" and (not py or version_tuple(py, 2) < (3, 14))
    if risky and markers:
        items.append("an MPI/InfiniBand launch is present (" + ", ".join(markers) + "): DataLoader workers "
                     "forked after MPI/Horovod init can segfault or deadlock (OLCF's Summit page, \"Problems Distributing "
                     "Pytorch with Multiple Data Loader Workers\": https://github.com/olcf/olcf-user-docs/blob/6c07271c3d12/"
                     "software/analytics/distributed-dl-env.rst#L340-L384)")
        return finding(ID, "warn", summary + " under an MPI/InfiniBand launch", FORKSERVER_FIX, items=items,
                       **details)
    if risky:  # the verdict is ok; the caveat is an item of its own, not a second verdict on the line
        summary += "; works here"
        items.append("under an MPI/InfiniBand launch, forked DataLoader workers can hang or crash: prefer "
                     "forkserver there")
    return finding(ID, "ok", summary, items=items, **details)
