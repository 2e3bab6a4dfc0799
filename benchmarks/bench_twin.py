#!/usr/bin/env python3
"""Benchmark: the site twin (tests/twin/make_twin.py) — build time cold and cached, disk used, and the
time of the mission's command on it, ``envtool create open-ce-twin --clone`` (clone + Horovod rebuild).

Measured in one run, side by side:

* ``twin, cold``    — make_twin into an empty directory (wheels come through pip's configuration; the
  Gloo-only Horovod wheel is compiled unless ``--reuse-horovod DIR`` copies ``DIR/built`` in first,
  which keeps this run short; the report says which);
* ``twin, cached``  — make_twin again on the same directory (every stage's stamp matches);
* ``clone+rebuild`` — in a bash with Lmod, ``module load`` of the twin's module, then
  ``envtool create open-ce-twin --clone --prefix …`` with ``ENVTOOL_TWIN_SYSTEM=twin`` set, so the
  site and the source are detected as a user meets them; the Horovod wheel cache is the caller's
  envtool cache (warm when ``create cpu-horovod`` ran before with the same toolchain);
* ``du``            — bytes of the twin directory, its base env and the clone (``du -sb``).

Usage: python benchmarks/bench_twin.py [--workdir DIR] [--reuse-horovod TWIN_DIR] [--skip-create] [--json]
Prints seconds and the ratio cached/cold; ``--json`` prints the same as one object.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAKE = REPO / "tests" / "twin" / "make_twin.py"


def _du(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def _make(root: Path) -> tuple:
    t = time.monotonic()
    proc = subprocess.run([sys.executable, str(MAKE), "--dir", str(root), "--json"], capture_output=True, text=True)
    took = time.monotonic() - t
    if proc.returncode != 0:
        sys.exit(f"make_twin failed:\n{proc.stderr[-3000:]}")
    return took, json.loads(proc.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", help="where the cold twin and the clone go (default: a new temp dir, removed)")
    ap.add_argument("--reuse-horovod", metavar="TWIN_DIR", help="copy TWIN_DIR/built (the Gloo-only wheel) in first")
    ap.add_argument("--skip-create", action="store_true", help="time the twin only")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-twin-"))
    work.mkdir(parents=True, exist_ok=True)
    root = work / "twin"
    if root.exists():
        subprocess.run(["chmod", "-R", "u+w", str(root)], check=False)
        shutil.rmtree(root)
    root.mkdir()
    horovod = "compiled"
    if args.reuse_horovod:
        shutil.copytree(Path(args.reuse_horovod) / "built", root / "built")
        horovod = f"reused from {args.reuse_horovod}"
    res = {"load": os.getloadavg(), "horovod_wheel": horovod}
    res["cold_s"], info = _make(root)
    res["cold_stages_s"] = info["seconds"]
    res["cached_s"], _ = _make(root)
    res["cached_over_cold"] = res["cached_s"] / res["cold_s"]
    res["twin_bytes"] = _du(root)
    res["base_env_bytes"] = _du(Path(info["base_env"]))
    if not args.skip_create:
        prefix = work / "clone"
        env = dict(os.environ, ENVTOOL_SITE_PATH=info["site"].rsplit("/", 1)[0],
                   ENVTOOL_SPEC_PATH=info["spec_file"].rsplit("/", 1)[0], ENVTOOL_TWIN_SYSTEM="twin",
                   PYTHONPATH=str(REPO))
        lmod = next((str(p) for p in sorted(Path("/usr/share/lmod").glob("*/init/bash"))), None)
        if lmod is None:
            sys.exit("Lmod is not installed (tests/setup.d/modules.sh)")
        script = (f"source {shlex.quote(lmod)} && module use {shlex.quote(info['modulefiles'])} && "
                  f"module load {shlex.quote(info['module'])} && "
                  f"{shlex.quote(sys.executable)} -m envtool create open-ce-twin --clone --prefix "
                  f"{shlex.quote(str(prefix))} --json")
        t = time.monotonic()
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True,
                              env=env, cwd=REPO)
        res["clone_rebuild_s"] = time.monotonic() - t
        res["clone_ok"] = proc.returncode == 0
        if proc.returncode != 0:
            res["clone_error"] = (proc.stdout + proc.stderr)[-2000:]
        else:
            res["clone_bytes"] = _du(prefix)
            res["clone_timings_s"] = json.loads(proc.stdout).get("timings")
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"load average: {' '.join('%.2f' % x for x in res['load'])}; Horovod wheel: {horovod}")
        print(f"twin, cold     {res['cold_s']:8.1f} s   stages: "
              + ", ".join(f"{k} {v:.1f}" for k, v in res["cold_stages_s"].items()))
        print(f"twin, cached   {res['cached_s']:8.1f} s   ({res['cached_over_cold']:.3f}x cold)")
        print(f"twin on disk   {res['twin_bytes'] / 2**20:8.0f} MiB (base env {res['base_env_bytes'] / 2**20:.0f} MiB)")
        if "clone_rebuild_s" in res:
            print(f"clone+rebuild  {res['clone_rebuild_s']:8.1f} s   ok={res['clone_ok']}"
                  + (f"; clone {res['clone_bytes'] / 2**20:.0f} MiB" if res.get("clone_bytes") else ""))
            if not res["clone_ok"]:
                print(res["clone_error"])
    if not args.workdir:
        subprocess.run(["chmod", "-R", "u+w", str(work)], check=False)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
