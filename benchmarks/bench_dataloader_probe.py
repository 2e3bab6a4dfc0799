#!/usr/bin/env python3
"""Benchmark: the DataLoader probe under ``forkserver``, with and without torch preloaded in the server.

Each validation rank iterates a small ``DataLoader`` (2 workers) under the spec's start method.
Under ``forkserver`` the probe now has the server import torch before it forks the workers, as
it does for a training script that imports torch at its top (Python's ``multiprocessing`` docs,
``set_forkserver_preload``: https://docs.python.org/3/library/multiprocessing.html). Without
that, each worker imports torch itself.

Timed side by side in one run, interleaved: ``--ranks`` concurrent interpreters (as the ranks of
one node), each running ``envtool/probes/dataloader.py``'s :func:`load` once under
``forkserver``, ``--repeat`` times per variant; the wall time until the last one finishes.
Medians and the ratio (preload / no preload) are printed, with the machine's load.

Usage: python benchmarks/bench_dataloader_probe.py --python ENV/bin/python [--ranks 2] [--repeat 5] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROBE = Path(__file__).resolve().parents[1] / "envtool" / "probes" / "dataloader.py"

DRIVER = """
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))  # workers unpickle dataloader.Squares by its module name
import dataloader as probe
if sys.argv[2] == "off":
    probe.preload_like_a_script = lambda method: None
from torch.utils.data import DataLoader
record = probe.load(DataLoader, "forkserver")
assert record.get("total") == probe.expected_total(), record
"""


def one_round(python: str, variant: str, ranks: int) -> float:
    """Seconds until ``ranks`` concurrent probes of ``variant`` (``on``/``off``) have all finished.

    The time includes each interpreter's start and its own torch import, the same in both variants.

    Raises:
        RuntimeError: a probe failed (its stderr's last line).
    """
    started = time.monotonic()
    procs = [subprocess.Popen([python, "-c", DRIVER, str(PROBE), variant], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(ranks)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"probe ({variant}) exited {p.returncode}: {(err.strip().splitlines() or ['?'])[-1]}")
    return time.monotonic() - started


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--python", required=True, help="an environment's interpreter (torch installed)")
    ap.add_argument("--ranks", type=int, default=2, help="concurrent probes per round (2)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds per variant (5)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    times = {"off": [], "on": []}
    load_before = os.getloadavg()
    for _ in range(args.repeat):
        for variant in ("off", "on"):
            times[variant].append(one_round(args.python, variant, args.ranks))
    load_after = os.getloadavg()
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {"ranks": args.ranks, "repeat": args.repeat, "seconds": times, "median_s": med,
              "ratio_preload_to_none": med["on"] / med["off"], "load_before": load_before,
              "load_after": load_after, "cpus": os.cpu_count()}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{args.ranks} concurrent DataLoader probes (forkserver, 2 workers each), {args.repeat} rounds each,"
              f" {os.cpu_count()} CPUs, load {load_before[0]:.2f} -> {load_after[0]:.2f}")
        print(f"  no preload (each worker imports torch): median {med['off']:.2f} s")
        print(f"  torch preloaded in the server:           median {med['on']:.2f} s")
        print(f"  ratio preload / no preload: {result['ratio_preload_to_none']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
