"""Issue 27, items 4 and 5: refuse instead of guessing, and retired systems. Real CLI runs on real
files (venvs made with ``python -m venv``, site files, modulefiles)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import REPO, run_envtool
from helpers.speed import scaled

OLCF_2024 = "https://docs.olcf.ornl.gov/systems/2024_olcf_system_changes.html"


def _venv(path: Path, spec: str = None) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    if spec:
        (path / ".envtool").mkdir()
        (path / ".envtool" / "create.json").write_text(json.dumps({"spec": spec, "prefix": str(path)}))
    return path


# -- retired systems ------------------------------------------------------------------------------

def test_summit_is_retired_in_show_and_specs():
    proc = run_envtool("show", "open-ce-1.1.3", "--site", "summit")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "RETIRED" in x)
    assert "decommissioned 2024-11-15" in line and OLCF_2024 in line and "--retired-ok" in line
    data = json.loads(run_envtool("show", "open-ce-1.1.3", "--site", "summit", "--json").stdout)
    assert data["site"]["retired"]["date"] == "2024-11-15" and OLCF_2024 in data["site"]["retired"]["source_ref"]
    assert json.loads(run_envtool("show", "cpu-horovod", "--json").stdout)["site"]["retired"] is None
    proc = run_envtool("specs", "--site", "summit")
    assert proc.returncode == 0, proc.stderr
    note = next(x for x in proc.stdout.splitlines() if x.startswith("note: site summit is retired: "))
    assert "decommissioned 2024-11-15" in note and f"(source: {OLCF_2024})" in note
    rows = json.loads(run_envtool("specs", "--site", "summit", "--json").stdout)["specs"]
    assert rows and all(r["site_retired"].startswith("decommissioned 2024-11-15") for r in rows)
    rows = json.loads(run_envtool("specs", "--site", "perlmutter", "--json").stdout)["specs"]
    assert rows and all(r["site_retired"] is None for r in rows)


def test_job_scripts_for_retired_sites_need_retired_ok():
    for site, said in (("summit", "decommissioned 2024-11-15"), ("theta", "end of 2023")):
        args = ("jobscript", "--site", site, "--module", "m/1", "--nodes", "1", "--ranks-per-node", "2",
                "--account", "A", "--time", "1:00:00", "--", "python", "t.py")
        proc = run_envtool(*args[:3], "--json", *args[3:])
        assert proc.returncode == 2, proc.stderr
        err = json.loads(proc.stdout)["error"]
        assert f"site {site} is retired" in err and said in err and "--retired-ok" in err
        proc = run_envtool(*args[:3], "--retired-ok", *args[3:])
        assert proc.returncode == 0 and proc.stdout.startswith("#!"), proc.stderr


def test_a_bad_retired_section_names_the_field(tmp_path):
    site = tmp_path / "old.yaml"
    site.write_text("name: old\nsources: {a: https://example.org/a}\nretired: {date: last year}\n")
    proc = run_envtool("jobscript", "--site-file", site, "--module", "m", "--nodes", "1", "--", "true")
    assert proc.returncode == 2 and "retired.date" in proc.stderr and "YYYY-MM-DD" in proc.stderr
    site.write_text("name: old\nsources: {a: https://example.org/a}\nretired: {date: '2020-01-01', source: b}\n")
    proc = run_envtool("jobscript", "--site-file", site, "--module", "m", "--nodes", "1", "--", "true")
    assert proc.returncode == 2 and "retired.source" in proc.stderr


# -- another platform -----------------------------------------------------------------------------

def test_plan_and_create_refuse_a_spec_for_another_platform(tmp_path):
    for cmd in ("plan", "create"):
        proc = run_envtool(cmd, "open-ce-0.1", "--prefix", tmp_path / "env", "--json")
        assert proc.returncode == 2, proc.stderr
        err = json.loads(proc.stdout)["error"]
        assert "linux-ppc64le" in err and "linux-64" in err and "--platform-mismatch-ok" in err
        assert not (tmp_path / "env").exists()
    proc = run_envtool("plan", "open-ce-0.1", "--platform-mismatch-ok")
    assert proc.returncode == 0 and "is for linux-ppc64le, but this machine is linux-64" in proc.stderr
    assert run_envtool("plan", "cpu-horovod").returncode == 0


def test_jobscript_refuses_an_environment_made_for_another_platform(tmp_path):
    """The issue's case: an x86 venv of cpu-horovod with --site summit (ppc64le) was exit 0 and lost
    the spec's OMP_NUM_THREADS and start method."""
    env = _venv(tmp_path / "env", spec="cpu-horovod")
    args = ("jobscript", "--prefix", env, "--site", "summit", "--retired-ok", "--nodes", "1", "--account", "A",
            "--time", "1:00:00", "--", "python", "t.py")
    proc = run_envtool(*args)
    assert proc.returncode == 2, proc.stdout
    assert "cpu-horovod" in proc.stderr and "linux-64" in proc.stderr and "linux-ppc64le" in proc.stderr
    assert "--platform-mismatch-ok" in proc.stderr
    proc = run_envtool(*args[:5], "--platform-mismatch-ok", *args[5:])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "export ENVTOOL_START_METHOD=forkserver" in lines and "export OMP_NUM_THREADS=1" in lines


# -- unknown CPU counts ---------------------------------------------------------------------------

def test_unknown_cpus_per_rank_is_an_error_naming_the_field(tmp_path):
    site = tmp_path / "nocpus.yaml"
    site.write_text("name: nocpus\nscheduler: slurm\nlauncher: 'srun -n {ranks}'\ngpus_per_node: 4\n")
    proc = run_envtool("jobscript", "--site-file", site, "--module", "m", "--nodes", "1", "--", "true")
    assert proc.returncode == 2 and "batch.cpus_per_node" in proc.stderr and str(site) in proc.stderr
    for site_name in ("bede", "local"):
        proc = run_envtool("jobscript", "--site", site_name, "--module", "m", "--nodes", "1", "--ranks-per-node",
                           "2", "--account", "A", "--time", "1:00:00", "--", "true")
        assert proc.returncode == 0, proc.stderr
        assert "? CPU(s)" not in proc.stdout and "export OMP_NUM_THREADS=" in proc.stdout
    cpus = len(os.sched_getaffinity(0))
    proc = run_envtool("jobscript", "--site", "local", "--module", "m", "--nodes", "1", "--ranks-per-node", "1",
                       "--", "true")
    assert f"and {cpus} CPU(s) per rank" in proc.stdout


# -- modulefiles ----------------------------------------------------------------------------------

def test_a_modulefile_from_a_spec_file_gives_a_command_that_works(tmp_path):
    spec = tmp_path / "my specs" / "mini.yaml"
    spec.parent.mkdir()
    spec.write_text(textwrap.dedent("""\
        name: mini
        summary: a bare venv
        sources: {nersc: "docs.nersc.gov (PyTorch: installing additional packages)"}
        engine: venv
        horovod: {install: none}
        expect: {check_build: null}
        """))
    env = _venv(tmp_path / "env")
    proc = run_envtool("modulefile", spec, "--prefix", env, "--root", tmp_path / "mf", "--name", "mini/1")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "mf" / "mini" / "1.lua").read_text()  # the help is a Lua long string: literal text
    line = next(x.strip() for x in text.splitlines() if x.strip().startswith("envtool create "))
    assert "envtool create mini " not in line and shlex.quote(str(spec)) in line
    words = shlex.split(line.replace('"$HOME"', str(tmp_path / "home")))
    assert words[:3] == ["envtool", "create", str(spec)]
    # the command it names resolves (plan takes the same SPEC argument as create)
    proc = run_envtool("plan", words[2], "--prefix", tmp_path / "copy")
    assert proc.returncode == 0, proc.stderr
    # a catalog spec is named by its name
    proc = run_envtool("modulefile", "cpu-horovod", "--prefix", env, "--root", tmp_path / "mf2", "--name", "c/1")
    assert proc.returncode == 0, proc.stderr
    assert "envtool create cpu-horovod --clone" in (tmp_path / "mf2" / "c" / "1.lua").read_text()


def test_one_module_format_per_name_and_version(tmp_path):
    env = _venv(tmp_path / "env")
    root = tmp_path / "mf"
    base = ("modulefile", "--prefix", env, "--root", root, "--name", "tool/1.0")
    assert run_envtool(*base).returncode == 0
    lua, tcl = root / "tool" / "1.0.lua", root / "tool" / "1.0"
    proc = run_envtool(*base, "--format", "tcl", "--json")
    assert proc.returncode == 2, proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert str(lua) in err and "--force" in err and "Lua" in err
    assert lua.is_file() and not tcl.exists()
    proc = run_envtool(*base, "--format", "tcl", "--force")
    assert proc.returncode == 0, proc.stderr
    assert tcl.is_file() and not lua.exists()
    proc = run_envtool(*base)
    assert proc.returncode == 2 and str(tcl) in proc.stderr and "Tcl" in proc.stderr
    # another version of the same name may use the other format
    assert run_envtool("modulefile", "--prefix", env, "--root", root, "--name", "tool/2.0").returncode == 0


# -- doctor ---------------------------------------------------------------------------------------

def test_doctor_with_nothing_to_examine_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CONDA_PREFIX", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-m", "envtool", "doctor", "--json"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=scaled(300))
    assert proc.returncode == 2, proc.stdout
    data = json.loads(proc.stdout)
    assert "nothing to examine" in data["error"] and "--prefix" in data["error"]
    assert "Traceback" not in proc.stderr
    script = tmp_path / "train.py"
    # a Horovod (MPI) program that forks: the start-method rule holds for that launch
    script.write_text("import horovod.torch as hvd\nimport torch.multiprocessing as mp\n"
                      "mp.set_start_method('fork')\nhvd.init()\n")
    proc = subprocess.run([sys.executable, "-m", "envtool", "doctor", "--script", str(script), "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["prefix"] is None and [f["id"] for f in data["findings"]] == ["script"]
    assert data["findings"][0]["status"] == "warn"


def test_doctor_only_keeps_the_script_scan(tmp_path):
    script = tmp_path / "train.py"
    # a Horovod (MPI) program that forks: the start-method rule holds for that launch
    script.write_text("import horovod.torch as hvd\nimport torch.multiprocessing as mp\n"
                      "mp.set_start_method('fork')\nhvd.init()\n")
    proc = run_envtool("doctor", "--prefix", sys.prefix, "--only", "read-only", "--script", script, "--json",
                       timeout=scaled(600))
    assert proc.returncode in (0, 1), proc.stderr
    found = {f["id"]: f for f in json.loads(proc.stdout)["findings"]}
    assert set(found) == {"read-only", "script"} and found["script"]["status"] == "warn"


def test_doctor_reads_the_environments_records(tmp_path):
    env = _venv(tmp_path / "env", spec="cpu-horovod")
    lock = REPO / "lockfiles" / "cpu-horovod.conda-lock.yml"
    (env / "conda-lock.yml").write_bytes(lock.read_bytes())
    proc = run_envtool("doctor", "--prefix", env, "--only", "lock-drift", "versions", "--json", timeout=scaled(600))
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    assert data["spec"] == "cpu-horovod" and data["lock"] == str(env / "conda-lock.yml")
    found = {f["id"]: f for f in data["findings"]}
    assert found["lock-drift"]["status"] != "skipped", found["lock-drift"]
    # the bare venv lacks the lock's packages: the drift is found, not skipped
    assert found["lock-drift"]["status"] in ("warn", "fail")
    assert any("create.json" in r for r in data["records"])


# -- a spec for another site (issue 38) -----------------------------------------------------------

def test_create_for_another_sites_modules_stops_before_any_work(tmp_path):
    """``create perlmutter-horovod`` on a machine whose Lmod has no ``cudnn/8.7.0``: exit 2 before
    any step, naming the unknown modules in full (not Lmod's boilerplate), the spec's site and
    what this machine is; without Lmod at all, the same with that cause."""
    from test_modulefile import LMOD_INIT

    target = tmp_path / "hvd"
    if LMOD_INIT:
        code = (f"source {shlex.quote(str(LMOD_INIT))} && export MODULEPATH= && "
                f"exec {shlex.quote(sys.executable)} -m envtool create perlmutter-horovod --prefix "
                f"{shlex.quote(str(target))} --json")
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-c", code], capture_output=True, text=True,
                              cwd=REPO, env={k: v for k, v in os.environ.items() if k != "ENVTOOL_SITE"},
                              timeout=scaled(120))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        error = json.loads(proc.stdout)["error"]
        assert 'Lmod says: The following module(s) are unknown: "cudnn/8.7.0"' in error, error  # the first it met
        assert "for site perlmutter" in error and "this machine is" in error and "Lmod has detected" not in error
        assert "[1/" not in proc.stderr and not target.exists(), proc.stderr
    proc = run_envtool("create", "perlmutter-horovod", "--prefix", target, env={"LMOD_CMD": "", "ENVTOOL_SITE": ""},
                       timeout=scaled(120))
    assert proc.returncode == 2 and "Lmod is not initialised here" in proc.stderr, proc.stderr
    assert "for site perlmutter" in proc.stderr and "envtool specs --site" in proc.stderr and not target.exists()
