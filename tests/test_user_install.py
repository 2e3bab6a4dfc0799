"""An install route for users without root: the built wheel (distribution ``envtool-hpc``) carries
the specs, site files, lockfiles and shell completions, and installs into a pipx-style venv of an
unprivileged user, whose ``envtool`` then lists specs, plans the main job and prints completions
(slow: builds the wheel and installs envtool's dependencies for that user)."""
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow

USER = "envtool-other"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (found,) = out.glob("envtool_hpc-*.whl")
    return found


def test_distribution_name_is_ours_and_the_command_stays():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == "envtool-hpc"      # `envtool` on PyPI is another project (2015)
    assert project["scripts"]["envtool"] == "envtool.cli.entry:entry"


def test_wheel_carries_specs_sites_lockfiles_and_completions(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for kind, pattern in (("specs", "*.yaml"), ("sites", "*.yaml"), ("lockfiles", "*.yml")):
        for f in (REPO / kind).glob(pattern):
            assert f"envtool/_bundled/{kind}/{f.name}" in names, f
    assert "envtool/_bundled/completions/envtool.bash" in names
    assert "envtool/_bundled/completions/_envtool" in names
    assert "envtool/probes/imports.py" in names


def _as_user(script: str, home: Path, timeout=1800):
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "USER": USER}
    # pip's settings of this machine (an index mirror, a wheelhouse, a certificate) reach the user
    # as they would through the site's pip.conf
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    extra = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.extra-index-url"],
                           capture_output=True, text=True).stdout.strip()
    if extra:
        env["PIP_EXTRA_INDEX_URL"] = extra
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    return subprocess.run([runuser, "-u", USER, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()],
                           "bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True,
                          timeout=timeout, cwd=str(home))


def test_unprivileged_user_installs_the_wheel_and_uses_it(wheel, tmp_path):
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        pytest.fail(f"user {USER} is missing: run tests/setup.d/publish.sh as root")
    home = Path("/var/tmp") / f"envtool-user-install-{os.getpid()}"
    home.mkdir(mode=0o755)
    try:
        shutil.copy2(wheel, home / wheel.name)
        shutil.chown(home, user=USER)
        python = shutil.which("python3", path="/usr/bin") or "/usr/bin/python3"
        # a pipx-style install: a venv of the user's own, its `envtool` on the user's PATH
        proc = _as_user(f"""set -e
            id -u | grep -vx 0
            {python} -m venv "$HOME/.local/share/envtool-hpc"
            "$HOME/.local/share/envtool-hpc/bin/python" -m pip install -q --disable-pip-version-check "$HOME/{wheel.name}"
            mkdir -p "$HOME/.local/bin"
            ln -s "$HOME/.local/share/envtool-hpc/bin/envtool" "$HOME/.local/bin/envtool"
            export PATH="$HOME/.local/bin:$PATH"
            cd "$HOME"
            envtool specs > specs.txt
            envtool plan cpu-horovod --prefix "$HOME/envs/cpu-horovod" > plan.txt
            envtool completion bash > envtool.bash
            bash -c 'source ./envtool.bash && type _shtab_envtool >/dev/null'
            """, home)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        specs = (home / "specs.txt").read_text()
        assert "cpu-horovod" in specs and "open-ce-1.1.3" in specs
        plan = (home / "plan.txt").read_text()
        assert "Build Horovod" in plan
        # the plan installs the lock the wheel carries, not a file of this checkout
        assert "_bundled/lockfiles/cpu-horovod.conda-lock.yml" in plan
        assert str(REPO) not in plan
        assert (home / "envtool.bash").read_text() == (REPO / "completions" / "envtool.bash").read_text()
        assert not (home / "envs").exists()
    finally:
        shutil.rmtree(home, ignore_errors=True)
