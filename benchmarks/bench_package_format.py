#!/usr/bin/env python3
"""Benchmark: one large conda package as ``.tar.bz2`` against ``.conda``: time to write and to extract.

The site twin (tests/twin/make_twin.py) turns the PyTorch wheel into a conda package of about
714 MB of files. Measured in one run, side by side, on the same unpacked wheel:

* ``write``   — tests/helpers/conda_channel.py's ``build_package``: ``.tar.bz2`` at bzip2 level 1
  (what the twin wrote before) and ``.conda`` at zstd level 3 (conda-package-handling);
* ``extract`` — py-rattler's ``rattler.package_streaming.extract`` of each archive into an empty
  directory (what a package cache does once per package).

Each step runs ``--repeat`` times; medians, archive sizes and the ratios .conda / .tar.bz2 are
printed with the machine's load.

Usage: python benchmarks/bench_package_format.py --wheel torch-….whl [--repeat 1] [--workdir DIR] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "twin")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--wheel", required=True, type=Path, help="a wheel to package (the twin uses torch's)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from rattler.package_streaming import extract

    from helpers.conda_channel import build_package
    from make_twin import wheel_package

    work = Path(tempfile.mkdtemp(prefix="bench-pkgfmt-", dir=args.workdir))
    try:
        pkg = wheel_package(args.wheel, work)
        times = {fmt: {"write": [], "extract": []} for fmt in (".tar.bz2", ".conda")}
        sizes = {}
        load_before = os.getloadavg()
        for _ in range(args.repeat):
            for fmt, level in ((".tar.bz2", 1), (".conda", 3)):
                out = work / "out"
                started = time.monotonic()
                archive = build_package(pkg, "linux-64", out, compresslevel=level, fmt=fmt)
                times[fmt]["write"].append(time.monotonic() - started)
                sizes[fmt] = archive.stat().st_size
                dest = work / "x"
                started = time.monotonic()
                extract(str(archive), str(dest))
                times[fmt]["extract"].append(time.monotonic() - started)
                shutil.rmtree(dest)
                archive.unlink()
        load_after = os.getloadavg()
        med = {fmt: {k: statistics.median(v) for k, v in t.items()} for fmt, t in times.items()}
        ratio = {k: med[".conda"][k] / med[".tar.bz2"][k] for k in ("write", "extract")}
        result = {"wheel": args.wheel.name, "repeat": args.repeat, "median_s": med, "bytes": sizes,
                  "ratio_conda_to_bz2": ratio, "load_before": load_before, "load_after": load_after,
                  "cpus": os.cpu_count()}
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            print(f"{args.wheel.name} as a conda package, {args.repeat} run(s) each, {os.cpu_count()} CPUs,"
                  f" load {load_before[0]:.2f} -> {load_after[0]:.2f}")
            for fmt in med:
                print(f"  {fmt:9} write {med[fmt]['write']:6.1f} s  extract {med[fmt]['extract']:5.1f} s"
                      f"  {sizes[fmt] / 1e6:6.0f} MB")
            print(f"  ratio .conda / .tar.bz2: write {ratio['write']:.2f}, extract {ratio['extract']:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
