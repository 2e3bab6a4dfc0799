#!/usr/bin/env python3
"""Start-up benchmark: whole-process wall time of quick commands, median of 5 runs each.

Each command runs as its own process (``python -m envtool …``, as the console script does), one
after another, interleaved with a bare ``python -c pass`` so the interpreter's own start-up
(including this machine's ``site`` hooks) is measured side by side under the same load. Prints
the medians (seconds), each command's ratio to the bare interpreter, the load average, and the
targets of issue 15: ``envtool specs`` <= 0.3 s, ``envtool --help`` <= 0.2 s.

With ``--compare DIR`` (another checkout, e.g. ``git worktree add /tmp/base main``) every
command also runs there, interleaved with this checkout's runs, and the ratio this/other is printed.

Usage: python benchmarks/bench_startup.py [--runs 5] [--compare DIR]
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
    parser.add_argument("--compare", type=Path, default=None, metavar="DIR",
                        help="another checkout to time side by side (commands it lacks are skipped)")
    args = parser.parse_args()
    trees = {"this": REPO} if args.compare is None else {"this": REPO, "other": args.compare.resolve()}
    times = {(tree, label): [] for tree in trees for label in COMMANDS}
    for tree, cwd in trees.items():  # one warm-up each (page cache, .pyc files); a command that fails is dropped
        for label, (argv, _) in COMMANDS.items():
            if subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True).returncode != 0:
                del times[(tree, label)]
    for _ in range(args.runs):
        for label, (argv, _) in COMMANDS.items():
            for tree, cwd in trees.items():
                if (tree, label) not in times:
                    continue
                started = time.perf_counter()
                subprocess.run([sys.executable, *argv], cwd=cwd, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=True)
                times[(tree, label)].append(time.perf_counter() - started)
    base = statistics.median(times[("this", "python -c pass")])
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; median of {args.runs} runs each")
    other = f"{'other (s)':>11}{'this/other':>11}" if args.compare else ""
    print(f"{'command':<28}{'median (s)':>11}{'min (s)':>9}{'x python':>10}{other}  target")
    for label, (_, target) in COMMANDS.items():
        med = statistics.median(times[("this", label)])
        verdict = "" if target is None else f"<= {target:.1f} s: {'met' if med <= target else 'missed'}"
        cmp = ""
        if args.compare:
            o = times.get(("other", label))
            cmp = f"{statistics.median(o):>11.3f}{med / statistics.median(o):>11.2f}" if o else f"{'-':>11}{'-':>11}"
        print(f"{label:<28}{med:>11.3f}{min(times[('this', label)]):>9.3f}{med / base:>10.2f}{cmp}  {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
