#!/usr/bin/env python3
"""Start-up benchmark: whole-process wall time of quick commands, median of 5 runs each.

Each command runs as its own process (``python -m envtool …``, as the console script does), one
after another, interleaved with a bare ``python -c pass`` so the interpreter's own start-up
(including this machine's ``site`` hooks) is measured side by side under the same load. Prints
the medians (seconds), each command's ratio to the bare interpreter, the load average, and the
targets of issue 15: ``envtool specs`` <= 0.3 s, ``envtool --help`` <= 0.2 s.

Usage: python benchmarks/bench_startup.py [--runs 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = {  # label -> (argv after the interpreter, target seconds or None)
    "python -c pass": (["-c", "pass"], None),
    "envtool --help": (["-m", "envtool", "--help"], 0.2),
    "envtool specs": (["-m", "envtool", "specs"], 0.3),
    "envtool show cpu-horovod": (["-m", "envtool", "show", "cpu-horovod"], None),
    "envtool cache list": (["-m", "envtool", "cache", "list"], None),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    times = {label: [] for label in COMMANDS}
    for label, (argv, _) in COMMANDS.items():  # one warm-up each: page cache, .pyc files
        subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, check=True)
    for _ in range(args.runs):
        for label, (argv, _) in COMMANDS.items():
            started = time.perf_counter()
            subprocess.run([sys.executable, *argv], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=True)
            times[label].append(time.perf_counter() - started)
    base = statistics.median(times["python -c pass"])
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; median of {args.runs} runs each")
    print(f"{'command':<28}{'median (s)':>11}{'min (s)':>9}{'x python':>10}  target")
    for label, (_, target) in COMMANDS.items():
        med = statistics.median(times[label])
        verdict = "" if target is None else f"<= {target:.1f} s: {'met' if med <= target else 'missed'}"
        print(f"{label:<28}{med:>11.3f}{min(times[label]):>9.3f}{med / base:>10.2f}  {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
