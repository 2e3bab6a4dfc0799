#!/usr/bin/env python3
"""Flat-cost benchmark (issue 45, item 5): ``cache list`` and ``plan`` on a cache of today's size
and on one ten times larger, timed side by side in one run; the ratio large/small should stay
<= 1.2.

Two synthetic caches of real files are built in a temporary directory: "small" holds ``--files``
files (default 81,600, the cache the issue measured: 0.9 s of ``lstat`` in ``cache list``) and
"large" ``--scale`` times as many (default 10). Each is an envtool cache root
(``$ENVTOOL_CACHE_DIR``: conda packages under ``pkgs/``, kept bytecode under ``bytecode/``, built
wheel entries under ``horovod-wheels/`` with ``key.json`` recording the wheel) plus a uv cache
(``$UV_CACHE_DIR``), the files split 50/20/30 between packages, bytecode and uv; the wheel
entries grow with the scale too (4 and 40). File contents are 64 bytes.

Each command runs as its own process (``python -m envtool …`` in ``--envtool DIR``, default this
checkout), once per cache to warm up (page cache, ``.pyc`` files, and the memos a first ``plan``
writes), then ``--runs`` times (default 5), small and large interleaved so both see the same
load. Printed: the medians, the ratio large/small against the target, ``cache list --du`` once on
each cache for contrast (it walks every file, as ``cache list`` did before), and the load average
(under load every process start stretches; compare the ratios). Exit status 1 when a ratio is over
the target.

With ``--compare DIR`` another checkout (the code before the change) is timed on the same caches,
interleaved with this one; only this checkout's ratios decide the exit status.

Usage: python benchmarks/bench_flat_costs.py [--files 81600] [--scale 10] [--runs 5]
       [--envtool DIR] [--dir TMPDIR] [--spec cpu-horovod] [--compare DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = 1.2


def _fill(root: Path, count: int, per_dir: int = 200) -> None:
    """``count`` files of 64 bytes under ``root``, ``per_dir`` to a directory."""
    data = b"x" * 64
    for i in range(count):
        d = root / f"d{i // per_dir:05d}"
        if i % per_dir == 0:
            d.mkdir(parents=True, exist_ok=True)
        with open(d / f"f{i % per_dir:03d}", "wb") as f:
            f.write(data)


def _wheel_entry(wheels: Path, n: int) -> None:
    """One wheel entry as ``WheelCache.store`` writes it (wheel, key.json recording it, build.log)."""
    digest = hashlib.sha256(str(n).encode()).hexdigest()[:20]
    entry = wheels / digest
    entry.mkdir(parents=True)
    wheel = entry / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(os.urandom(4096))
    key = {"requirement": "horovod==0.28.1", "build_env": [], "frameworks": [["torch", "2.3.0"]],
           "python_tag": "cp311", "compiler": "c++ 12", "platform": "linux-64", "mpi": "none", "fixes": [],
           "wheel": {"file": wheel.name, "size": 4096, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}}
    (entry / "key.json").write_text(json.dumps(key))
    (entry / "build.log").write_text("built\n")
    for f in entry.iterdir():
        f.chmod(0o600)


def build(base: Path, files: int, wheels: int) -> dict:
    """A cache of ``files`` files and ``wheels`` wheel entries under ``base``; returns its variables."""
    cache, uv = base / "envtool", base / "uv"
    cache.mkdir(parents=True, mode=0o700)
    _fill(cache / "pkgs", files * 5 // 10)
    _fill(cache / "bytecode", files * 2 // 10)
    _fill(uv, files - files * 5 // 10 - files * 2 // 10)
    for n in range(wheels):
        _wheel_entry(cache / "horovod-wheels", n)
    for d in [cache] + [p for p in cache.iterdir() if p.is_dir()]:
        d.chmod(0o700)
    return {"ENVTOOL_CACHE_DIR": str(cache), "UV_CACHE_DIR": str(uv)}


def _once(argv, cwd: Path, env: dict) -> float:
    """Wall seconds of ``python -m envtool ARGV`` in ``cwd`` (the checkout: first on ``sys.path``).

    Raises:
        subprocess.CalledProcessError: it failed.
    """
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "envtool", *argv], cwd=cwd, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def _maybe(argv, cwd: Path, env: dict):
    """:func:`_once`, or None when the command fails (an older checkout without ``--du``)."""
    try:
        return _once(argv, cwd, env)
    except subprocess.CalledProcessError:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=81_600, help="files in the small cache (default 81,600)")
    parser.add_argument("--scale", type=int, default=10, help="the large cache is this many times the small")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--envtool", type=Path, default=REPO, metavar="DIR", help="the checkout to time")
    parser.add_argument("--dir", type=Path, default=None, metavar="TMPDIR", help="where the caches are built")
    parser.add_argument("--spec", default="cpu-horovod", help="the spec plan is run for")
    parser.add_argument("--compare", type=Path, default=None, metavar="DIR",
                        help="another checkout (e.g. git worktree add /tmp/base main) timed on the same caches, "
                             "interleaved with this one")
    args = parser.parse_args()
    top = Path(tempfile.mkdtemp(prefix="bench-flat-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        caches = {"small": build(top / "small", args.files, 4),
                  "large": build(top / "large", args.files * args.scale, 4 * args.scale)}
        print(f"built {args.files:,} and {args.files * args.scale:,} files in {time.perf_counter() - t0:.0f} s "
              f"under {top}")
        trees = {"this": args.envtool.resolve()}
        if args.compare is not None:
            trees["other"] = args.compare.resolve()
        commands = {"cache list": ["cache", "list"], f"plan {args.spec}": ["plan", args.spec]}
        envs = {(t, k): dict(os.environ, PYTHONPATH=str(cwd), **v) for t, cwd in trees.items() for k, v in caches.items()}
        for (t, _), env in envs.items():  # warm-up: page cache, .pyc, the memos a first plan writes
            for argv in commands.values():
                _once(argv, trees[t], env)
        times = {(c, tk): [] for c in commands for tk in envs}
        for _ in range(args.runs):
            for c, argv in commands.items():
                for (t, k), env in envs.items():
                    times[(c, (t, k))].append(_once(argv, trees[t], env))
        du = {tk: _maybe(["cache", "list", "--du"], trees[tk[0]], env) for tk, env in envs.items()}
        load = os.getloadavg()
        print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores; median of "
              f"{args.runs} runs each")
        missed = []
        for t, cwd in trees.items():
            print(f"{t}: {cwd}")
            print(f"  {'command':<24}{'small (s)':>10}{'large (s)':>10}{'large/small':>13}  target")
            for c in commands:
                small, large = (statistics.median(times[(c, (t, k))]) for k in ("small", "large"))
                ok = large / small <= TARGET
                if t == "this" and not ok:
                    missed.append(c)
                print(f"  {c:<24}{small:>10.3f}{large:>10.3f}{large / small:>13.2f}  <= {TARGET}: "
                      f"{'met' if ok else 'missed'}")
            small_du, large_du = du[(t, "small")], du[(t, "large")]
            if small_du and large_du:
                print(f"  {'cache list --du (once)':<24}{small_du:>10.3f}{large_du:>10.3f}{large_du / small_du:>13.2f}"
                      "  (walks every file: for contrast)")
        return 1 if missed else 0
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
