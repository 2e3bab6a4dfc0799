#!/usr/bin/env python3
"""Benchmark: ``envtool doctor`` against a bare ``horovodrun --check-build`` in the same env.

The issue's budget: doctor on the ``cpu-horovod`` env takes at most 1.5x the wall time of a
bare ``horovodrun --check-build`` there (doctor needs that probe anyway). Both commands are
run as subprocesses, interleaved (check-build, doctor, check-build, doctor, ...) so that
both see the same machine load; after one untimed warm-up of each (page cache), the median
of ``--runs`` timings of each is printed with the ratio.

Usage: python benchmarks/bench_doctor.py --prefix /tmp/e2e/cpu1 [--spec cpu-horovod] [--runs 5] [--json]
Exit status: 0, or 1 when the ratio exceeds ``--max-ratio`` (default 1.5).
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

REPO = Path(__file__).resolve().parent.parent


def timed(argv, env) -> float:
    """Wall time (s) of one run of ``argv``; raises if it fails to start."""
    started = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{argv[:3]} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')[-2000:]}")
    return elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", required=True, help="environment with bin/horovodrun")
    parser.add_argument("--spec", default="cpu-horovod", help="spec passed to doctor (default cpu-horovod)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each command (default 5)")
    parser.add_argument("--max-ratio", type=float, default=1.5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    prefix = Path(args.prefix)
    horovodrun = prefix / "bin" / "horovodrun"
    if not horovodrun.exists():
        print(f"bench_doctor: {horovodrun} does not exist", file=sys.stderr)
        return 2
    env = dict(os.environ, PYTHONUNBUFFERED="1", PATH=f"{prefix / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("PYTHONPATH", None)
    bare = [str(horovodrun), "--check-build"]
    doctor = [sys.executable, "-m", "envtool", "doctor", "--prefix", str(prefix), "--json"]
    if args.spec:
        doctor += ["--spec", args.spec]
    denv = dict(env, PYTHONPATH=str(REPO))
    timed(bare, env)
    timed(doctor, denv)
    t_bare, t_doctor = [], []
    for _ in range(args.runs):
        t_bare.append(timed(bare, env))
        t_doctor.append(timed(doctor, denv))
    mb, md = statistics.median(t_bare), statistics.median(t_doctor)
    ratio = md / mb
    result = {"prefix": str(prefix), "runs": args.runs, "cpus": os.cpu_count(),
              "check_build_s": [round(t, 3) for t in t_bare], "doctor_s": [round(t, 3) for t in t_doctor],
              "check_build_median_s": round(mb, 3), "doctor_median_s": round(md, 3), "ratio": round(ratio, 3),
              "max_ratio": args.max_ratio, "ok": ratio <= args.max_ratio}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"horovodrun --check-build: median {mb:.2f} s over {args.runs} runs {result['check_build_s']}")
        print(f"envtool doctor:           median {md:.2f} s over {args.runs} runs {result['doctor_s']}")
        print(f"ratio doctor / check-build: {ratio:.2f} (budget {args.max_ratio}) on {os.cpu_count()} CPUs")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
