"""The main job end to end on real input: cpu-horovod built, validated and used (slow)."""
import json
import os
import subprocess

import pytest

from conftest import run_envtool
from envtool.horovod import checkbuild
from envtool.validate import probes
from helpers.speed import scaled

pytestmark = pytest.mark.slow


def env_run(prefix, argv, timeout=None, extra=None):
    env = dict(os.environ, PYTHONUNBUFFERED="1", PATH=f"{prefix}/bin:{os.environ['PATH']}")
    env.update(extra or {})
    return subprocess.run(argv, capture_output=True, text=True, timeout=scaled(300) if timeout is None else timeout,
                          env=env)


def test_check_build_shows_pytorch_gloo_mpi(cpu_horovod_env):
    proc = env_run(cpu_horovod_env, [str(cpu_horovod_env / "bin" / "horovodrun"), "--check-build"])
    found = checkbuild.parse(proc.stdout)
    assert found.version == "0.28.1"
    assert found.section("frameworks")["PyTorch"] is True
    assert found.section("controllers") == {"MPI": True, "Gloo": True}
    assert found.section("tensor_operations")["Gloo"] and found.section("tensor_operations")["MPI"]


def test_two_rank_gloo_allreduce(cpu_horovod_env):
    proc = env_run(cpu_horovod_env, probes.allreduce_command(cpu_horovod_env, 2, "gloo"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert probes.parse_allreduce(proc.stdout, 2), proc.stdout


def test_two_rank_mpi_allreduce(cpu_horovod_env):
    proc = env_run(cpu_horovod_env, probes.allreduce_command(cpu_horovod_env, 2, "mpi"),
                   extra={"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                          "OMPI_MCA_rmaps_base_oversubscribe": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert probes.parse_allreduce(proc.stdout, 2), proc.stdout


def test_environment_was_relocated_to_its_final_prefix(cpu_horovod_env):
    shebang = (cpu_horovod_env / "bin" / "horovodrun").read_text().splitlines()[0]
    assert shebang == f"#!{cpu_horovod_env}/bin/python"
    proc = env_run(cpu_horovod_env, [str(cpu_horovod_env / "bin" / "python"), "-c", "import sys; print(sys.prefix)"])
    assert proc.stdout.strip() == str(cpu_horovod_env)
    meta = json.loads((cpu_horovod_env / ".envtool" / "create.json").read_text())
    assert meta["results"]["validate"]["ok"] is True
    assert (cpu_horovod_env / ".envtool" / "create.log").stat().st_size > 0
    assert not list(cpu_horovod_env.parent.glob(".*envtool-build*"))
    # nothing the user reads names the temporary build directory: not the activate scripts' prompt either
    for script in ("activate", "activate.csh", "activate.fish"):
        text = (cpu_horovod_env / "bin" / script).read_text()
        assert "envtool-build" not in text and f"({cpu_horovod_env.name})" in text, script


def test_dataloader_probe_under_every_start_method(cpu_horovod_env):
    for method in ("fork", "forkserver", "spawn"):
        result = probes.dataloader(cpu_horovod_env / "bin" / "python", method)
        assert result.ok, result
        assert result.default_method == "fork"  # Linux, Python 3.11


def test_second_create_reuses_the_cached_wheel(cpu_horovod_env, tmp_path):
    target = tmp_path / "second"
    proc = run_envtool("--quiet", "create", "cpu-horovod", "--prefix", target, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["results"]["build-horovod"]["cache_hit"] is True
    assert data["results"]["validate"]["ok"] is True
    assert data["timings"]["build-horovod"] < 60
    # the cached wheel was built in the first environment's temporary build prefix: its libraries'
    # RUNPATH now points into this environment ($ORIGIN), so ldd finds torch's libraries here
    libs = list(target.glob("lib/python*/site-packages/horovod/torch/mpi_lib_v2*.so"))
    assert libs and data["results"]["build-horovod"]["runpath"]["changed"]
    dyn = subprocess.run(["readelf", "-d", str(libs[0])], capture_output=True, text=True, check=True).stdout
    runpath = next(line for line in dyn.splitlines() if "RUNPATH" in line)
    assert "$ORIGIN/../../torch/lib" in runpath and "envtool-build" not in runpath and "site-packages" not in runpath
    ldd = subprocess.run(["ldd", str(libs[0])], capture_output=True, text=True, check=True).stdout
    assert "not found" not in ldd and f"{target}/lib/" in next(l for l in ldd.splitlines() if "libc10.so" in l)


def test_check_build_cli_against_live_env(cpu_horovod_env):
    proc = run_envtool("check-build", "--prefix", cpu_horovod_env, "--spec", "cpu-horovod", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"] is True
    proc = run_envtool("check-build", "--prefix", cpu_horovod_env, "--spec", "perlmutter-horovod")
    assert proc.returncode == 1 and "NCCL" in proc.stderr


def test_installed_packages_are_byte_compiled(cpu_horovod_env):
    # pip runs with --no-compile and compileall compiles in parallel afterwards: every module of
    # torch (and of its dependencies) must have its .pyc, as a plain pip install leaves it.
    import sys as _sys

    tag = f"cpython-{_sys.version_info.major}{_sys.version_info.minor}"
    site = next(cpu_horovod_env.glob("lib/python*/site-packages"))
    for pkg in ("torch", "sympy", "jinja2"):
        sources = [p for p in (site / pkg).rglob("*.py")]
        assert sources, pkg
        missing = [p for p in sources if not (p.parent / "__pycache__" / f"{p.stem}.{tag}.pyc").exists()]
        # a few files that do not compile (templates, python-2-only tests) are skipped, as pip skips them
        assert len(missing) <= len(sources) // 100, (pkg, missing[:5])


def test_the_environment_is_the_one_its_committed_lock_describes(cpu_horovod_env):
    """``envtool create cpu-horovod`` installs the committed lock (issue 10): same names, same
    versions, same archive hashes, whatever the index serves today; Horovod built from the locked sdist."""
    from pathlib import Path

    from envtool.lock import lockio, snapshot

    if os.environ.get("ENVTOOL_TEST_CPU_ENV"):
        pytest.skip("ENVTOOL_TEST_CPU_ENV reuses an environment that this run did not create")
    committed = lockio.read_lock(Path(__file__).resolve().parent.parent / "lockfiles" / "cpu-horovod.conda-lock.yml")
    locked = {(p.key[1], p.version) for p in committed.packages}
    installed = {(p.key[1], p.version) for p in snapshot.snapshot(cpu_horovod_env, "linux-64", lookup=False)}
    assert installed == locked
    own = lockio.read_lock(cpu_horovod_env / "conda-lock.yml")
    hashes = {p.key[1]: p.sha256 for p in committed.packages if not p.built}
    assert {p.key[1]: p.sha256 for p in own.packages if not p.built} == hashes
    created = json.loads((cpu_horovod_env / ".envtool" / "create.json").read_text())
    assert created["results"]["verify-lock"]["ok"] is True
