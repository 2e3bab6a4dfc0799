#!/usr/bin/env python3
"""Benchmark: ``doctor --script`` scan time and memory per MB of source at 1, 2 and 4 MB, side by side.

Issue 12 measured the old scan growing quadratically (1 MB: 10 s, 2 MB: 39 s, 5 MB: 247 s).
This script generates training-script source of each size from one block of typical code
(imports, a dead ``mp._supports_context`` guard, DataLoaders through ``**kwargs``, an optimizer,
a rank-guarded checkpoint helper and its call, a broadcast), in two shapes: ``functions`` (the
block repeated as separate functions) and ``one-function`` (every block inside a single
function body, the shape that made the old early-return check quadratic). For each shape and
size it times :func:`envtool.checks.scan.scan_source` (best of ``--runs``, in this process,
sizes interleaved so that all see the same load) and prints seconds, seconds per MB and the
ratio of each size's seconds per MB to the 1 MB one: linear growth keeps the ratios near 1.
Memory: how far the first scan in a fresh process raises its peak resident memory (``ru_maxrss``)
above its resident memory before the scan, in MiB per MiB of source (the lowest of the runs); with
``--tracemalloc`` also the peak of Python's own allocations (:mod:`tracemalloc`, one more scan, slow).

Usage: python benchmarks/bench_scan.py [--runs 3] [--sizes 1 2 4] [--compare REV] [--json]
  --compare REV also measures git revision REV side by side with this checkout: for a revision
  with the scan package (envtool/checks/scan/, issue 28 on), REV's envtool/ is extracted with
  ``git archive`` and every measurement of both runs in a fresh process of its own, interleaved
  (REV, this checkout, REV, ...), on the same texts; the table gives REV's rows and the ratios of
  this checkout to REV. For an older revision (envtool/checks/scan.py, e.g. the one before issue
  18), that scan.py is timed in this process at the smallest size only (it takes minutes beyond 1 MB).
Exit status: 0, or 1 when a ratio exceeds --max-ratio (default 1.5).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BLOCK = '''
def setup_{n}(args, dataset):
    kwargs = {{"num_workers": 4, "pin_memory": True}} if args.cuda else {{}}
    if (kwargs.get("num_workers", 0) > 0 and hasattr(mp, "_supports_context") and
            mp._supports_context and "forkserver" in mp.get_all_start_methods()):
        kwargs["multiprocessing_context"] = "forkserver"
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, **kwargs)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    return loader, model, optimizer


def save_{n}(model, epoch):
    if hvd.rank() != 0:
        return
    torch.save(model.state_dict(), "checkpoint-%d.pt" % epoch)


def train_{n}(args, dataset):
    loader, model, optimizer = setup_{n}(args, dataset)
    for epoch in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        save_{n}(model, epoch)
'''

ONE_BODY = '''
    kwargs_{n} = {{"num_workers": 4}}
    if hasattr(mp, "_supports_context") and mp._supports_context:
        kwargs_{n}["multiprocessing_context"] = "forkserver"
    loader_{n} = torch.utils.data.DataLoader(dataset, batch_size=32, **kwargs_{n})
    optimizer_{n} = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size())
    for x, y in loader_{n}:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer_{n}.step()
    if hvd.rank() == 0:
        torch.save(model.state_dict(), "checkpoint-{n}.pt")
    torch.save(model.state_dict(), "every-rank-{n}.pt")
'''

HEAD = "import torch\nimport torch.multiprocessing as mp\nimport horovod.torch as hvd\n\nhvd.init()\n"


def source(shape: str, megabytes: float) -> str:
    """Python source of about ``megabytes`` MB (10**6 bytes) in the given shape."""
    target = int(megabytes * 1_000_000)
    parts = [HEAD] if shape == "functions" else [HEAD, "\n\ndef main(args, dataset, model):\n"]
    size, n = sum(map(len, parts)), 0
    block = BLOCK if shape == "functions" else ONE_BODY
    while size < target:
        piece = block.format(n=n)
        parts.append(piece)
        size += len(piece)
        n += 1
    return "".join(parts)


def load_scan(rev):
    """The scan module of git revision ``rev`` (None: this checkout's)."""
    if rev is None:
        from envtool.checks import scan
        return scan
    got = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:envtool/checks/scan.py"],
                         capture_output=True, text=True)
    if got.returncode != 0:  # from issue 28 on the scan is a package (envtool/checks/scan/)
        raise SystemExit(f"--compare {rev}: no envtool/checks/scan.py there (the scan became the package "
                         "envtool/checks/scan/ in issue 28): give a revision from before it, or time that "
                         "revision's own checkout with this script")
    text = got.stdout
    path = Path(tempfile.mkdtemp()) / "scan_old.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("scan_old", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["scan_old"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def timed(scan, text: str) -> float:
    started = time.perf_counter()
    scan.scan_source(text, "bench.py")
    return time.perf_counter() - started


def peak_bytes(scan, text: str) -> int:
    """The peak of the memory Python allocates while ``scan`` scans ``text`` (tracemalloc, which
    counts the parser's own working memory as well as the objects it returns)."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        scan.scan_source(text, "bench.py")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def rss_bytes() -> int:
    """This process's resident memory now (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def one(root: str, shape: str, mb: float, runs: int, traced: bool) -> dict:
    """Measure one text in this (fresh) process with the envtool under ``root``: the seconds of the
    first scan and the growth of the process's peak resident memory over its resident memory before
    it (``peak``); the best seconds of ``runs`` scans; with ``traced``, also the tracemalloc peak of
    one more scan (``traced``; slow)."""
    import resource

    sys.path.insert(0, root)
    for name in [n for n in sys.modules if n == "envtool" or n.startswith("envtool.")]:
        del sys.modules[name]
    from envtool.checks import scan
    text = source(shape, mb)
    scan.scan_source("import os\n", "warm.py")  # imports the rules: not counted
    before = rss_bytes()
    best = timed(scan, text)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    best = min([best] + [timed(scan, text) for _ in range(runs - 1)])
    return {"seconds": best, "peak": peak, "traced": peak_bytes(scan, text) if traced else None,
            "chars": len(text), "root": root}


def measure(root: Path, shape: str, mb: float, runs: int = 1, traced: bool = False) -> dict:
    """:func:`one` in a fresh Python process (so that no earlier scan's memory counts)."""
    got = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one", shape, str(mb), "--root", str(root),
                          "--runs", str(runs)] + (["--tracemalloc"] if traced else []), capture_output=True, text=True)
    if got.returncode != 0:
        raise SystemExit(f"measuring {root} ({shape}, {mb} MB) failed:\n{got.stderr}")
    return json.loads(got.stdout)


def extract(rev: str) -> Path:
    """REV's ``envtool/`` package, extracted (``git archive``) into a new temporary directory."""
    d = Path(tempfile.mkdtemp(prefix="bench-scan-"))
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "envtool"], capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"--compare {rev}: git archive failed: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(d)], input=archive.stdout, check=True)
    return d


def is_package_rev(rev: str) -> bool:
    """Whether revision ``rev`` has the scan package (``envtool/checks/scan/__init__.py``)."""
    return subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{rev}:envtool/checks/scan/__init__.py"],
                          capture_output=True).returncode == 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 2, 4], help="MB (default 1 2 4)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per size, best kept (default 3)")
    parser.add_argument("--max-ratio", type=float, default=1.5)
    parser.add_argument("--compare", metavar="REV", help="also measure this git revision side by side")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="also measure the peak of Python's allocations with tracemalloc (one more scan, slow)")
    parser.add_argument("--one", nargs=2, metavar=("SHAPE", "MB"), help=argparse.SUPPRESS)
    parser.add_argument("--root", default=str(REPO), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.root, args.one[0], float(args.one[1]), args.runs, args.tracemalloc)))
        return 0
    old_root = extract(args.compare) if args.compare and is_package_rev(args.compare) else None
    roots = ([old_root] if old_root else []) + [REPO]
    rows, worst = [], 0.0
    for shape in ("functions", "one-function"):
        got = {(r, mb): {"seconds": float("inf")} for r in roots for mb in args.sizes}
        for _ in range(args.runs):
            for mb in args.sizes:  # interleaved: every size and revision sees the same machine load
                for r in roots:
                    m = measure(r, shape, mb, traced=args.tracemalloc)
                    old = got[(r, mb)]
                    if m["seconds"] < old["seconds"]:
                        got[(r, mb)] = m
                        if "peak" in old:  # the lowest peak seen: the least disturbed by the machine
                            m["peak"] = min(m["peak"], old["peak"])
                    else:
                        old["peak"] = min(m["peak"], old["peak"])
        for r in roots:
            first = got[(r, args.sizes[0])]
            base = first["seconds"] / (first["chars"] / 1e6)
            for mb in args.sizes:
                m = got[(r, mb)]
                per_mb = m["seconds"] / (m["chars"] / 1e6)
                ratio = per_mb / base
                if r == REPO:
                    worst = max(worst, ratio)
                row = {"shape": shape, "mb": round(m["chars"] / 1e6, 3), "seconds": round(m["seconds"], 3),
                       "seconds_per_mb": round(per_mb, 3), "ratio_to_smallest": round(ratio, 2),
                       "peak_mib_per_mib": round(m["peak"] / m["chars"], 1),
                       "traced_mib_per_mib": None if m.get("traced") is None else round(m["traced"] / m["chars"], 1),
                       "revision": args.compare if r == old_root else "this checkout"}
                if old_root and r == REPO:
                    o = got[(old_root, mb)]
                    row["time_vs_rev"] = round(m["seconds"] / o["seconds"], 2)
                    row["memory_vs_rev"] = round(m["peak"] / o["peak"], 2)
                    if m.get("traced") and o.get("traced"):
                        row["traced_vs_rev"] = round(m["traced"] / o["traced"], 2)
                rows.append(row)
                if not args.json:
                    print(f"  ... {shape} {mb} MB {row['revision']}: {m['seconds']:.2f} s, "
                          f"{row['peak_mib_per_mib']} MiB/MiB", file=sys.stderr, flush=True)
        if args.compare and not old_root:
            old = load_scan(args.compare)
            mb = args.sizes[0]
            text = source(shape, mb)
            t_old = timed(old, text)
            rows.append({"shape": shape, "mb": round(len(text) / 1e6, 3), "seconds": round(t_old, 3),
                         "seconds_per_mb": round(t_old / (len(text) / 1e6), 3),
                         "ratio_to_smallest": None, "peak_mib_per_mib": None, "revision": args.compare})
    if args.json:
        print(json.dumps({"rows": rows, "worst_ratio": round(worst, 2), "max_ratio": args.max_ratio}, indent=2))
    else:
        print(f"{'shape':<13} {'MB':>6} {'seconds':>9} {'s/MB':>8} {'ratio':>6} {'MiB/MiB':>8} {'t/rev':>6} "
              f"{'mem/rev':>7}  revision")
        for r in rows:
            ratio = "" if r["ratio_to_smallest"] is None else f"{r['ratio_to_smallest']:.2f}"
            peak = "" if r["peak_mib_per_mib"] is None else f"{r['peak_mib_per_mib']:.1f}"
            traced = "" if r.get("traced_mib_per_mib") is None else f" traced {r['traced_mib_per_mib']:.1f} MiB/MiB"
            print(f"{r['shape']:<13} {r['mb']:>6.2f} {r['seconds']:>9.3f} {r['seconds_per_mb']:>8.3f} {ratio:>6} "
                  f"{peak:>8} {r.get('time_vs_rev', ''):>6} {r.get('memory_vs_rev', ''):>7}  {r['revision']}{traced}")
        print(f"worst s/MB ratio to the smallest size (this checkout): {worst:.2f} (limit {args.max_ratio})")
        print("MiB/MiB: growth of the peak resident memory during a scan in a fresh process, per MiB of source; "
              "t/rev, mem/rev: this checkout's seconds and peak over those of --compare REV")
    return 0 if worst <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
