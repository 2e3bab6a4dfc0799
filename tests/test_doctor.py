"""``envtool doctor`` on real environments (the cpu-horovod env, small venvs made here).

Slow tests use ``cpu_horovod_env`` (tests/conftest.py); the rest need no environment.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import run_envtool
from helpers.wheels import make_wheel
from envtool.checks import registry
from envtool.checks.gpu import nccl_code_to_version
from envtool.checks.launchers import mpi_identity
from helpers.speed import scaled

ALL_IDS = {c.id for c in registry.all_checks()}


def doctor_json(*args, env=None):
    proc = run_envtool("doctor", *args, "--json", env=env, timeout=scaled(600))
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    return proc.returncode, data, {f["id"]: f for f in data["findings"]}


def write_spec(tmp_path, name, body):
    d = tmp_path / "specs"
    d.mkdir(exist_ok=True)
    (d / f"{name}.yaml").write_text(textwrap.dedent(body))
    return {"ENVTOOL_SPEC_PATH": str(d)}


# -- no environment needed -------------------------------------------------------------------

def test_bad_input_exits_2(tmp_path):
    cases = [("--prefix", tmp_path / "missing"), ("--prefix", tmp_path),  # not a dir / no bin/python
             ("--prefix", sys.prefix, "--only", "no-such-check"),
             ("--prefix", sys.prefix, "--script", tmp_path / "nope.py"),
             ("--prefix", sys.prefix, "--lock", tmp_path / "nope.lock"),
             ("--prefix", sys.prefix, "--spec", "no-such-spec"),
             ("--prefix", sys.prefix, "--lock", Path(__file__))]  # not a conda-lock file
    for args in cases:
        proc = run_envtool("doctor", *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert "error:" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_site_modules_from_spec(tmp_path):
    env = write_spec(tmp_path, "cpu-with-modules", """\
        extends: cpu-horovod
        name: cpu-with-modules
        site: {name: testsite, modules: [cudnn/8.7.0, evp-patch], launcher: "horovodrun -np {ranks}"}
        """)
    proc = run_envtool("doctor", "--prefix", sys.prefix, "--spec", "cpu-with-modules", "--only", "site-modules",
                       env={**env, "LOADEDMODULES": "evp-patch"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "cudnn/8.7.0" in proc.stdout and "fix: module load cudnn/8.7.0 evp-patch" in proc.stdout
    proc = run_envtool("doctor", "--prefix", sys.prefix, "--spec", "cpu-with-modules", "--only", "site-modules",
                       env={**env, "LOADEDMODULES": "cudnn/8.7.0:evp-patch:gcc/12"})
    assert proc.returncode == 0, proc.stdout


def test_site_without_spec_uses_the_site_file():
    # bede's site file asks for slurm/dflt and launches with srun (sites/bede.yaml)
    code, data, by_id = doctor_json("--prefix", sys.prefix, "--site", "bede", "--only", "site-modules", "launchers",
                                    env={"LOADEDMODULES": "", "PATH": "/usr/bin:/bin"})
    assert code == 1
    assert by_id["site-modules"]["status"] == "fail" and "slurm/dflt" in by_id["site-modules"]["summary"]
    if shutil.which("srun", path="/usr/bin:/bin") is None:
        assert by_id["launchers"]["status"] == "fail" and "srun" in by_id["launchers"]["summary"]
    code, _, by_id = doctor_json("--prefix", sys.prefix, "--site", "bede", "--only", "site-modules",
                                 env={"LOADEDMODULES": "gcc/12:slurm/dflt"})
    assert code == 0 and by_id["site-modules"]["status"] == "ok"


def test_unknown_site_is_a_usage_error():
    proc = run_envtool("doctor", "--prefix", sys.prefix, "--site", "summmit", "--only", "launchers")
    assert proc.returncode == 2 and "did you mean summit" in proc.stderr and "Traceback" not in proc.stderr


def test_runtime_variables_are_shown():
    code, data, by_id = doctor_json("--prefix", sys.prefix, "--only", "runtime-vars",
                                    env={"HOROVOD_CYCLE_TIME": "2", "HOROVOD_TIMELINE": "/tmp/t.json"})
    f = by_id["runtime-vars"]
    assert code == 0 and f["status"] == "ok"
    assert f["details"]["set"] == {"HOROVOD_CYCLE_TIME": "2", "HOROVOD_TIMELINE": "/tmp/t.json"}
    _, _, by_id = doctor_json("--prefix", sys.prefix, "--only", "runtime-vars",
                              env={"HOROVOD_FUSION_THRESHOLD": "64MB"})
    assert by_id["runtime-vars"]["status"] == "warn"


def test_mpi_banners_and_nccl_codes():
    assert mpi_identity("Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4") == ("openmpi", "4.1.4")
    assert mpi_identity("mpirun (Open MPI) 4.1.4\n\nReport bugs to") == ("openmpi", "4.1.4")
    assert mpi_identity("HYDRA build details:\n    Version:                                 4.0.2") == ("mpich", "4.0.2")
    assert mpi_identity("IBM Spectrum MPI 10.3.1.2") == ("spectrum-mpi", "10.3.1.2")
    assert nccl_code_to_version(21803) == "2.18.3" and nccl_code_to_version(2408) == "2.4.8"
    assert nccl_code_to_version(0) is None and nccl_code_to_version(True) is None


# -- the real cpu-horovod environment -------------------------------------------------------

@pytest.mark.slow
def test_healthy_env_passes_and_json_is_complete(cpu_horovod_env):
    code, data, by_id = doctor_json("--prefix", cpu_horovod_env, "--spec", "cpu-horovod")
    assert code == 0 and data["ok"] is True and data["exit_status"] == 0, json.dumps(data, indent=1)
    assert set(by_id) == ALL_IDS
    assert data["prefix"] == str(Path(cpu_horovod_env).resolve()) and data["spec"] == "cpu-horovod"
    assert sum(data["counts"].values()) == len(ALL_IDS)
    for f in data["findings"]:
        assert set(f) == {"id", "title", "status", "summary", "fix", "details", "seconds"}
        assert f["status"] in ("ok", "warn", "fail", "skipped") and f["summary"] and f["title"]
    for cid in ("versions", "horovod-build", "horovod-metadata", "start-method", "launchers", "read-only"):
        assert by_id[cid]["status"] == "ok", by_id[cid]
    hb = by_id["horovod-build"]["details"]
    assert hb["check_build"]["frameworks"]["PyTorch"] is True
    assert hb["api"]["gloo_built"] is True and hb["api"]["mpi_built"] is True and hb["api"]["nccl_built"] == 0
    assert by_id["versions"]["details"]["found"]["torch"].startswith("2.13.0")
    sm = by_id["start-method"]["details"]
    assert sm["hvd_init"] is True and sm["controller"] == "gloo"
    assert {r["method"] for r in sm["results"]} == {sm["default"], "forkserver"}
    assert all(r["ok"] for r in sm["results"])
    assert by_id["gpu"]["status"] == "skipped" or os.path.exists("/proc/driver/nvidia/version")
    assert by_id["script"]["status"] == "skipped"


@pytest.mark.slow
def test_missing_capability_fails_with_rebuild_command(cpu_horovod_env, tmp_path):
    env = write_spec(tmp_path, "cpu-horovod-nccl", """\
        extends: cpu-horovod
        name: cpu-horovod-nccl
        cuda: {value: "12.4", mark: I, source: horovod-pypi}
        horovod:
          frameworks: [pytorch, mxnet]
          gpu_operations: nccl
        expect:
          check_build:
            frameworks: [PyTorch, MXNet]
            controllers: [Gloo, MPI]
            tensor_operations: [NCCL, Gloo, MPI]
        """)
    proc = run_envtool("doctor", "--prefix", cpu_horovod_env, "--spec", "cpu-horovod-nccl",
                       "--only", "horovod-build", env=env, timeout=scaled(600))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    flat = " ".join(out.split())  # findings wrap to the terminal (80 columns here); fix lines do not
    assert "FAIL  horovod-build" in out
    assert "MXNet: expected by spec cpu-horovod-nccl, not built" in flat
    assert "NCCL tensor operations: expected by spec cpu-horovod-nccl, not built" in flat
    assert "hvd.cuda_built() and hvd.rocm_built() are False" in flat
    fix = next(line for line in out.splitlines() if "fix:" in line)
    for part in ("HOROVOD_GPU_OPERATIONS=NCCL", "HOROVOD_WITH_PYTORCH=1", "HOROVOD_WITH_MXNET=1", "HOROVOD_WITH_GLOO=1",
                 "HOROVOD_WITH_MPI=1", "HOROVOD_WITHOUT_TENSORFLOW=1",
                 "-m pip install --no-build-isolation --no-cache-dir --force-reinstall", "horovod==0.28.1"):
        assert part in fix, fix


def test_spec_expecting_nccl_without_asking_for_it_is_refused(tmp_path):
    # check-build can only show NCCL when the build asks for it: the spec is inconsistent (exit 2),
    # which doctor reports before examining anything.
    env = write_spec(tmp_path, "nccl-expected-only", """\
        extends: cpu-horovod
        name: nccl-expected-only
        expect:
          check_build: {frameworks: [PyTorch], controllers: [Gloo, MPI], tensor_operations: [NCCL, Gloo, MPI]}
        """)
    proc = run_envtool("doctor", "--prefix", sys.prefix, "--spec", "nccl-expected-only", "--only", "horovod-build",
                       env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "nccl-expected-only.yaml" in proc.stderr and "expect.check_build.tensor_operations" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def unbuilt_env(cpu_horovod_env, tmp_path_factory):
    """A small venv whose Horovod copy has no compiled extensions (torch from the real env via .pth)."""
    root = tmp_path_factory.mktemp("unbuilt") / "env"
    base = Path(cpu_horovod_env)
    subprocess.run([str(base / "bin" / "python"), "-m", "venv", "--without-pip", str(root)], check=True)
    sp_src = next((base / "lib").glob("python*/site-packages"))
    sp = root / "lib" / sp_src.parent.name / "site-packages"
    shutil.copytree(sp_src / "horovod", sp / "horovod", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copytree(next(sp_src.glob("horovod-*.dist-info")), sp / next(sp_src.glob("horovod-*.dist-info")).name)
    (sp / "zz-real-env.pth").write_text(str(sp_src) + "\n")
    text = (base / "bin" / "horovodrun").read_text().splitlines()
    (root / "bin" / "horovodrun").write_text("\n".join([f"#!{root / 'bin' / 'python'}"] + text[1:]) + "\n")
    (root / "bin" / "horovodrun").chmod(0o755)
    return root


@pytest.mark.slow
def test_unbuilt_extension_is_explained(unbuilt_env):
    proc = run_envtool("doctor", "--prefix", unbuilt_env, "--spec", "cpu-horovod", "--only", "horovod-build",
                       timeout=scaled(600))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    so = next((unbuilt_env / "lib").glob("python*/site-packages")) / "horovod" / "torch"
    flat = " ".join(proc.stdout.split())  # findings wrap to the terminal (80 columns here)
    assert f"Extension horovod.torch has not been built: {so}/mpi_lib_v2" in flat
    assert "check-build still shows [X] PyTorch" in flat  # the trap: -cb alone says PyTorch is fine
    assert "Gloo controller: expected by spec cpu-horovod, not built" in flat
    assert "HOROVOD_WITH_PYTORCH=1" in proc.stdout and f"{unbuilt_env}/bin/python -m pip install" in proc.stdout


@pytest.mark.slow
def test_check_build_cli_counts_a_binding_without_its_extension_as_not_built(unbuilt_env):
    """``envtool check-build`` on the same environment: horovodrun's ``[X] PyTorch`` (the binding
    imports without its library) is counted as not built, said on stderr and in ``--json``."""
    proc = run_envtool("check-build", "--prefix", unbuilt_env, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "frameworks: -" in proc.stdout, proc.stdout
    assert "marks [X] PyTorch, but Horovod's PyTorch extension" in " ".join(proc.stderr.split()), proc.stderr
    proc = run_envtool("check-build", "--prefix", unbuilt_env, "--spec", "cpu-horovod", "--json", timeout=scaled(600))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["listed_without_extension"] == ["PyTorch"] and data["found"]["frameworks"]["PyTorch"] is False, data
    assert "frameworks:PyTorch" in data["missing"], data


@pytest.mark.slow
def test_read_only_env_suggests_clone(unbuilt_env):
    sp = next((unbuilt_env / "lib").glob("python*/site-packages"))
    modes = {p: p.stat().st_mode for p in (unbuilt_env, sp)}
    try:
        for p in modes:
            p.chmod(0o555)
        code, _, by_id = doctor_json("--prefix", unbuilt_env, "--spec", "cpu-horovod", "--only", "read-only")
    finally:
        for p, m in modes.items():
            p.chmod(m)
    f = by_id["read-only"]
    assert code == 0 and f["status"] == "warn", f
    assert f"envtool create cpu-horovod --clone {unbuilt_env}" in f["fix"]


@pytest.mark.slow
def test_fork_under_mpi_launch_warns(cpu_horovod_env):
    code, _, by_id = doctor_json("--prefix", cpu_horovod_env, "--only", "start-method",
                                 env={"OMPI_COMM_WORLD_RANK": "0"})
    f = by_id["start-method"]
    assert f["details"]["default"] == "fork"  # Python 3.11 on Linux
    assert code == 0 and f["status"] == "warn", f
    assert "OMPI_COMM_WORLD_RANK" in " ".join(f["details"]["items"]) and "forkserver" in f["fix"]


@pytest.mark.slow
def test_mpi_on_path_other_than_built_against(cpu_horovod_env, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mpirun").write_text("#!/bin/sh\necho 'HYDRA build details:'\necho '    Version:   4.0.2'\n")
    (fake / "mpirun").chmod(0o755)
    code, _, by_id = doctor_json("--prefix", cpu_horovod_env, "--only", "launchers",
                                 env={"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"})
    f = by_id["launchers"]
    assert code == 1 and f["status"] == "fail", f
    assert "openmpi" in f["summary"] and "mpich 4.0.2" in f["summary"]


@pytest.mark.slow
def test_user_site_torch_is_found(cpu_horovod_env, tmp_path):
    userbase = tmp_path / "userbase"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = make_wheel(wheels, "torch", "0.0.1", {"torch/__init__.py": "__version__ = '0.0.1'\nFAKE = True\n"})
    env = {"PYTHONUSERBASE": str(userbase)}
    # the user site of PYTHONUSERBASE (site.py: <base>/lib/pythonX.Y/site-packages); pip --target works from
    # a venv or an externally managed Python alike, where pip --user may be refused
    user_site = userbase / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    subprocess.run([sys.executable, "-m", "pip", "install", "--target", str(user_site), "--no-index", "--no-deps",
                    "-q", str(wheel)], check=True)
    # 1. the cpu-horovod venv disables the user site: found, reported, inactive.
    code, _, by_id = doctor_json("--prefix", cpu_horovod_env, "--only", "user-site", env=env)
    f = by_id["user-site"]
    assert f["status"] == "warn" and f["details"]["shadowing_distributions"] == ["torch"], f
    assert f["details"]["enabled"] is False and str(userbase) in f["details"]["user_site"]
    # 2. a non-venv prefix (the layout of a conda env: the base interpreter here) puts the user site
    #    before its site-packages: a user-site copy of one of its distributions really wins -> fail.
    base = Path(sys.base_prefix)
    if not (base / "bin" / "python").exists():
        pytest.skip(f"{base} has no bin/python")
    from importlib import metadata

    base_sp = next(base.glob("lib/python*/site-packages"))
    have = {(d.metadata["Name"] or "").lower() for d in metadata.distributions(path=[str(base_sp)])}
    name = "iniconfig" if "iniconfig" in have else "pip"  # neither is imported by envtool itself
    shadow = make_wheel(wheels, name, "0.0.1", {f"{name}/__init__.py": "FAKE = True\n"})
    subprocess.run([sys.executable, "-m", "pip", "install", "--target", str(user_site), "--no-index", "--no-deps",
                    "-q", "--upgrade", str(shadow)], check=True)
    real = subprocess.run([str(base / "bin" / "python"), "-c", f"import {name}; print({name}.__file__)"],
                          capture_output=True, text=True, env={**os.environ, **env}, check=True)
    assert str(userbase) in real.stdout  # the shadowing is real
    code, _, by_id = doctor_json("--prefix", base, "--only", "user-site", env=env)
    f = by_id["user-site"]
    assert code == 1 and f["status"] == "fail", f
    assert name in f["details"]["shadowing_distributions"] and name in f["summary"]
    assert "PYTHONNOUSERSITE=1" in f["fix"]


LOCK = Path(__file__).resolve().parent.parent / "lockfiles" / "cpu-horovod.conda-lock.yml"


@pytest.mark.slow
@pytest.mark.skipif(not LOCK.exists(), reason="no committed cpu-horovod lock")
def test_lock_drift(cpu_horovod_env, tmp_path):
    code, _, by_id = doctor_json("--prefix", cpu_horovod_env, "--lock", LOCK, "--only", "lock-drift", "versions")
    assert code == 0 and by_id["lock-drift"]["status"] == "ok", by_id
    drifted = tmp_path / "drifted.conda-lock.yml"
    from dataclasses import replace

    from envtool.lock import lockio

    lock = lockio.read_lock(LOCK)
    assert "2.13.0+cpu" in {p.version for p in lock.packages}
    lockio.write_lock(replace(lock, packages=tuple(replace(p, version="2.12.0+cpu") if p.version == "2.13.0+cpu"
                                                   else p for p in lock.packages)), drifted)
    code, _, by_id = doctor_json("--prefix", cpu_horovod_env, "--lock", drifted, "--only", "lock-drift", "versions")
    assert code == 1
    assert by_id["lock-drift"]["status"] == "fail"
    assert "~ pip torch: version 2.12.0+cpu -> 2.13.0+cpu" in by_id["lock-drift"]["details"]["items"]
    assert "--from-lock" in by_id["lock-drift"]["fix"]
    assert "torch: the lock has 2.12.0+cpu, found 2.13.0+cpu" in by_id["versions"]["details"]["items"]


def test_default_prefix_is_the_active_env(tmp_path):
    venv = tmp_path / "active"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {"VIRTUAL_ENV": str(venv), "CONDA_PREFIX": ""}
    _, data, _ = doctor_json("--only", "read-only", env=env)
    assert data["prefix"] == str(venv.resolve())
    _, data, _ = doctor_json("--only", "read-only", env={"CONDA_PREFIX": str(venv), "VIRTUAL_ENV": "/nonexistent"})
    assert data["prefix"] == str(venv.resolve())
    # no environment given or active: nothing to examine (issue 27: doctor used to examine envtool's
    # own interpreter and advise installing Horovod there)
    proc = run_envtool("doctor", "--only", "read-only", "--json", env={"CONDA_PREFIX": "", "VIRTUAL_ENV": ""})
    assert proc.returncode == 2 and "nothing to examine" in json.loads(proc.stdout)["error"], proc.stderr


def test_probe_timeout_kills_the_whole_process_group(tmp_path):
    from envtool.checks import envprobe

    script = ("import subprocess, sys, time\n"
              "child = subprocess.Popen(['sleep', '600'])\n"
              "print('ENVTOOL-PROBE {\"child\": %d}' % child.pid, flush=True)\n"
              "time.sleep(600)\n")
    run = envprobe.run_script(Path(sys.executable), script, [], timeout=3)
    assert run.timed_out and run.error == "no answer within 3 s" and run.seconds < scaled(30)
    pid = run.records[0]["child"]
    status = Path(f"/proc/{pid}/status")

    def running() -> bool:  # gone, or a zombie waiting for a reaper: either way no longer running
        try:
            return "\nState:\tZ" not in status.read_text()
        except FileNotFoundError:
            return False

    # SIGKILL went to the group; a dying process closes its files (the probe's pipe: EOF) before it
    # is marked a zombie, so under load /proc may still say "R" for a moment (CI saw it once)
    deadline = time.monotonic() + scaled(10)
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(), status.read_text()


def test_gpu_check_skips_with_reason_or_sees_the_gpu():
    from envtool.checks.gpu import gpu_machine, spec_nccl
    from envtool.spec.catalog import load_spec

    spec = load_spec("perlmutter-horovod")
    assert spec_nccl(spec, spec.site) == "2.15.5"  # from the site module nccl/2.15.5-ofi
    code, _, by_id = doctor_json("--prefix", sys.prefix, "--only", "gpu")
    f = by_id["gpu"]
    if gpu_machine() is None:
        assert f["status"] == "skipped" and "CPU-only machine" in f["summary"]
    else:
        assert f["status"] in ("ok", "fail") and f["details"]["driver"]


def test_one_extra_pip_package_is_a_warning_whose_fix_keeps_it(tmp_path):
    """Issue 38: one ``pip install`` beyond the environment's own lock is drift to record, not a
    failure (every locked package is still as locked); the first fix snapshots the prefix into the
    lock (``envtool lock --prefix``) and keeps the package, the second (``create --from-lock
    --force``) says it removes it. Doing the first fix clears the finding. (A locked package changed
    still fails: ``test_lock_drift``.)"""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    pip = [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--quiet", "--no-index",
           "--no-deps", "--disable-pip-version-check"]
    lock = env / "conda-lock.yml"
    proc = run_envtool("lock", "--prefix", env, "-o", lock, timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr
    subprocess.run([*pip, str(make_wheel(wheels, "extrapkg", "2.0", {"extrapkg.py": "Y = 2\n"}))], check=True,
                   timeout=scaled(120))
    code, data, by_id = doctor_json("--prefix", env, "--only", "lock-drift")
    drift = by_id["lock-drift"]
    assert data["lock"] == str(lock) and code == 0 and drift["status"] == "warn", drift
    assert "+ pip extrapkg 2.0 (not in the lock)" in drift["details"]["items"], drift
    keep, _, recreate = drift["fix"].partition("; or ")
    assert f"envtool lock --prefix {env} -o {lock}" in keep, drift["fix"]
    assert "REMOVES extrapkg" in recreate and "--from-lock" in recreate and "--force" in recreate, drift["fix"]
    assert run_envtool("lock", "--prefix", env, "-o", lock, timeout=scaled(120)).returncode == 0  # the first fix
    code, _, by_id = doctor_json("--prefix", env, "--only", "lock-drift")
    assert code == 0 and by_id["lock-drift"]["status"] == "ok", by_id["lock-drift"]
