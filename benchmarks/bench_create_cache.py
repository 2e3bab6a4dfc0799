#!/usr/bin/env python3
"""Wheel-cache benchmark: the same spec created twice, side by side in one run.

The first ``envtool create`` starts with an empty cache directory (it compiles Horovod); the
second, at a new prefix with the same cache, installs the cached wheel. Prints both wall times
(seconds), the Horovod step's times, and the ratios second/first. Target (issue "main job"):
the second create under 10% of the first.

Usage: python benchmarks/bench_create_cache.py [--spec cpu-horovod] [--workdir DIR] [--keep]
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


def create(spec: str, prefix: Path, cache: Path) -> dict:
    env = dict(os.environ, ENVTOOL_CACHE_DIR=str(cache))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envtool", "--quiet", "create", spec, "--prefix", str(prefix),
                           "--json"], capture_output=True, text=True, env=env)
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
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="envtool-bench-"))
    cache = work / "cache"
    try:
        first = create(args.spec, work / "first", cache)
        second = create(args.spec, work / "second", cache)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    assert not first["cache_hit"] and second["cache_hit"], (first, second)
    print(f"{'':<26}{'first (cold)':>14}{'second (cached)':>17}{'ratio':>9}")
    print(f"{'create, wall (s)':<26}{first['wall']:>14.1f}{second['wall']:>17.1f}{second['wall'] / first['wall']:>9.3f}")
    for step in first["timings"]:
        a, b = first["timings"][step], second["timings"].get(step, float("nan"))
        print(f"{'  ' + step + ' (s)':<26}{a:>14.1f}{b:>17.1f}{b / a:>9.3f}")
    target = 0.10
    ratio = second["wall"] / first["wall"]
    print(f"whole-create ratio {ratio:.3f} ({'meets' if ratio < target else 'misses'} the {target:.0%} target); "
          f"Horovod step ratio {second['timings']['build-horovod'] / first['timings']['build-horovod']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
