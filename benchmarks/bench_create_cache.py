#!/usr/bin/env python3
"""Second-create benchmark: the same spec created three times, side by side in one run.

The first ``envtool create`` starts with an empty envtool cache and an empty uv cache (it
compiles Horovod and unpacks every wheel); the second, at a new prefix with the same caches,
installs the cached Horovod wheel and links the other packages from uv's cache (hard links: the
caches and prefixes share ``--workdir``'s filesystem); the third does the same with
``UV_LINK_MODE=copy`` (the figure for a cache on another filesystem). ``--pip`` adds a fourth,
warm, with ``--installer pip``. Prints wall times (seconds), each step's times, the ratios to the
first, and the load average. Target (issue 15): second / first <= 0.05 (same filesystem).

Usage: python benchmarks/bench_create_cache.py [--spec cpu-horovod] [--workdir DIR] [--keep] [--pip]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def create(spec: str, prefix: Path, cache: Path, extra_env=None, extra_args=()) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "UV_LINK_MODE"}
    env.update(ENVTOOL_CACHE_DIR=str(cache), UV_CACHE_DIR=str(cache / "uv"), **(extra_env or {}))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envtool", "--quiet", "create", spec, "--prefix", str(prefix),
                           "--json", *extra_args], capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"create failed ({proc.returncode}):\n{proc.stderr}")
    data = json.loads(proc.stdout)
    return {"wall": wall, "timings": data["timings"], "cache_hit": data["results"]["build-horovod"]["cache_hit"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="cpu-horovod")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the environments and cache")
    parser.add_argument("--pip", action="store_true", help="also a warm create with --installer pip")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="envtool-bench-"))
    cache = work / "cache"
    runs = {}
    try:
        runs["first (cold)"] = create(args.spec, work / "first", cache)
        runs["second (links)"] = create(args.spec, work / "second", cache)
        runs["copies"] = create(args.spec, work / "third", cache, {"UV_LINK_MODE": "copy"})
        if args.pip:
            runs["pip"] = create(args.spec, work / "fourth", cache, extra_args=("--installer", "pip"))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    first = runs["first (cold)"]
    assert not first["cache_hit"] and all(r["cache_hit"] for k, r in runs.items() if k != "first (cold)"), runs
    names = list(runs)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print(f"{'':<26}" + "".join(f"{n:>16}" for n in names))
    print(f"{'create, wall (s)':<26}" + "".join(f"{runs[n]['wall']:>16.1f}" for n in names))
    print(f"{'  ratio to first':<26}" + "".join(f"{runs[n]['wall'] / first['wall']:>16.3f}" for n in names))
    for step in first["timings"]:
        print(f"{'  ' + step + ' (s)':<26}" + "".join(f"{runs[n]['timings'].get(step, float('nan')):>16.1f}"
                                                       for n in names))
    target = 0.05
    ratio = runs["second (links)"]["wall"] / first["wall"]
    print(f"second/first {ratio:.3f} ({'meets' if ratio <= target else 'misses'} the {target} target); "
          f"copy mode {runs['copies']['wall'] / first['wall']:.3f}; Horovod step "
          f"{runs['second (links)']['timings']['build-horovod'] / first['timings']['build-horovod']:.3f}")
    return 0 if ratio <= target else 1


if __name__ == "__main__":
    raise SystemExit(main())
