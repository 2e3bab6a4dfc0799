#!/usr/bin/env python3
"""Benchmark: envtool's clone of a read-only conda env against ``cp -a`` of its prefix.

Builds a synthetic environment of realistic shape from real conda packages (``.tar.bz2``,
built with tests/helpers/conda_channel.py, indexed by py-rattler, installed by py-rattler
from a "site" package cache): ``--packages`` packages, ``--files`` files, ``--size-mb`` of
data (log-normal file sizes: many small ``.py`` files, a few large ``.so`` files; some text
files carry the conda prefix placeholder, some binaries the binary placeholder), plus
untracked "pip-installed" files. The source and the site cache are then made read-only.

Timed, one after another on the same (page-cache-warm) data:

* ``cp -a``             — ``cp -a SOURCE DEST``
* ``clone, cold cache`` — envtool's clone with an empty envtool cache: packages are copied from
  the site's read-only package cache, then linked; untracked files copied; verified
* ``clone, warm cache`` — the same with envtool's cache already holding the packages (hard links)
* ``clone, no cache``   — (``--with-download``) nothing cached anywhere: every package is
  fetched from its ``file://`` URL and extracted

Each method runs ``--repeat`` times (interleaved, ``sync`` before each timing so no run pays
for an earlier one's write-back); medians are printed. Each clone verifies the source by ``stat`` data incl. ctime (``--verify content`` hashes every
byte instead). The goal (issue 4): warm < 1.0x ``cp -a``, cold <= 1.5x.

Usage: python benchmarks/bench_clone.py [--size-mb 1024] [--packages 300] [--files 30000]
       [--workdir DIR] [--keep] [--with-download] [--verify stat|content] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))


def _package_files(i: int, n_files: int, n_bytes: int, seed: int) -> dict:
    """Files of package ``i``: log-normal sizes scaled to ``n_bytes``, semi-compressible content."""
    from helpers.conda_channel import BINARY_PLACEHOLDER, TEXT_PLACEHOLDER

    rng = random.Random(seed * 100003 + i)
    weights = [rng.lognormvariate(0, 1.6) for _ in range(n_files)]
    scale = n_bytes / sum(weights)
    pool = rng.randbytes(1 << 16)
    files = {}
    for j, w in enumerate(weights):
        size = max(16, int(w * scale))
        binary = size > 64 * 1024 or j % 7 == 0
        if binary:
            name = f"lib/pkg{i}/lib{j}.so"
            reps = []
            left = size
            while left > 0:  # random slices of a 64 KiB pool: compresses about like object code
                off = rng.randrange(0, len(pool) - 4096)
                chunk = pool[off:off + min(left, 4096)]
                reps.append(chunk)
                left -= len(chunk)
            data = b"\x7fELF\x02\x01\x01\0" + b"".join(reps)
            if j == 0:
                data += b"\0" + BINARY_PLACEHOLDER.encode() + b"/lib\0"
            files[name] = data
        else:
            name = f"lib/python3.11/site-packages/pkg{i}/mod{j}.py"
            line = f"def f{j}(x):\n    return x * {j}  # {rng.random()}\n"
            text = (line * (size // len(line) + 1))[:size]
            if j % 20 == 1:
                text = f"PREFIX = '{TEXT_PLACEHOLDER}'\n" + text
            files[name] = text
    return files


def _build_one(args) -> str:
    i, n_files, n_bytes, seed, subdir_dir = args
    from helpers.conda_channel import PackageDef, build_package

    deps = (f"synth-{i - 1} >=1.0",) if i % 5 else ()
    pkg = PackageDef(f"synth-{i}", "1.0", depends=deps, files=_package_files(i, n_files, n_bytes, seed))
    return str(build_package(pkg, "linux-64", Path(subdir_dir), compresslevel=1))


def build_source(work: Path, packages: int, files: int, size_mb: float, untracked_mb: float, seed: int):
    """Channel → site cache → read-only source env. Returns (source prefix, site pkgs dir, records)."""
    from helpers.conda_channel import index_channel

    from envtool.engines.rattler_api import install_records, solve_records

    channel = work / "channel"
    (channel / "noarch").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    shares = [rng.lognormvariate(0, 1.2) for _ in range(packages)]
    total = sum(shares)
    jobs = []
    for i, s in enumerate(shares):
        n_files = max(2, int(files * s / total))
        n_bytes = int(size_mb * (1 << 20) * s / total)
        jobs.append((i, n_files, n_bytes, seed, str(channel / "linux-64")))
    with Pool(os.cpu_count() or 2) as pool:
        for _ in pool.imap_unordered(_build_one, jobs, chunksize=4):
            pass
    index_channel(channel)
    records = solve_records([channel.as_uri()], [f"synth-{i}" for i in range(packages)], "linux-64")
    src = work / "site" / "envs" / "base"
    install_records(records, src, work / "site" / "pkgs")
    # untracked "pip-installed" files (text naming the prefix, and binaries)
    sp = src / "lib" / "python3.11" / "site-packages" / "userpkg"
    sp.mkdir(parents=True, exist_ok=True)
    left, j = int(untracked_mb * (1 << 20)), 0
    while left > 0:
        size = min(left, 256 * 1024)
        if j % 2:
            (sp / f"m{j}.py").write_text((f"P = '{src}'\n" * (size // (len(str(src)) + 7) + 1))[:size])
        else:
            (sp / f"ext{j}.so").write_bytes(b"\0" + os.urandom(size - 1))
        left -= size
        j += 1
    subprocess.run(["chmod", "-R", "a-w", str(work / "site")], check=True)
    return src, work / "site" / "pkgs", records


def tree_stats(root: Path):
    n, size = 0, 0
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            st = os.lstat(os.path.join(dirpath, f))
            n += 1
            size += st.st_size
    return n, size


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024, help="package data in MiB (default 1024)")
    parser.add_argument("--packages", type=int, default=300, help="number of conda packages (default 300)")
    parser.add_argument("--files", type=int, default=30000, help="number of files in packages (default 30000)")
    parser.add_argument("--untracked-mb", type=float, default=None, help="untracked files, MiB (default 2%% of size)")
    parser.add_argument("--workdir", help="where to build (default: a new temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--reuse", action="store_true",
                        help="reuse the source already built in --workdir (by an earlier run with --keep)")
    parser.add_argument("--with-download", action="store_true", help="also time a clone with no cache at all")
    parser.add_argument("--verify", default="stat", choices=("stat", "content"), help="source fingerprint method")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds; medians are printed (default 3)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    from envtool.steps.create.clone import clone_env

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-clone-", dir=os.environ.get("TMPDIR", "/tmp")))
    work.mkdir(parents=True, exist_ok=True)
    untracked = args.untracked_mb if args.untracked_mb is not None else args.size_mb * 0.02
    for old in [p.name for p in work.glob("round*")]:
        if (work / old).exists():
            subprocess.run(["chmod", "-R", "u+w", str(work / old)], check=False)
            shutil.rmtree(work / old)
    try:
        if args.reuse and (work / "site" / "envs" / "base" / "conda-meta").is_dir():
            from envtool.engines.rattler_api import read_prefix_records

            src, site_pkgs = work / "site" / "envs" / "base", work / "site" / "pkgs"
            t_setup, records = 0.0, read_prefix_records(src)
        else:
            t_setup, (src, site_pkgs, records) = timed(lambda: build_source(
                work, args.packages, args.files, args.size_mb, untracked, args.seed))
        n_files, n_bytes = tree_stats(src)
        print(f"source: {len(records)} packages, {n_files} files, {n_bytes / 2**30:.2f} GiB at {src} "
              f"(built in {t_setup:.0f} s)", file=sys.stderr)
        content = args.verify == "content"
        runs = {"cp -a": [], "clone, cold cache": [], "clone, warm cache": [], "clone, no cache": []}
        notes = {}
        res_cold = res_warm = None
        linked = False

        def settle():  # flush earlier writes so that each timing starts from the same state
            os.sync()
            time.sleep(1)

        for r in range(args.repeat):
            rd = work / f"round{r}"
            rd.mkdir()
            settle()
            t, _ = timed(lambda: subprocess.run(["cp", "-a", str(src), str(rd / "cp")], check=True))
            runs["cp -a"].append(t)
            settle()
            cache = rd / "envtool-cache"
            t, res_cold = timed(lambda: clone_env(str(src), rd / "clone-cold", cache_dir=cache,
                                                  verify_content=content, quiet=True))
            runs["clone, cold cache"].append(t)
            notes["clone, cold cache"] = (f"{res_cold.results['clone']['cache']['copied']} packages copied from "
                                          "the read-only site cache, then linked")
            settle()
            t, res_warm = timed(lambda: clone_env(str(src), rd / "clone-warm", cache_dir=cache,
                                                  verify_content=content, quiet=True))
            runs["clone, warm cache"].append(t)
            notes["clone, warm cache"] = (f"{res_warm.results['clone']['cache']['cached']} packages hard-linked "
                                          "from envtool's cache")
            probe = next(p for p in (rd / "clone-warm").rglob("*.so") if "userpkg" not in str(p))
            linked = os.stat(probe).st_nlink > 1
            if args.with_download and r == 0:
                settle()
                t, res_dl = timed(lambda: clone_env(str(src), rd / "clone-dl", cache_dir=rd / "empty-cache",
                                                    verify_content=content, quiet=True, source_caches=[]))
                runs["clone, no cache"].append(t)
                notes["clone, no cache"] = (f"{len(res_dl.results['clone']['cache']['fetched'])} packages fetched "
                                            "from file:// and extracted (bzip2)")
            shutil.rmtree(rd)
        rows = [(name, statistics.median(ts), notes.get(name, "")) for name, ts in runs.items() if ts]
        t_cp = rows[0][1]
        figures = {"packages": len(records), "files": n_files, "bytes": n_bytes, "verify": args.verify,
                   "repeat": args.repeat, "warm_hard_linked": linked,
                   "seconds_median": {name: round(t, 3) for name, t, _ in rows},
                   "seconds_all": {name: [round(t, 3) for t in ts] for name, ts in runs.items() if ts},
                   "ratio_to_cp_a": {name: round(t / t_cp, 3) for name, t, _ in rows},
                   "steps_cold": {k: round(v, 3) for k, v in res_cold.timings.items()},
                   "steps_warm": {k: round(v, 3) for k, v in res_warm.timings.items()}}
        if args.json:
            print(json.dumps(figures, indent=2))
        else:
            print(f"{len(records)} packages, {n_files} files, {n_bytes / 2**30:.2f} GiB; source verified by {args.verify}")
            print(f"median of {args.repeat} runs each (sync before every timing)")
            print(f"{'method':<20} {'seconds':>8} {'x cp -a':>8}  note")
            for name, t, note in rows:
                print(f"{name:<20} {t:8.2f} {t / t_cp:8.2f}  {note}")
            print("all runs (s): " + "; ".join(f"{k}: " + ", ".join(f"{x:.2f}" for x in v)
                                             for k, v in figures["seconds_all"].items()))
            print("steps (cold): " + ", ".join(f"{k} {v:.2f} s" for k, v in res_cold.timings.items()))
            print("steps (warm): " + ", ".join(f"{k} {v:.2f} s" for k, v in res_warm.timings.items()))
            print(f"warm clone hard-links package files: {linked}")
        return 0
    finally:
        if not args.keep:
            subprocess.run(["chmod", "-R", "u+w", str(work)], check=False)
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
