#!/usr/bin/env python3
"""Site-cache benchmark: a cold create against a user's first create with a site cache, side by side.

One run: (1) ``envtool create`` with an empty user cache and no site cache (it compiles Horovod;
run once); (2) ``envtool cache publish --to SITE`` copies the wheel it built into a site cache,
made read-only; (3) another "user" (a new, empty ``ENVTOOL_CACHE_DIR`` and ``UV_CACHE_DIR``) with
``ENVTOOL_CACHE_PATH=SITE`` creates the same spec at a new prefix: it installs the published wheel.
Prints both wall times (seconds), each step's times and the ratios site/cold. Target (issue 15):
a user's first create with a site cache holding the wheel <= 0.10 x a cold create.

Usage: python benchmarks/bench_site_cache.py [--spec cpu-horovod] [--workdir DIR] [--keep]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 0.10


def envtool(args, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envtool", *map(str, args)], capture_output=True, text=True,
                          env=dict(os.environ, **env))


def create(spec: str, prefix: Path, env: dict) -> dict:
    started = time.monotonic()
    proc = envtool(["--quiet", "create", spec, "--prefix", prefix, "--json"], env)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"create failed ({proc.returncode}):\n{proc.stderr}")
    data = json.loads(proc.stdout)
    return {"wall": wall, "timings": data["timings"], "build": data["results"]["build-horovod"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="cpu-horovod")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the environments and caches")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="envtool-bench-site-"))
    site = work / "site"
    base = {"ENVTOOL_CACHE_PATH": ""}
    try:
        cold = create(args.spec, work / "cold", dict(base, ENVTOOL_CACHE_DIR=str(work / "admin-cache"),
                                                     UV_CACHE_DIR=str(work / "admin-uv")))
        pub = envtool(["cache", "publish", "--to", site, "--json"], dict(base, ENVTOOL_CACHE_DIR=str(work / "admin-cache")))
        if pub.returncode != 0:
            sys.exit(f"cache publish failed:\n{pub.stderr}")
        for p in [site, *site.rglob("*")]:
            os.chmod(p, stat.S_IMODE(p.stat().st_mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        warm = create(args.spec, work / "user", {"ENVTOOL_CACHE_DIR": str(work / "user-cache"),
                                                 "UV_CACHE_DIR": str(work / "user-uv"), "ENVTOOL_CACHE_PATH": str(site)})
    finally:
        if not args.keep:
            for p in [site, *site.rglob("*")] if site.exists() else []:
                os.chmod(p, stat.S_IMODE(p.stat().st_mode) | stat.S_IWUSR)
            shutil.rmtree(work, ignore_errors=True)
    assert not cold["build"]["cache_hit"] and warm["build"]["cache"] == "site", (cold["build"], warm["build"])
    print(f"load average at the end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(f"{'':<26}{'cold':>10}{'site cache':>12}{'ratio':>9}")
    print(f"{'create, wall (s)':<26}{cold['wall']:>10.1f}{warm['wall']:>12.1f}{warm['wall'] / cold['wall']:>9.3f}")
    for step in cold["timings"]:
        a, b = cold["timings"][step], warm["timings"].get(step, float("nan"))
        print(f"{'  ' + step + ' (s)':<26}{a:>10.1f}{b:>12.1f}{b / a:>9.3f}")
    ratio = warm["wall"] / cold["wall"]
    print(f"whole-create ratio {ratio:.3f} ({'meets' if ratio <= TARGET else 'misses'} the {TARGET:.2f} target); "
          f"Horovod step ratio {warm['timings']['build-horovod'] / cold['timings']['build-horovod']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
