"""Capture real Slurm client outputs into tests/data/scheduler/slurm/ (run as root, by hand).

    cd REPO && python3 tests/data/scheduler/capture_slurm.py

Starts the tests' one-node Slurm (tests/helpers/slurm.py: Debian's slurm-wlm on loopback),
submits three small jobs (one that sleeps, one that exits 3, one held), runs the exact commands
envtool's Slurm module runs (``sbatch --parsable``, ``squeue -h -j ID -o "%i %T"``,
``scontrol -o show job ID``) plus ``sacct``, writes each command's stdout (and stderr, exit
status) to a file, and stops the cluster. The files are stored as captured; README.md says which
Slurm version wrote them.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/ (for helpers.slurm)

from helpers import slurm  # noqa: E402


def main() -> int:
    out = HERE / "slurm"
    out.mkdir(exist_ok=True)
    why = slurm.ensure_installed()
    if why:
        print(why, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cluster = slurm.start(Path(tmp))
        try:
            def run(name: str, *argv: str) -> str:
                proc = cluster.run(*argv, timeout=60)
                (out / f"{name}.stdout").write_text(proc.stdout)
                if proc.stderr or proc.returncode:
                    (out / f"{name}.stderr").write_text(f"# exit status {proc.returncode}\n{proc.stderr}")
                return proc.stdout

            scripts = Path(tmp) / "jobs"
            scripts.mkdir()
            (scripts / "sleep.sh").write_text("#!/bin/bash\n#SBATCH -N 1\nsleep 20\n")
            (scripts / "fail.sh").write_text("#!/bin/bash\n#SBATCH -N 1\nexit 3\n")
            (scripts / "held.sh").write_text("#!/bin/bash\n#SBATCH -N 1\n#SBATCH -H\ntrue\n")
            sleep_id = run("sbatch-parsable", "sbatch", "--parsable", "-o", "/dev/null",
                           str(scripts / "sleep.sh")).strip()
            fail_id = run("sbatch-parsable-2", "sbatch", "--parsable", "-o", "/dev/null",
                          str(scripts / "fail.sh")).strip()
            held_id = run("sbatch-parsable-held", "sbatch", "--parsable", "-o", "/dev/null",
                          str(scripts / "held.sh")).strip()
            run("sbatch-missing-script", "sbatch", "--parsable", str(scripts / "no-such.sh"))
            for _ in range(60):
                st = cluster.run("squeue", "-h", "-j", sleep_id, "-o", "%i %T").stdout
                if "RUNNING" in st:
                    break
                time.sleep(1)
            run("squeue-running", "squeue", "-h", "-j", sleep_id, "-o", "%i %T")
            run("squeue-held", "squeue", "-h", "-j", held_id, "-o", "%i %T")
            run("squeue-all", "squeue", "-h", "-o", "%i %T")
            run("scontrol-running", "scontrol", "-o", "show", "job", sleep_id)
            for _ in range(60):
                if not cluster.run("squeue", "-h", "-j", fail_id, "-o", "%i %T").stdout.strip():
                    break
                time.sleep(1)
            run("squeue-finished", "squeue", "-h", "-j", fail_id, "-o", "%i %T")
            run("scontrol-failed", "scontrol", "-o", "show", "job", fail_id)
            run("sacct", "sacct", "-n", "-P", "-j", fail_id, "-o", "JobID,State,ExitCode")
            run("squeue-unknown-id", "squeue", "-h", "-j", "999999", "-o", "%i %T")
            run("scontrol-unknown-id", "scontrol", "-o", "show", "job", "999999")
            for _ in range(60):
                if not cluster.run("squeue", "-h", "-j", sleep_id, "-o", "%i %T").stdout.strip():
                    break
                time.sleep(1)
            run("scontrol-completed", "scontrol", "-o", "show", "job", sleep_id)
            run("sbatch-version", "sbatch", "--version")
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
