#!/usr/bin/env python3
"""Report how far the committed locks have drifted from what today's indexes would give.

Not a test: what the index serves changes every day. For each committed lock
(``lockfiles/*.conda-lock.yml``) this solves the spec afresh into a temporary lock with
``envtool lock`` (this machine's pip configuration and channels) and prints the packages whose
version differs, is new, or is gone. Exit 0 always; read the output.

    python3 scripts/lock_drift_today.py [SPEC ...]
"""
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from envtool.lock import lockio  # noqa: E402
from envtool.lock.check import committed_locks  # noqa: E402


def versions(path: Path) -> dict:
    return {(p.platform, p.manager, p.key[1]): p.version for p in lockio.read_lock(path).packages}


def main(argv) -> int:
    locks = committed_locks([REPO / "lockfiles"])
    for name in argv or sorted(locks):
        with tempfile.TemporaryDirectory() as tmp:
            fresh = Path(tmp) / f"{name}.conda-lock.yml"
            proc = subprocess.run([sys.executable, "-m", "envtool", "-q", "lock", name, "-o", str(fresh)],
                                  cwd=REPO, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{name}: cannot solve today: {proc.stderr.strip()[-500:]}")
                continue
            old, new = versions(locks[name]), versions(fresh)
            rows = [f"  {k[1]} {k[2]} ({k[0]}): {old.get(k, '-')} -> {new.get(k, '-')}"
                    for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
            print(f"{name}: {len(rows)} of {len(old)} locked packages differ from today's solve")
            print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
