#!/usr/bin/env python3
"""Start-up benchmark: whole-process wall time of quick commands, median of 5 runs each.

Each command runs as its own process (``python -m envtool …``, as the console script does), one
after another, interleaved with a bare ``python -c pass`` so the interpreter's own start-up
(including this machine's ``site`` hooks) is measured side by side under the same load. Prints
the medians (seconds), each command's ratio to the bare interpreter, the load average, and the
targets of issues 15 and 39: ``envtool --help`` <= 0.2 s, ``envtool specs`` <= 0.3 s. The targets
are for a quiet machine (load average well under its core count): under load every process start
stretches, the bare interpreter's too, so compare the ratios there. Exit status 1 when a target
is missed (the median of this checkout), else 0.

``envtool --help`` imports no engine (py-rattler, asyncio), no plug-in and no spec model: the
registries name their plug-ins without importing them (:mod:`envtool.core.plugins`); see why a
command is slow with ``python3 -X importtime -m envtool --help 2>&1 | sort -t'|' -k2 -n | tail``.

With ``--compare DIR`` (another checkout, e.g. ``git worktree add /tmp/base main``) every
command also runs there, interleaved with this checkout's runs, and the ratio this/other is printed.

Beside the wall time it prints each command's CPU time (user + system, from ``getrusage`` of the
finished child), which a busy machine stretches far less than the wall time.

Usage: python benchmarks/bench_startup.py [--runs 5] [--compare DIR]
"""
from __future__ import annotations

import argparse
import os
import resource
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
    "envtool specs (first run)": (["-m", "envtool", "specs"], None),
    "envtool show cpu-horovod": (["-m", "envtool", "show", "cpu-horovod"], None),
    "envtool cache list": (["-m", "envtool", "cache", "list"], None),
}


#: commands run with an empty cache root of their own each time (``$ENVTOOL_CACHE_DIR``): what a
#: first run costs, before ``specs`` has a table to reuse (envtool/spec/matrix_cache.py)
FIRST_RUN = frozenset({"envtool specs (first run)"})


def _run_once(argv, cwd: Path, fresh: bool = False):
    """Wall and CPU seconds of one ``python ARGV`` run in ``cwd`` (CPU: the child's user + system);
    ``fresh``: with an empty ``$ENVTOOL_CACHE_DIR`` made for this run (removed after it)."""
    import shutil
    import tempfile

    env = None
    cache = None
    if fresh:
        cache = tempfile.mkdtemp(prefix="bench-startup-cache-")
        env = dict(os.environ, ENVTOOL_CACHE_DIR=cache)
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run([sys.executable, *argv], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True, env=env)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(trees, runs: int):
    """``(tree, label) -> [(wall, cpu), …]`` for every command that passed its warm-up run, the
    commands and trees interleaved so that each sees the same load."""
    times = {(tree, label): [] for tree in trees for label in COMMANDS}
    for tree, cwd in trees.items():  # one warm-up each (page cache, .pyc files); a command that fails is dropped
        for label, (argv, _) in COMMANDS.items():
            if subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True).returncode != 0:
                del times[(tree, label)]
    for _ in range(runs):
        for label, (argv, _) in COMMANDS.items():
            for tree, cwd in trees.items():
                if (tree, label) in times:
                    times[(tree, label)].append(_run_once(argv, cwd, fresh=label in FIRST_RUN))
    return times


def report(times, runs: int, compare: bool):
    """Print the table; returns the labels whose target was missed (or that failed)."""
    def med(key, i=0):
        return statistics.median(t[i] for t in times[key])

    base = med(("this", "python -c pass"))
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores; median of {runs} "
          f"runs each")
    other = f"{'other (s)':>11}{'cpu (s)':>9}{'this/other':>11}" if compare else ""
    print(f"{'command':<28}{'median (s)':>11}{'min (s)':>9}{'cpu (s)':>9}{'x python':>10}{other}  target")
    missed = []
    for label, (_, target) in COMMANDS.items():
        if ("this", label) not in times:  # it failed in the warm-up run
            print(f"{label:<28}{'failed':>11}")
            missed.append(label)
            continue
        wall = med(("this", label))
        if target is not None and wall > target:
            missed.append(label)
        verdict = "" if target is None else f"<= {target:.1f} s: {'met' if wall <= target else 'missed'}"
        cmp = ""
        if compare:
            cmp = (f"{med(('other', label)):>11.3f}{med(('other', label), 1):>9.3f}{wall / med(('other', label)):>11.2f}"
                   if ("other", label) in times else f"{'-':>11}{'-':>9}{'-':>11}")
        print(f"{label:<28}{wall:>11.3f}{min(t[0] for t in times[('this', label)]):>9.3f}"
              f"{med(('this', label), 1):>9.3f}{wall / base:>10.2f}{cmp}  {verdict}")
    if missed:
        print(f"missed: {', '.join(missed)} (the targets are for a quiet machine)")
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--compare", type=Path, default=None, metavar="DIR",
                        help="another checkout to time side by side (commands it lacks are skipped)")
    args = parser.parse_args()
    trees = {"this": REPO} if args.compare is None else {"this": REPO, "other": args.compare.resolve()}
    times = measure(trees, args.runs)
    return 1 if report(times, args.runs, args.compare is not None) else 0


if __name__ == "__main__":
    raise SystemExit(main())
