"""Set-up that survives a busy machine (issue 37, item 5): a set-up script run while another process
holds apt's locks waits for them instead of failing with exit 100; and ``.ci/run``'s fresh state.

Real apt: the test holds ``/var/lib/apt/lists/lock`` for 10 s and ``/var/lib/dpkg/lock-frontend``
for 30 s with the same kind of lock apt takes (fcntl record locks, as an ``apt-get`` of
unattended-upgrades would), and runs ``tests/setup.d/zsh.sh`` with a ``PATH`` on which zsh is missing, so the script runs
``apt-get update`` and ``apt-get install zsh`` (already installed: nothing changes, but both locks
are taken). Root only; Debian's archive must be reachable (as for every set-up script).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from helpers.speed import scaled

pytestmark = [pytest.mark.slow]

HOLD_S = 30
#: apt's locks and how long the holder keeps each (seconds): the lists lock (``apt-get update``) is let
#: go first, so the script's ``apt-get install`` then meets the dpkg frontend lock, the one issue 37's
#: run failed on, and must wait for it through ``DPkg::Lock::Timeout``
LOCKS = (("/var/lib/apt/lists/lock", 10), ("/var/lib/dpkg/lock-frontend", HOLD_S))

HOLDER = r"""
import fcntl, os, sys, time
held = []
for arg in sys.argv[1:]:
    path, seconds = arg.rsplit(":", 1)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(fd, fcntl.LOCK_EX)  # waits if a real apt holds it now
    held.append((float(seconds), fd))
start = time.monotonic()
print("held", flush=True)
for seconds, fd in sorted(held):
    time.sleep(max(0.0, start + seconds - time.monotonic()))
    os.close(fd)
"""


def _path_without(tmp_path: Path, name: str) -> str:
    """A PATH with every command of the usual directories but ``name`` (links in one directory)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if not os.path.isdir(d) or os.path.islink(d):
            continue
        for entry in os.scandir(d):
            target = bin_dir / entry.name
            if entry.name != name and not os.path.lexists(target):
                target.symlink_to(entry.path)
    return str(bin_dir)


@pytest.mark.skipif(os.geteuid() != 0, reason="apt's locks and apt-get install need root")
def test_a_set_up_script_waits_for_apts_locks(tmp_path):
    if not shutil.which("zsh"):
        subprocess.run(["bash", str(REPO / "tests/setup.d/zsh.sh")], check=True, timeout=900)
    path = _path_without(tmp_path, "zsh")
    assert subprocess.run(["bash", "-c", "command -v zsh"], env={"PATH": path}).returncode != 0
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, *(f"{p}:{t}" for p, t in LOCKS)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        proc = subprocess.run(["bash", str(REPO / "tests/setup.d/zsh.sh")], capture_output=True, text=True,
                              env={**os.environ, "PATH": path}, timeout=900)
        took = time.monotonic() - started
        still_held = holder.poll() is None
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # it waited for the holder rather than getting around it: update for the lists lock (10 s), then
    # install for the frontend lock until the holder's end (30 s); without the wait install fails at once
    assert not still_held and took >= HOLD_S - 2, (took, proc.stderr)
    assert "another process holds apt's lock" in proc.stderr and "held by process" in proc.stderr, proc.stderr


def test_every_apt_get_in_the_set_up_goes_through_the_lock_wait():
    """No set-up script calls apt-get directly: each goes through scripts/lib/apt.sh."""
    scripts = [REPO / "scripts" / "setup.sh", *sorted((REPO / "tests" / "setup.d").glob("*.sh"))]
    direct = []
    for script in scripts:
        for n, line in enumerate(script.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if "apt-get" in code and "echo" not in code:
                direct.append(f"{script.relative_to(REPO)}:{n}: {line.strip()}")
        assert "scripts/lib/apt.sh" in script.read_text(), f"{script} does not source scripts/lib/apt.sh"
    assert direct == []


def test_ci_run_gives_every_location_envtool_uses_a_fresh_directory(tmp_path):
    """``.ci/run`` under CI=true (issue 37, item 4): envtool's cache, uv's and pip's caches, the
    registry, the user and site configuration files all lie under the run's fresh state directory,
    whatever the caller's environment said, and the state directory is gone afterwards. Run for real
    on a copy of .ci/run whose README's test line prints ``envtool info --json``."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy2(REPO / ".ci" / "run", repo / ".ci" / "run")
    out = tmp_path / "info.json"
    (repo / "README.md").write_text(f"```\n{sys.executable} -m envtool info --json > {out}   # tests\n```\n")
    polluted = tmp_path / "polluted"
    env = {**os.environ, "CI": "true", "PYTHONPATH": str(REPO), "ENVTOOL_SITE": "perlmutter",
           "ENVTOOL_CACHE_DIR": str(polluted / "cache"), "XDG_STATE_HOME": str(polluted / "state"),
           "XDG_CONFIG_HOME": str(polluted / "config"), "ENVTOOL_SYSTEM_CONFIG": str(polluted / "etc.yaml"),
           "UV_CACHE_DIR": str(polluted / "uv"), "ENVTOOL_TEST_CPU_ENV": str(polluted / "env")}
    proc = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True, env=env,
                          timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr
    state = proc.stderr.split("fresh state under ", 1)[1].split()[0]
    info = json.loads(out.read_text())
    paths = {"registry": info["registry"], "logs": info["logs"],
             **{f"config {c['path']}": c["path"] for c in info["config_files"]},
             **{f"cache {c['name']}": c["path"] for c in info["caches"] if c.get("path")}}
    outside = {k: v for k, v in paths.items() if not v.startswith(state + "/")}
    assert not outside, (state, outside)
    assert info["site"] is None  # ENVTOOL_SITE was unset
    assert not os.path.exists(state) and not polluted.exists()
