#!/usr/bin/env python3
"""Benchmark: ``envtool doctor`` against a bare ``horovodrun --check-build`` in the same env.

The target (issue 15, "doctor faster than the probe it replaces"): doctor on the
``cpu-horovod`` env takes at most 0.8x the wall time of a bare ``horovodrun --check-build``
there. doctor reads what check-build reports from Horovod's Python API in the interpreter of its
``info`` probe and runs ``horovodrun --check-build`` only where the API cannot answer; the
benchmark prints which source answered (``check_build_source`` of the ``horovod-build``
finding), so a run where doctor fell back to horovodrun is visible. Both commands are run as
subprocesses, interleaved (check-build, doctor, check-build, doctor, ...) so that both see the
same machine load; after one untimed warm-up of each (page cache), the median of ``--runs``
timings of each is printed with the ratio and the 1-minute load average before and after.

Usage: python benchmarks/bench_doctor.py --prefix /tmp/e2e/cpu1 [--spec cpu-horovod] [--runs 5] [--json]
Exit status: 0, or 1 when the ratio exceeds ``--max-ratio`` (default 0.8), 2 for a bad prefix.
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


def timed(argv, env, sources=None) -> float:
    """Wall time (s) of one run of ``argv``.

    Args:
        argv: the command.
        env: its environment.
        sources: a list to append the ``check_build_source`` of doctor's ``--json`` output to, or None.
    Returns:
        seconds (float).
    Raises:
        SystemExit: the command exited with a status other than 0 or 1.
    """
    started = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{argv[:3]} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')[-2000:]}")
    if sources is not None:
        try:
            findings = json.loads(proc.stdout)["findings"]
            hb = next(f for f in findings if f["id"] == "horovod-build")
            sources.append(hb["details"].get("check_build_source") or "?")
        except (ValueError, KeyError, StopIteration):
            sources.append("?")
    return elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", required=True, help="environment with bin/horovodrun")
    parser.add_argument("--spec", default="cpu-horovod", help="spec passed to doctor (default cpu-horovod)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each command (default 5)")
    parser.add_argument("--max-ratio", type=float, default=0.8,
                        help="largest doctor / check-build ratio that passes (default 0.8, the issue's target)")
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
    load_before = os.getloadavg()[0]
    timed(bare, env)
    timed(doctor, denv)
    t_bare, t_doctor, sources = [], [], []
    for _ in range(args.runs):
        t_bare.append(timed(bare, env))
        t_doctor.append(timed(doctor, denv, sources))
    load_after = os.getloadavg()[0]
    mb, md = statistics.median(t_bare), statistics.median(t_doctor)
    ratio = md / mb
    result = {"prefix": str(prefix), "runs": args.runs, "cpus": os.cpu_count(),
              "check_build_s": [round(t, 3) for t in t_bare], "doctor_s": [round(t, 3) for t in t_doctor],
              "check_build_median_s": round(mb, 3), "doctor_median_s": round(md, 3), "ratio": round(ratio, 3),
              "max_ratio": args.max_ratio, "ok": ratio <= args.max_ratio, "check_build_source": sources,
              "load_1min": [round(load_before, 2), round(load_after, 2)]}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"horovodrun --check-build: median {mb:.2f} s over {args.runs} runs {result['check_build_s']}")
        print(f"envtool doctor:           median {md:.2f} s over {args.runs} runs {result['doctor_s']}"
              f" (check-build answered by: {', '.join(sources)})")
        print(f"ratio doctor / check-build: {ratio:.2f} (target <= {args.max_ratio}: "
              f"{'met' if result['ok'] else 'MISSED'}) on {os.cpu_count()} CPUs, "
              f"1-min load {load_before:.2f} before, {load_after:.2f} after")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
