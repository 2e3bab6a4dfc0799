"""Per-rank results of a validation run (``rank_probe.py`` writes them): gather, judge, tabulate,
and the scaling numbers of the benchmark.

A run directory holds ``PHASE/rank-<r>.json`` for each phase (``probe``, ``bench-1``,
``bench-<N>``); see :mod:`envtool.validate.rank_probe` for a record's fields.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, TypedDict, Union

from envtool.validate import causes

PROBE_FILE = Path(__file__).with_name("rank_probe.py")
#: Standalone helpers the rank probe imports from its own directory (TensorFlow's checks).
PROBE_HELPERS = (Path(__file__).parent.parent / "probes" / "tf_checks.py",)
RENDEZVOUS_FILE = Path(__file__).with_name("rendezvous.py")


def install_probe(run_dir: Path) -> Path:
    """Copy ``rank_probe.py`` and the helpers it imports (:data:`PROBE_HELPERS`) into ``run_dir``
    (which compute nodes see) and return the rank probe's path."""
    dest = Path(run_dir) / "rank_probe.py"
    shutil.copyfile(PROBE_FILE, dest)
    for helper in PROBE_HELPERS:
        shutil.copyfile(helper, Path(run_dir) / helper.name)
    return dest


def install_rendezvous(run_dir: Path) -> Path:
    """Copy ``rendezvous.py`` (the Gloo/torch.distributed rendezvous of a job) into ``run_dir``."""
    dest = Path(run_dir) / "rendezvous.py"
    shutil.copyfile(RENDEZVOUS_FILE, dest)
    return dest


def probe_argv(python: str, probe: Path, run_dir: Path, phase: str, method: Optional[str] = None,
               batch_size: int = 32, steps: int = 20, import_trace: bool = False,
               framework: str = "pytorch") -> List[str]:
    """``PYTHON probe.py RUN_DIR PHASE [--framework F] [--method M] [--batch-size B --steps S]
    [--import-trace yes]`` (words); ``import_trace``: each rank also counts its metadata calls
    under the prefix (strace); ``framework``: the binding the ranks use (``pytorch``,
    ``tensorflow``; ``--framework`` is written for any but PyTorch, the probe's default)."""
    argv = [str(python), str(probe), str(run_dir), phase]
    if framework != "pytorch":
        argv += ["--framework", framework]
    if method:
        argv += ["--method", method]
    if import_trace:
        argv += ["--import-trace", "yes"]
    if phase.startswith("bench"):
        argv += ["--batch-size", str(batch_size), "--steps", str(steps)]
    return argv


def gather(run_dir: Path, phase: str) -> List[dict]:
    """The records of ``phase``, sorted by rank (unreadable files become error records)."""
    out = []
    d = Path(run_dir) / phase
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError) as exc:
            rec = {"ok": False, "error": f"unreadable result {f.name}: {exc}", "checks": {}}
        out.append(rec)
    return sorted(out, key=lambda r: (r.get("launcher_rank") if r.get("launcher_rank") is not None
                                      else r.get("rank") or 0))


def _rank(r: dict):
    """A record's rank: the launcher's, else Horovod's, else None."""
    return r.get("launcher_rank") if r.get("launcher_rank") is not None else r.get("rank")


def _where(r: dict) -> str:
    """``rank R on HOST (FRAMEWORK)`` for a record (the framework when the record names it),
    ``?`` for what it lacks."""
    rank = _rank(r)
    framework = f" ({r['framework']})" if r.get("framework") else ""
    return f"rank {rank if rank is not None else '?'} on {r.get('host', '?')}{framework}"


def judge(records: List[dict], ranks: int, expected_warnings: Sequence[str] = ()) -> List[str]:
    """Problems, one line each, naming rank and host: failed checks, errors, ranks that never
    reported, and warnings that importing the framework and Horovod printed on a rank.

    Args:
        records: from :func:`gather`.
        ranks: how many ranks the step launched.
        expected_warnings: regular expressions (``re.search``) of import warnings that are not
            problems (a spec's ``expect.import_warnings``).
    """
    import re

    patterns = [re.compile(p) for p in expected_warnings]
    problems = []
    seen = set()
    for r in records:
        rank = _rank(r)
        seen.add(rank)
        where = _where(r)
        if r.get("rank") is not None and r.get("launcher_rank") is not None and r["rank"] != r["launcher_rank"]:
            problems.append(f"{where}: the launcher started it as rank {r['launcher_rank']}, Horovod sees rank "
                            f"{r['rank']} of {r.get('size')} (MPI did not initialise through the launcher: "
                            f"a PMI mismatch, e.g. srun --mpi)")
        for w in r.get("import_warnings") or ():
            if not any(p.search(w) for p in patterns):
                modules = (r.get("import") or {}).get("modules") or ("torch", "horovod.torch")
                problems.append(f"{where}: importing {' and '.join(modules)} printed a warning: {w}")
        if r.get("error"):
            problems.append(f"{where}: {r['error']}")
            continue
        for name, c in (r.get("checks") or {}).items():
            if not c.get("ok"):
                problems.append(f"{where}: {name} failed: {c.get('error')}")
        if r.get("size") is not None and r.get("size") != ranks:
            problems.append(f"{where}: Horovod size is {r.get('size')}, {ranks} ranks were launched")
    for rank in range(ranks):
        if rank not in seen:
            problems.append(f"rank {rank}: no result (it did not start or was killed; see the job output)")
    return problems


def shutdown_warnings(records: List[dict]) -> List[str]:
    """One line per rank whose Horovod shutdown (``MPI_Finalize`` under MPI) did not return in time
    after its checks passed (the record's ``shutdown``, written by ``rank_probe.bounded_shutdown``):
    a training script on this MPI may hang at its exit and hold its nodes until the job's limit."""
    out = []
    for r in records:
        down = r.get("shutdown") or {}
        if down.get("ok") is False:
            out.append(f"{_where(r)}: {down.get('error')}; "
                       "it left without it: a training script on this MPI may hang at its exit until the job's "
                       "time limit")
    return out


def errors_in_output(path: Path, limit: int = 3) -> List[str]:
    """Up to ``limit`` distinct error lines of a job's output (MPI aborts, tracebacks' last lines),
    for ranks that died before writing a result. Warnings are skipped; lines that differ only in
    Open MPI's ``[host:pid]`` prefix count once (every rank prints the same message)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return []
    import re

    out: List[str] = []
    seen = set()
    for line in text.splitlines():
        s = line.strip()
        low = s.lower()
        if not s or "warning" in low:
            continue
        # the same message from every rank differs only in srun's "TASK: " label and Open MPI's
        # "[host:pid]" prefix
        key = re.sub(r"^\[[^\]]*:\d+\]\s*", "", re.sub(r"^\d+:\s*", "", s))
        if ("error" in low or "abort" in low or "not built with" in low) and key not in seen:
            seen.add(key)
            out.append(causes.excerpt(s))
            if len(out) >= limit:
                break
    return out


def last_lines(text: str) -> Dict[int, str]:
    """The line that names each task's failure, else the last non-empty line it printed, from
    output that srun labelled with the task number (``--label``/``SLURM_LABELIO``: ``TASK: line``,
    the number right-aligned): task → line (at most 200 characters, cut by
    :func:`envtool.validate.causes.excerpt` so that the cause stays in)."""
    import re

    from envtool.core import external

    out: Dict[int, str] = {}
    named = set()
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+): ?(.*)$", line)
        # slurmstepd's own lines (a step being cancelled) are not what the rank printed
        task = external.small_int(m.group(1)) if m else None
        if m and task is not None and m.group(2).strip() and not m.group(2).startswith("slurmstepd"):
            said = m.group(2).strip()
            if causes.read(said) is not None:
                named.add(task)
            elif task in named:
                continue  # a later line (a traceback's frame, a stack dump) does not replace the cause
            out[task] = causes.excerpt(said)
    return out


def failure_causes(text: str, shm_free_mib: Optional[float] = None) -> List[str]:
    """One line per cause the job output names (:mod:`envtool.validate.causes`), with the node
    and rank where the output says them: ``node2 rank 1: died of SIGSEGV``,
    ``rank 0: Gloo rendezvous timed out after 30 s waiting for key(s) [2], port 41777 on node1``.
    ``text`` is the decoded job output; srun's ``TASK:`` labels give the rank."""
    import re

    from envtool.core import external

    out: List[str] = []
    seen = set()
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+): ?(.*)$", line)
        task = external.small_int(m.group(1)) if m else None
        said = m.group(2) if m and task is not None else line
        c = causes.read(said, shm_free_mib)
        if c is None:
            continue
        rank = c.task if c.task is not None else task
        where = " ".join(w for w in ((c.node or ""), (f"rank {rank}" if rank is not None else "")) if w)
        item = f"{where}: {c.text}" if where else c.text
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def table(records: List[dict]) -> str:
    """One line per rank: rank, host, local rank, framework, controller (``torch/BACKEND`` for
    torch.distributed: the backend that rank used), interface, allreduce,
    DataLoader (PyTorch) or Keras ``model.fit`` (TensorFlow), import seconds and metadata calls
    under the prefix (when recorded), status (the interface the controller used between nodes and
    how it was chosen; ``-`` where the probe does not know it)."""
    timed = any(r.get("import") for r in records)
    keras = any("keras_fit" in (r.get("checks") or {}) for r in records)
    rows = [("rank", "host", "local", "framework", "controller", "interface", "allreduce",
             "keras fit" if keras else "dataloader")
            + (("import s", "metadata calls") if timed else ()) + ("status",)]
    for r in records:
        c = r.get("checks") or {}
        ar = c.get("allreduce_cpu")
        ar_s = "-" if ar is None else (f"ok ({ar['value']:g})" if ar.get("ok") else "FAILED")
        if c.get("backend") and not c["backend"].get("ok"):
            ar_s = "backend not available"
        if c.get("allreduce_gpu"):
            gpu_s = "gpu " + ("ok" if c["allreduce_gpu"].get("ok") else "FAILED")
            ar_s = gpu_s if ar is None else ar_s + ", " + gpu_s
        dl = c.get("dataloader")
        dl_s = "-" if dl is None else (f"{dl['method']} ok ({dl['seconds']:.2f} s)" if dl.get("ok")
                                       else f"{dl.get('method')} FAILED")
        kf = c.get("keras_fit")
        if keras:
            dl_s = "-" if kf is None else (f"ok, weights agree ({kf.get('seconds', 0):.2f} s)" if kf.get("ok")
                                           else "FAILED")
        status = "ok" if r.get("ok") else ("FAILED: " + (r.get("error") or "a check failed"))[:80]
        rank = r.get("rank", r.get("launcher_rank"))
        local = r.get("local_rank", r.get("launcher_local_rank"))
        imp: Tuple[str, ...] = ()
        if timed:
            secs = ((r.get("import") or {}).get("seconds") or {}).get("total")
            meta = (r.get("import") or {}).get("metadata") or {}
            imp = ("-" if secs is None else f"{secs:.2f}",
                   str(meta["calls"]) if "calls" in meta else ("no strace" if "strace not found" in
                                                               str(meta.get("error")) else "-"))
        rows.append((str(rank if rank is not None else "?"), str(r.get("host", "?")),
                     str(local if local is not None else "?"), str(r.get("framework") or "-"),
                     str(r.get("controller", "-")) + (f"/{r['backend']}" if r.get("controller") == "torch"
                                                      and r.get("backend") else ""),
                     str(r.get("iface") or "-"), ar_s, dl_s)
                    + imp + (status,))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row[:-1], widths)) + "  " + row[-1] for row in rows)


class ScalingPoint(TypedDict):
    """One point of :func:`scaling`: ranks that reported, samples/s (per rank and total), the
    per-rank batch size and the device (``cpu``/``cuda``; None where the probe did not say)."""

    ranks: int
    samples_per_sec_per_rank: float
    samples_per_sec_total: float
    batch_size: int
    device: Optional[str]


class _ScalingBase(TypedDict):
    points: List[ScalingPoint]
    efficiency: Optional[float]


class Scaling(_ScalingBase, total=False):
    """What :func:`scaling` returns; ``controller`` and ``framework`` (whose step was timed:
    ``pytorch``, ``tensorflow``) are added by the caller that ran it."""

    controller: str
    framework: str


def scaling(one: List[dict], many: List[dict]) -> Scaling:
    """Samples/s per rank at 1 rank and at N ranks, and the scaling efficiency.

    Efficiency = (mean samples/s per rank at N) / (samples/s at 1 rank): 1.0 is perfect weak
    scaling (each rank as fast as one alone), the number OLCF's "Scaling Deep Learning Applications on Summit" talk (J. Yin) plots.

    Returns:
        ``{"points": [{"ranks", "samples_per_sec_per_rank", "samples_per_sec_total"}], "efficiency"}``
        (efficiency None when a point is missing).
    """
    points: List[ScalingPoint] = []
    for recs in (one, many):
        rates = [r["checks"]["benchmark"]["samples_per_sec"] for r in recs
                 if r.get("ok") and (r.get("checks") or {}).get("benchmark")]
        if rates:
            n = len(rates)
            points.append({"ranks": n, "samples_per_sec_per_rank": sum(rates) / n,
                           "samples_per_sec_total": sum(rates),
                           "batch_size": recs[0]["checks"]["benchmark"]["batch_size"],
                           "device": recs[0]["checks"]["benchmark"].get("device")})
    eff = None
    if len(points) == 2 and points[0]["samples_per_sec_per_rank"]:
        eff = points[1]["samples_per_sec_per_rank"] / points[0]["samples_per_sec_per_rank"]
    return {"points": points, "efficiency": eff}


def format_scaling(result: Scaling) -> str:
    """``ranks  samples/s per rank  total  efficiency`` lines (after a line naming the framework's
    step when it is not PyTorch's: ``benchmark: a synthetic Keras step (tensorflow)``)."""
    framework = result.get("framework") or "pytorch"
    lines = [] if framework == "pytorch" else [f"benchmark: a synthetic Keras step ({framework})"]
    lines += [f"{'ranks':>5}  {'samples/s per rank':>18}  {'samples/s total':>15}  efficiency"]
    base = result["points"][0]["samples_per_sec_per_rank"] if result["points"] else None
    for p in result["points"]:
        eff = p["samples_per_sec_per_rank"] / base if base else float("nan")
        lines.append(f"{p['ranks']:>5}  {p['samples_per_sec_per_rank']:>18.1f}  {p['samples_per_sec_total']:>15.1f}"
                     f"  {eff:>9.0%}")
    return "\n".join(lines)


def plot(result: Scaling, path: Path) -> Path:
    """Draw samples/s (total and per rank) and efficiency against ranks into a PNG.

    matplotlib is imported here only (``--plot``), with the non-interactive Agg backend.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = result["points"]
    ranks = [p["ranks"] for p in pts]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax1.plot(ranks, [p["samples_per_sec_total"] for p in pts], "o-", label="total")
    ax1.plot(ranks, [p["samples_per_sec_per_rank"] for p in pts], "s--", label="per rank")
    ax1.set_xlabel("ranks")
    ax1.set_ylabel("samples/s")
    ax1.set_xticks(ranks)
    ax1.legend()
    base = pts[0]["samples_per_sec_per_rank"] if pts else 1.0
    ax2.plot(ranks, [p["samples_per_sec_per_rank"] / base for p in pts], "o-")
    ax2.axhline(1.0, color="grey", linewidth=0.8)
    ax2.set_ylim(0, 1.1 * max([1.0] + [p["samples_per_sec_per_rank"] / base for p in pts]))
    ax2.set_xlabel("ranks")
    ax2.set_ylabel("scaling efficiency")
    ax2.set_xticks(ranks)
    fig.suptitle("synthetic data-parallel step (envtool validate --benchmark)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


# Where ``import torch`` is slow at scale. OLCF measured it with 8 nodes x 8 ranks on Frontier:
# 2 s from node-local NVMe, 51 s from Lustre, 3 min 56 s from NFS (olcf/olcf-user-docs,
# software/python/sbcast_conda.rst, https://docs.olcf.ornl.gov/software/python/sbcast_conda.html).
# 10 s is 5x the node-local time and a fifth of the Lustre one: above it, on a shared file system,
# staging the environment to node-local storage is worth the copy.
SLOW_IMPORT_SECONDS = 10.0
# File system types (as /proc/self/mountinfo names them) that are shared over a network.
NETWORK_FS_TYPES = frozenset({"nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "fuse.ceph-fuse", "cifs", "smb3",
                              "fuse.sshfs", "fuse.glusterfs", "glusterfs", "panfs", "wekafs", "9p", "afs", "orangefs",
                              "pvfs2", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs", "dvs"})


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """The ``q``-th percentile (0-100) by the nearest-rank method (the smallest value with at
    least q % of the values at or below it); None for no values. With fewer than 100 ranks the
    99th percentile is the maximum."""
    import math

    v = sorted(values)
    if not v:
        return None
    return v[max(0, math.ceil(q / 100.0 * len(v)) - 1)]


class Stats(TypedDict):
    """p50, p99 (nearest rank, :func:`percentile`) and maximum of some values."""

    p50: float
    p99: float
    max: float


def _stats(values: Sequence[float]) -> Optional[Stats]:
    p50, p99 = percentile(values, 50), percentile(values, 99)
    if p50 is None or p99 is None:
        return None
    return {"p50": p50, "p99": p99, "max": max(values)}


class _ImportSummaryBase(TypedDict):
    ranks: int
    hosts: List[str]
    seconds: Stats
    torch_seconds: Optional[Stats]
    metadata_calls: Optional[Stats]
    metadata_failed: Optional[Stats]
    untraced: List[str]
    prefix: Union[str, List[str]]
    fs_types: List[str]
    mounts: List[str]
    slow_seconds: float
    shared_fs: List[str]
    slow: bool
    fix: List[str]


class ImportSummary(_ImportSummaryBase, total=False):
    """What :func:`import_summary` returns (see there); ``controller`` is added by the caller
    whose run it summarises; ``modules``: what the ranks imported, in order."""

    controller: str
    modules: List[str]


def import_summary(records: List[dict], slow_seconds: float = SLOW_IMPORT_SECONDS) -> Optional[ImportSummary]:
    """Import time and metadata calls over the ranks that recorded them (``rank_probe`` field
    ``import``), and the staging fix when the import is slow on a shared file system.

    Args:
        records: from :func:`gather`.
        slow_seconds: p99 import time (s) above which an import from a network file system is
            reported with the staging fix (default :data:`SLOW_IMPORT_SECONDS`, from OLCF's
            measurement cited there).
    Returns:
        None when no rank recorded an import; else ``{"ranks", "modules" (what the ranks imported:
        ``torch``, ``horovod.torch``; or ``tensorflow``, ``horovod.tensorflow``,
        ``horovod.tensorflow.keras``), "seconds": {"p50", "p99", "max"} (all of them together,
        wall clock s), "torch_seconds" (None for TensorFlow), "metadata_calls":
        {"p50", "p99", "max"} or None, "metadata_failed", "untraced": ["rank R on HOST: why"],
        "prefix", "fs_types", "mounts", "slow" (bool), "slow_seconds", "fix": [command lines]}``.
    """
    timed = [r for r in records if ((r.get("import") or {}).get("seconds") or {}).get("total") is not None]
    if not timed:
        return None
    traced = [r for r in timed if "calls" in (r["import"].get("metadata") or {})]
    untraced = []
    for r in timed:
        err = (r["import"].get("metadata") or {}).get("error")
        if err:
            rank = r.get("rank", r.get("launcher_rank"))
            untraced.append(f"rank {rank if rank is not None else '?'} on {r.get('host', '?')}: {err}")
    prefixes = sorted({r["import"].get("prefix") for r in timed if r["import"].get("prefix")})
    fs_types = sorted({r["import"].get("fs_type") for r in timed if r["import"].get("fs_type")})
    seconds = _stats([r["import"]["seconds"]["total"] for r in timed])
    if seconds is None:  # every record in ``timed`` has a total
        return None
    shared = [t for t in fs_types if t in NETWORK_FS_TYPES]
    slow = bool(shared) and seconds["p99"] > slow_seconds
    return {
        "ranks": len(timed),
        "modules": list(timed[0]["import"].get("modules") or ("torch", "horovod.torch")),
        "hosts": sorted({str(r.get("host", "?")) for r in timed}),
        "seconds": seconds,
        "torch_seconds": _stats([r["import"]["seconds"].get("torch") for r in timed
                                 if r["import"]["seconds"].get("torch") is not None]),
        "metadata_calls": _stats([r["import"]["metadata"]["calls"] for r in traced]),
        "metadata_failed": _stats([r["import"]["metadata"]["failed"] for r in traced]),
        "untraced": untraced,
        "prefix": prefixes[0] if len(prefixes) == 1 else prefixes,
        "fs_types": fs_types,
        "mounts": sorted({r["import"].get("mount") for r in timed if r["import"].get("mount")}),
        "slow_seconds": slow_seconds,
        "shared_fs": shared,
        "slow": slow,
        "fix": staging_fix(prefixes[0]) if slow and len(prefixes) == 1 else [],
    }


def staging_fix(prefix: str) -> List[str]:
    """The commands (shell-quoted) that pack the environment at ``prefix`` into one file and run
    the job with it staged to node-local storage (``envtool pack``, ``validate --stage FILE``; the
    validation's other options, ``--site``/``--nodes``, as in the run that was slow)."""
    import shlex

    name = Path(prefix).name or "env"
    packed = f"{name}.squashfs"
    return [shlex.join(["envtool", "pack", str(prefix), "--format", "squashfs", "-o", packed]),
            shlex.join(["envtool", "validate", "--prefix", str(prefix), "--submit", "--stage", packed])]


def format_import(summary: ImportSummary) -> str:
    """Lines for the import summary: times and metadata calls (p50/p99/max), ranks whose calls
    could not be counted, and the staging fix when the import is slow on a shared file system."""
    s = summary["seconds"]
    where = summary["prefix"] if isinstance(summary["prefix"], str) else ", ".join(summary["prefix"])
    fs = ", ".join(summary["fs_types"]) or "?"
    modules = " + ".join(summary.get("modules") or ("torch", "horovod.torch"))
    lines = [f"import {modules} on {summary['ranks']} rank(s) (prefix {where}, {fs}): "
             f"p50 {s['p50']:.2f} s, p99 {s['p99']:.2f} s, max {s['max']:.2f} s"]
    m = summary.get("metadata_calls")
    if m:
        f = summary.get("metadata_failed")
        lines.append(f"metadata calls under the prefix per rank: p50 {m['p50']}, p99 {m['p99']}, max {m['max']}"
                     + (f" (failed lookups p50 {f['p50']})" if f else ""))
    for u in summary.get("untraced") or ():
        lines.append(f"metadata calls not counted: {u}")
    if summary.get("slow"):
        lines.append(f"SLOW: p99 import {s['p99']:.1f} s > {summary['slow_seconds']:g} s from a shared file system "
                     f"({', '.join(summary['shared_fs'])}); every rank reads the environment from it. OLCF measured "
                     f"import torch at 8x8 ranks: 2 s from node-local NVMe, 51 s from Lustre, 3 min 56 s from NFS "
                     f"(olcf-user-docs software/python/sbcast_conda.rst). Stage it to node-local storage:")
        lines += [f"  {c}" for c in summary.get("fix") or ()]
    return "\n".join(lines)
