#!/usr/bin/env python3
"""Benchmark: ``envtool validate --submit`` over 1, 2 and 3 nodes of the test cluster
(tests/helpers/cluster.py), side by side: the job's wall time, and per controller (Horovod MPI,
Horovod Gloo, torch.distributed gloo) the allreduce sweep's latency and bus bandwidth
(nccl-tests' definition) at a few sizes.

One 3-node cluster is started (real Slurm, each node its own network, UTS and mount namespace on
one machine) and torn down at the end; the validation runs on it with ``--nodes 1``, ``2``, ``3``
and ``--ranks-per-node`` ranks on each node.

What the numbers mean: every "node" is a namespace of this one machine and the "network" a Linux
bridge, so the ranks share its cores and memory bandwidth. They show that the mechanism works on
1, 2 and 3 nodes (the launch, the rendezvous, the interface, the verified sweep) and what it costs
here; they say nothing about how Horovod or torch.distributed scale on a real fabric.

Usage: python benchmarks/bench_multinode_scaling.py --prefix ENV [--ranks-per-node 2]
       [--sweep-max 64MiB] [--sizes 8B,64KiB,64MiB] [--root DIR] [--json]
(root only: the cluster needs namespaces; ENV is a cpu-horovod environment on the shared file
system, e.g. /work/envs/cpu-horovod.)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from envtool.spec.sites import parse_size  # noqa: E402
from envtool.validate.sweep import human_size  # noqa: E402


def _site(root: Path, cpus: int) -> Path:
    path = root / "testcluster.yaml"
    path.write_text(f"""name: testcluster
summary: the multi-node Slurm of the tests (namespaces on one machine)
platforms: [linux-64]
scheduler: slurm
launcher: "srun -n {{ranks}}"
gpus_per_node: 0
batch:
  cpus_per_node: {cpus}
  mpi: pmix
""")
    return path


def run(prefix: Path, ranks_per_node: int, sweep_max: str, root: Path, counts=(1, 2, 3)) -> dict:
    """Start a 3-node cluster under ``root``, validate on 1, 2, 3 nodes, stop it; the results."""
    from helpers import cluster as tc

    why = tc.ensure_installed() or tc.can_make_namespaces()
    if why:
        raise SystemExit(f"bench_multinode_scaling: no test cluster here: {why}")
    c = tc.start(root / "cluster", nodes=max(counts))
    out = {"load_before": os.getloadavg(), "points": []}
    try:
        site = _site(root, c.cpus)
        for n in counts:
            run_dir = root / f"run-{n}"
            t0 = time.monotonic()
            proc = c.run(sys.executable, "-m", "envtool", "validate", "--prefix", prefix, "--site-file", site,
                         "--submit", "--nodes", n, "--ranks-per-node", ranks_per_node, "--sweep-max", sweep_max,
                         "--workdir", run_dir, "--json", "--timeout", "900", cwd=str(REPO),
                         env={"ENVTOOL_DEBUG": ""}, timeout=1000)
            took = time.monotonic() - t0
            try:
                data = json.loads(proc.stdout)
            except ValueError:
                data = {"ok": False, "problems": [proc.stderr.strip()[-500:]]}
            out["points"].append({"nodes": n, "ranks": n * ranks_per_node, "seconds": took, "exit": proc.returncode,
                                  "problems": data.get("problems"),
                                  "sweeps": {k: v.get("sweep") for k, v in (data.get("controllers") or {}).items()}})
    finally:
        c.stop()
    out["load_after"] = os.getloadavg()
    return out


def table(result: dict, sizes) -> str:
    """Side by side: one row per controller and size, one column group per node count."""
    pts = result["points"]
    head = f"{'controller':<10} {'size':>8}" + "".join(f" | {p['nodes']} node(s) us   busbw GB/s" for p in pts)
    lines = [head, "-" * len(head)]
    for controller in ("mpi", "gloo", "torch"):
        for size in sizes:
            cells = []
            for p in pts:
                rows = {r["bytes"]: r for r in (p["sweeps"].get(controller) or [])}
                r = rows.get(size)
                cells.append(f" | {r['latency_us']:>12.1f} {r['busbw_gbs']:>12.4f}" if r else f" | {'-':>12} {'-':>12}")
            lines.append(f"{controller:<10} {human_size(size):>8}" + "".join(cells))
    lines.append(f"{'job wall time':<19}" + "".join(f" | {p['seconds']:>12.0f} s{'':>11}" for p in pts))
    lines.append(f"{'exit status':<19}" + "".join(f" | {p['exit']:>12}{'':>13}" for p in pts))
    lines.append("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (tuple(result["load_before"])
                                                                               + tuple(result["load_after"])))
    lines.append("(one machine: the numbers show the mechanism works on 1-3 nodes; they say nothing of "
                 "Horovod's scaling)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix", required=True, type=Path, help="a cpu-horovod environment on the shared file system")
    ap.add_argument("--ranks-per-node", type=int, default=2)
    ap.add_argument("--sweep-max", default="64MiB")
    ap.add_argument("--sizes", default="8B,64KiB,64MiB", help="sizes shown in the table (comma separated)")
    ap.add_argument("--root", type=Path, help="directory of the run (default: a new one under /var/tmp)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if None in sizes or parse_size(args.sweep_max) is None:
        ap.error("--sizes/--sweep-max: sizes such as 8B, 64KiB, 64MiB")
    root = args.root or Path(tempfile.mkdtemp(prefix="envtool-bench-mn-", dir="/var/tmp"))
    root.mkdir(parents=True, exist_ok=True)
    result = run(args.prefix.absolute(), args.ranks_per_node, args.sweep_max, root)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(table(result, [s for s in sizes if s <= parse_size(args.sweep_max)]))
        for p in result["points"]:
            for problem in p["problems"] or ():
                print(f"{p['nodes']} node(s): {problem}", file=sys.stderr)
        print(f"runs: {root}", file=sys.stderr)
    return 0 if all(p["exit"] == 0 for p in result["points"]) else 1


if __name__ == "__main__":
    sys.exit(main())
