"""Per-rank results of a validation run (``rank_probe.py`` writes them): gather, judge, tabulate,
and the scaling numbers of the benchmark.

A run directory holds ``PHASE/rank-<r>.json`` for each phase (``probe``, ``bench-1``,
``bench-<N>``); see :mod:`envtool.validate.rank_probe` for a record's fields.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Sequence

PROBE_FILE = Path(__file__).with_name("rank_probe.py")


def install_probe(run_dir: Path) -> Path:
    """Copy ``rank_probe.py`` into ``run_dir`` (which compute nodes see) and return its path."""
    dest = Path(run_dir) / "rank_probe.py"
    shutil.copyfile(PROBE_FILE, dest)
    return dest


def probe_argv(python: str, probe: Path, run_dir: Path, phase: str, method: Optional[str] = None,
               batch_size: int = 32, steps: int = 20) -> List[str]:
    """``PYTHON probe.py RUN_DIR PHASE [--method M] [--batch-size B --steps S]`` (words)."""
    argv = [str(python), str(probe), str(run_dir), phase]
    if method:
        argv += ["--method", method]
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
        rank = r.get("launcher_rank") if r.get("launcher_rank") is not None else r.get("rank")
        seen.add(rank)
        where = f"rank {rank if rank is not None else '?'} on {r.get('host', '?')}"
        if r.get("rank") is not None and r.get("launcher_rank") is not None and r["rank"] != r["launcher_rank"]:
            problems.append(f"{where}: the launcher started it as rank {r['launcher_rank']}, Horovod sees rank "
                            f"{r['rank']} of {r.get('size')} (MPI did not initialise through the launcher: "
                            f"a PMI mismatch, e.g. srun --mpi)")
        for w in r.get("import_warnings") or ():
            if not any(p.search(w) for p in patterns):
                problems.append(f"{where}: importing torch and horovod.torch printed a warning: {w}")
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
        # the same message from every rank differs only in Open MPI's "[host:pid]" prefix
        key = re.sub(r"^\[[^\]]*:\d+\]\s*", "", s)
        if ("error" in low or "abort" in low or "not built with" in low) and key not in seen:
            seen.add(key)
            out.append(s[:200])
            if len(out) >= limit:
                break
    return out


def table(records: List[dict]) -> str:
    """One line per rank: rank, host, local rank, controller, allreduce, DataLoader, status."""
    rows = [("rank", "host", "local", "controller", "allreduce", "dataloader", "status")]
    for r in records:
        c = r.get("checks") or {}
        ar = c.get("allreduce_cpu")
        ar_s = "-" if ar is None else (f"ok ({ar['value']:g})" if ar.get("ok") else "FAILED")
        if c.get("allreduce_gpu"):
            ar_s += ", gpu " + ("ok" if c["allreduce_gpu"].get("ok") else "FAILED")
        dl = c.get("dataloader")
        dl_s = "-" if dl is None else (f"{dl['method']} ok ({dl['seconds']:.2f} s)" if dl.get("ok")
                                       else f"{dl.get('method')} FAILED")
        status = "ok" if r.get("ok") else ("FAILED: " + (r.get("error") or "a check failed"))[:80]
        rank = r.get("rank", r.get("launcher_rank"))
        local = r.get("local_rank", r.get("launcher_local_rank"))
        rows.append((str(rank if rank is not None else "?"), str(r.get("host", "?")),
                     str(local if local is not None else "?"), str(r.get("controller", "-")), ar_s, dl_s, status))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row[:-1], widths)) + "  " + row[-1] for row in rows)


def scaling(one: List[dict], many: List[dict]) -> Dict[str, object]:
    """Samples/s per rank at 1 rank and at N ranks, and the scaling efficiency.

    Efficiency = (mean samples/s per rank at N) / (samples/s at 1 rank): 1.0 is perfect weak
    scaling (each rank as fast as one alone), the number OLCF's "Scaling Deep Learning Applications on Summit" talk (J. Yin) plots.

    Returns:
        ``{"points": [{"ranks", "samples_per_sec_per_rank", "samples_per_sec_total"}], "efficiency"}``
        (efficiency None when a point is missing).
    """
    points = []
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


def format_scaling(result: Dict[str, object]) -> str:
    """``ranks  samples/s per rank  total  efficiency`` lines."""
    lines = [f"{'ranks':>5}  {'samples/s per rank':>18}  {'samples/s total':>15}  efficiency"]
    base = result["points"][0]["samples_per_sec_per_rank"] if result["points"] else None
    for p in result["points"]:
        eff = p["samples_per_sec_per_rank"] / base if base else float("nan")
        lines.append(f"{p['ranks']:>5}  {p['samples_per_sec_per_rank']:>18.1f}  {p['samples_per_sec_total']:>15.1f}"
                     f"  {eff:>9.0%}")
    return "\n".join(lines)


def plot(result: Dict[str, object], path: Path) -> Path:
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
