"""``envtool validate --export reframe`` (issue 24, item 7): the validation as a ReFrame regression
test and the site's ReFrame settings, run by ReFrame itself (reframe-hpc, the test extra) on the
multi-node test cluster through ReFrame's Slurm scheduler and srun launcher; and the option's
bad input (exit 2, ``--json`` on every path).
"""
from __future__ import annotations

import json
import os
import py_compile
import shutil
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_envtool
from helpers.speed import scaled


def _site(tmp_path: Path, references: str = "", cpus: int = 4, extra: str = "") -> Path:
    path = tmp_path / "testcluster.yaml"
    path.write_text(f"""name: testcluster
summary: the multi-node Slurm the tests start (namespaces on one machine)
platforms: [linux-64]
scheduler: slurm
launcher: "srun -n {{ranks}}"
gpus_per_node: 0
batch:
  cpus_per_node: {cpus}
  mpi: pmix
{extra}{references}""")
    return path


@pytest.fixture
def venv_prefix(tmp_path) -> Path:
    """A real (small) environment: a venv; the export needs its bin/python, nothing runs in it."""
    prefix = tmp_path / "env"
    import subprocess

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=scaled(120))
    return prefix


#: ``python -m envtool`` from this checkout while the current directory is elsewhere
HERE = {"PYTHONPATH": str(REPO)}


def _constants(path: Path) -> dict:
    """The module-level ``NAME = literal`` assignments of a generated file (``ast.literal_eval``:
    a value that is not plain data raises), and a check that nothing else runs at import but
    imports, definitions and those assignments."""
    import ast

    tree = ast.parse(path.read_text(), str(path))
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = ast.literal_eval(node.value)
        else:
            assert isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)), ast.dump(node)
    return out


def _export(tmp_path, *args):
    return run_envtool("validate", "--export", "reframe", *args, cwd=tmp_path, env=HERE, timeout=scaled(120))


# --- the files ---------------------------------------------------------------------------------

def test_export_writes_a_test_and_settings_that_compile_with_the_sites_values(tmp_path, venv_prefix):
    site = _site(tmp_path, references="validation:\n  references:\n    2:\n"
                                      "      allreduce_latency_4B: [80, null, 0.5, us]\n"
                                      "    3:\n      allreduce_latency_4B: [120, -0.2, 0.5, us]\n",
                 extra="  queue: compute\n")
    proc = _export(tmp_path, "--prefix", venv_prefix, "--site-file", site, "--nodes", "2", "--ranks-per-node", "2",
                   "--spec", "cpu-horovod", "--account", "proj1", "--time", "0:10:00", "-o", tmp_path / "rfm.py",
                   "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    test, settings = Path(data["test"]), Path(data["settings"])
    assert test == tmp_path / "rfm.py" and settings == tmp_path / "rfm_settings.py"
    assert data["references"] == {"allreduce_latency_4B": [80.0, None, 0.5, "us"]}   # the 2-node entry only
    assert data["command"] == f"reframe -C {settings} -c {test} -r"
    for f in (test, settings):
        py_compile.compile(str(f), cfile=str(tmp_path / "c.pyc"), doraise=True)
    ns: dict = {}
    exec(compile(settings.read_text(), str(settings), "exec"), ns)
    system = ns["site_configuration"]["systems"][0]
    part = system["partitions"][0]
    assert system["name"] == "testcluster" and part["name"] == "compute"
    assert part["scheduler"] == "slurm" and part["launcher"] == "srun"
    assert part["access"] == ["--account=proj1", "--partition=compute"]
    text = test.read_text()
    assert "REFERENCES = {'allreduce_latency_4B': (80.0, None, 0.5, 'us')}" in text
    assert "SRUN_OPTIONS = ['--mpi=pmix']" in text and "NUM_TASKS = 4" in text and "TIME_LIMIT = '600s'" in text
    assert "['controllers', 'MPI']" in text                       # the spec's expect.check_build
    consts = _constants(test)
    assert consts["PROBE_SOURCE"] == (REPO / "envtool" / "validate" / "rank_probe.py").read_text()
    assert consts["PRERUN_CMDS"][0] == f"source {venv_prefix}/bin/activate"
    assert _constants(settings)["site_configuration"] == ns["site_configuration"]


def test_hostile_values_stay_data_in_the_generated_python(tmp_path):
    """A prefix, a variable and a queue made of Python and shell syntax: the files compile, and
    the values come back unchanged as strings (repr), never as code."""
    evil = tmp_path / "p'; import os; os.system('touch PWNED') #\"x"
    import subprocess

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(evil)], check=True, timeout=scaled(120))
    site = _site(tmp_path, extra="  queue: \"q'); import os #\"\nenv:\n  EVIL: \"'''\\\"\\\"\\\" $(touch PWNED2)\"\n")
    proc = _export(tmp_path, "--prefix", evil, "--site-file", site, "--nodes", "1", "--ranks-per-node", "1",
                   "-o", tmp_path / "t.py", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    consts = _constants(tmp_path / "t.py")
    assert consts["PYTHON"] == str(evil / "bin" / "python")
    evil_line = next(c for c in consts["PRERUN_CMDS"] if c.startswith("export EVIL="))
    said = subprocess.run(["bash", "-c", evil_line + '; printf %s "$EVIL"'], capture_output=True, text=True,
                          cwd=tmp_path, timeout=scaled(30)).stdout
    assert said == "'''\"\"\" $(touch PWNED2)"           # shell-quoted: bash gives the value back
    settings = _constants(Path(data["settings"]))["site_configuration"]
    assert settings["systems"][0]["partitions"][0]["access"] == ["--partition=q'); import os #"]
    assert not list(tmp_path.rglob("PWNED*"))


# --- bad input: exit 2, one JSON object -----------------------------------------------------------

@pytest.mark.parametrize("extra, words", [
    (["--submit"], "--export reframe writes a test and runs nothing: drop --submit"),
    (["--benchmark", "--timeout", "5"], "drop --benchmark, --timeout"),
    (["-o", "not-python.txt"], "-o not-python.txt: expected a Python file name"),
    (["-o", "my-test.py"], "NAME a Python identifier"),
    (["-o", "nodir/t.py"], "does not exist"),
    (["--nodes", "0"], "--nodes must be 1 or more"),
    (["--reframe-scheduler", "pbs"], "invalid choice"),
])
def test_bad_options_exit_2_with_json(tmp_path, venv_prefix, extra, words):
    site = _site(tmp_path)
    for js in ([], ["--json"]):
        proc = _export(tmp_path, "--prefix", venv_prefix, "--site-file", site, "--nodes", "2", *extra, *js)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        if js:
            data = json.loads(proc.stdout)
            assert data["ok"] is False and data["exit"] == 2 and words in data["error"], data
        else:
            assert words in proc.stderr, proc.stderr
    assert not (tmp_path / "envtool_validate_rfm.py").exists()


def test_the_export_reads_the_sites_default_launch_as_jobscript_does(tmp_path, venv_prefix):
    """Perlmutter's ``launch.default`` (srun, NERSC's DDP launch) is read, with its source: the
    ReFrame test starts the rank probe's Horovod checks with srun, as ``validate --submit`` does under
    that default, and says that the default's launch is for the torch.distributed checks (issue 41)."""
    common = ("--prefix", venv_prefix, "--nodes", "1", "--account", "a")
    data = json.loads(_export(tmp_path, *common, "--site", "perlmutter", "--json").stdout)
    launch = data["launch"]
    assert launch["name"] == "launcher" and launch["site_default"] == "srun", launch
    assert "site perlmutter's default launch (source nersc-ddp: NERSC/nersc-dl-multigpu@" in launch["origin"]
    assert "torch.distributed checks, which the ReFrame test does not carry" in launch["note"], launch
    text = _export(tmp_path, *common, "--site", "perlmutter", "-o", tmp_path / "t2.py").stdout
    assert "launch: ranks start with ReFrame's srun launcher" in text, text
    plain = json.loads(_export(tmp_path, *common, "--site-file", _site(tmp_path), "--ranks-per-node", "2", "-o",
                               tmp_path / "t3.py", "--json").stdout)["launch"]
    assert plain["site_default"] is None and "names no launch.default" in plain["origin"], plain


def test_options_of_the_export_need_it(tmp_path, venv_prefix):
    proc = run_envtool("validate", "--prefix", venv_prefix, "-o", tmp_path / "t.py", "--json", cwd=tmp_path, env=HERE)
    assert proc.returncode == 2 and "-o/--output goes with --export reframe" in json.loads(proc.stdout)["error"]


def test_a_site_without_slurm_is_refused(tmp_path, venv_prefix):
    proc = _export(tmp_path, "--prefix", venv_prefix, "--site", "local", "--json")
    assert proc.returncode == 2
    assert "site local" in json.loads(proc.stdout)["error"] and "scheduler none" in json.loads(proc.stdout)["error"]


def test_a_file_envtool_did_not_write_is_not_replaced(tmp_path, venv_prefix):
    mine = tmp_path / "t_settings.py"
    mine.write_text("site_configuration = {}  # the site's own\n")
    proc = _export(tmp_path, "--prefix", venv_prefix, "--site-file", _site(tmp_path), "--nodes", "1",
                   "-o", tmp_path / "t.py", "--json")
    assert proc.returncode == 2 and f"--settings {mine}: the file exists and envtool did not write it" in \
        json.loads(proc.stdout)["error"]
    assert mine.read_text() == "site_configuration = {}  # the site's own\n" and not (tmp_path / "t.py").exists()
    mine.unlink()
    first = _export(tmp_path, "--prefix", venv_prefix, "--site-file", _site(tmp_path), "--nodes", "1",
                    "--ranks-per-node", "1", "-o", tmp_path / "t.py")
    assert first.returncode == 0, first.stderr
    again = _export(tmp_path, "--prefix", venv_prefix, "--site-file", _site(tmp_path), "--nodes", "2",
                    "--ranks-per-node", "1", "-o", tmp_path / "t.py")               # its own files: replaced
    assert again.returncode == 0, again.stderr
    assert "NUM_TASKS = 2" in (tmp_path / "t.py").read_text()


@pytest.mark.parametrize("refs, field", [
    ("validation:\n  references:\n    two:\n      a: [1, null, 0.1, us]\n", "validation.references.two"),
    ("validation:\n  references:\n    2:\n      a: [1, 0.1, 0.1, us]\n", "validation.references.2.a[1]"),
    ("validation:\n  references:\n    2:\n      a: [1, null, -0.5, us]\n", "validation.references.2.a[2]"),
    ("validation:\n  references:\n    2:\n      a: [0, null, 0.5, us]\n", "validation.references.2.a[0]"),
    ("validation:\n  references:\n    2:\n      a: [1, null, 0.5]\n", "validation.references.2.a"),
    ("validation:\n  references:\n    2:\n      a-b: [1, null, 0.5, us]\n", "validation.references.2.a-b"),
    ("validation:\n  references:\n    2:\n      a: [1, null, 0.5, \"u s\"]\n", "validation.references.2.a[3]"),
    ("validation:\n  referenses: {}\n", "referenses"),
])
def test_bad_references_in_the_site_file_exit_2_naming_the_field(tmp_path, venv_prefix, refs, field):
    site = _site(tmp_path, references=refs)
    proc = _export(tmp_path, "--prefix", venv_prefix, "--site-file", site, "--nodes", "2", "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert str(site) in err and field in err, err


# --- ReFrame itself on the multi-node cluster -----------------------------------------------------

def _reframe() -> str:
    try:
        import reframe  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("reframe-hpc is missing: it is in the test extra (pip install -e '.[test]')")
        pytest.skip("reframe-hpc is not installed (pip install -e '.[test]')")
    exe = Path(sys.executable).with_name("reframe")
    return str(exe) if exe.exists() else (shutil.which("reframe") or "reframe")


def _run_reframe(cluster, workdir: Path, test: Path, settings: Path, timeout: float | None = None):
    """``reframe -C SETTINGS -c TEST -r`` on the head node; everything ReFrame writes stays in ``workdir``."""
    env = {"RFM_REPORT_FILE": str(workdir / "report.json"), "RFM_SQLITE_DB_FILE": str(workdir / "results.db"),
           "HOME": str(workdir / "home")}
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    return cluster.run(_reframe(), "--nocolor", "-C", settings, "-c", test, "--prefix", workdir, "--keep-stage-files",
                       "-r",
                       cwd=str(workdir), env=env, timeout=scaled(480) if timeout is None else timeout)


@pytest.mark.multinode
@pytest.mark.slow  # needs the cpu-horovod environment
def test_reframe_runs_the_exported_validation_on_two_nodes(multinode_cluster, cpu_horovod_env, tmp_path):
    """The export run by ReFrame (Slurm scheduler in its squeue form, the cluster has no accounting;
    srun launcher, --mpi=pmix) across 2 nodes passes with a reference it meets, fails in its
    performance stage with one no allreduce can meet, and in its sanity stage on a PMI mismatch."""
    _reframe()
    cpus = multinode_cluster.cpus
    ok_refs = "validation:\n  references:\n    2:\n      allreduce_latency_4B: [1000000, -1.0, 1.0, us]\n"
    site = _site(tmp_path, references=ok_refs, cpus=cpus)
    t0 = time.monotonic()
    proc = _export(tmp_path, "--prefix", cpu_horovod_env, "--site-file", site, "--nodes", "2",
                   "--ranks-per-node", "2", "--time", "0:15:00", "--reframe-scheduler", "squeue",
                   "-o", tmp_path / "envtool_validate_rfm.py", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    test, settings = Path(data["test"]), Path(data["settings"])
    run = _run_reframe(multinode_cluster, tmp_path / "rf-pass", test, settings)
    took = time.monotonic() - t0
    out = run.stdout + run.stderr
    assert run.returncode == 0, out + multinode_cluster.logs()
    assert "[  PASSED  ] Ran 1/1 test case(s)" in out, out
    report = json.loads((tmp_path / "rf-pass" / "report.json").read_text())
    case = report["runs"][0]["testcases"][0]
    assert case["result"] == "pass", case
    stage = case.get("stagedir")
    perf = {k.split(":")[-1]: v for k, v in (case.get("perfvalues") or {}).items()}
    value, ref, lower, upper, unit = perf["allreduce_latency_4B"][:5]     # ReFrame's (value, ref, lower, upper, unit)
    assert (ref, lower, upper, unit) == (1000000, -1.0, 1.0, "us") and 0 < value < 2_000_000, perf
    # the job ran 4 ranks, 2 on each node, through ReFrame's job script (srun --mpi=pmix)
    recs = sorted((tmp_path / "rf-pass").rglob("probe/rank-*.json"))
    hosts = sorted(json.loads(p.read_text())["host"] for p in recs)
    assert hosts == ["node1", "node1", "node2", "node2"], (hosts, stage)
    script = next((tmp_path / "rf-pass").rglob("rfm_job.sh")).read_text()
    assert "#SBATCH --ntasks=4" in script and "#SBATCH --ntasks-per-node=2" in script
    srun = [line for line in script.splitlines() if line.startswith("srun ")]
    assert len(srun) == 1 and "--mpi=pmix" in srun[0].split() and "rank_probe.py . probe" in srun[0], script
    assert "bin/horovodrun --check-build > check-build.txt" in script, script
    assert multinode_cluster.wait_queue_empty() == ""
    print(f"ReFrame run of the export across 2 nodes: {took:.0f} s (load {os.getloadavg()[0]:.1f})")

    # an impossible reference: a 4-byte allreduce across two nodes within 1 ns (one rank per node:
    # the layout of two was checked above)
    site = _site(tmp_path, references="validation:\n  references:\n    2:\n"
                                      "      allreduce_latency_4B: [0.001, null, 0.0, us]\n", cpus=cpus)
    proc = _export(tmp_path, "--prefix", cpu_horovod_env, "--site-file", site, "--nodes", "2",
                   "--ranks-per-node", "1", "--time", "0:15:00", "--reframe-scheduler", "squeue",
                   "-o", test, "--json")
    assert proc.returncode == 0, proc.stderr
    run = _run_reframe(multinode_cluster, tmp_path / "rf-fail", test, settings)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    report = json.loads((tmp_path / "rf-fail" / "report.json").read_text())
    case = report["runs"][0]["testcases"][0]
    assert case["result"] == "fail" and case["fail_phase"] == "performance", case
    assert "allreduce_latency_4B" in (case.get("fail_reason") or ""), case
    assert multinode_cluster.wait_queue_empty() == ""

    # a PMI mismatch (srun --mpi=none against the PMIx-built Open MPI): MPI_Init aborts on every
    # rank; the sanity stage fails, naming the ranks and what Open MPI said
    site = _site(tmp_path, cpus=cpus).read_text().replace("mpi: pmix", "mpi: none")
    (tmp_path / "testcluster.yaml").write_text(site)
    proc = _export(tmp_path, "--prefix", cpu_horovod_env, "--site-file", tmp_path / "testcluster.yaml", "--nodes",
                   "2", "--ranks-per-node", "2", "--time", "0:15:00", "--reframe-scheduler", "squeue", "-o", test)
    assert proc.returncode == 0, proc.stderr
    run = _run_reframe(multinode_cluster, tmp_path / "rf-pmi", test, settings)
    assert run.returncode != 0, run.stdout + run.stderr
    case = json.loads((tmp_path / "rf-pmi" / "report.json").read_text())["runs"][0]["testcases"][0]
    assert case["result"] == "fail" and case["fail_phase"] == "sanity", case
    reason = case.get("fail_reason") or ""
    assert "rank 1: no result (it did not start or was killed; see the job output)" in reason, reason
    assert "the job output says: " in reason and "not built with SLURM's PMI support" in reason, reason
    assert multinode_cluster.wait_queue_empty() == ""


def test_the_generated_sanity_judges_real_outputs_as_validate_does(tmp_path, venv_prefix):
    """The generated module's own sanity helpers (imported as ReFrame imports it) on captured real
    outputs: check-build of the cpu-horovod build (all there), of a DDL build and a verbose one
    (named what is missing), an srun --mpi=none job's output, and rank records."""
    _reframe()
    import importlib.util

    proc = _export(tmp_path, "--prefix", venv_prefix, "--spec", "cpu-horovod", "--site-file", _site(tmp_path),
                   "--nodes", "2", "--ranks-per-node", "2", "-o", tmp_path / "gen_rfm.py")
    assert proc.returncode == 0, proc.stderr
    spec = importlib.util.spec_from_file_location("gen_rfm", tmp_path / "gen_rfm.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_rfm"] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules["gen_rfm"]
    data = REPO / "tests" / "data"
    assert mod.check_build_problems(str(data / "check_build" / "v0.28.1-cpu.txt")) == []
    ddl = mod.check_build_problems(str(data / "check_build" / "v0.18.2-ddl.txt"))
    assert ddl == ["check-build: Gloo (controllers), Gloo (tensor operations) expected but not built"], ddl
    # the same verdict as envtool's own parser (envtool.horovod.checkbuild) on a --verbose output
    from envtool.horovod import checkbuild
    from envtool.spec.catalog import load_spec

    verbose = data / "check_build" / "v0.21.0-verbose.txt"
    ours = checkbuild.compare(checkbuild.parse(verbose.read_text()), load_spec("cpu-horovod").expect.check_build)
    theirs = mod.check_build_problems(str(verbose))
    assert [f"{r.name} ({r.section.replace('_', ' ')})" for r in ours.missing] == \
        theirs[0][len("check-build: "):-len(" expected but not built")].split(", "), theirs
    assert mod.check_build_problems(str(tmp_path / "absent.txt"))[0].startswith("check-build: no output")
    said = mod.output_errors([str(data / "slurm-mpi-none-job.out")])
    assert any("not built with SLURM's PMI support" in s for s in said) and len(said) <= 3, said
    ok = {"host": "node1", "rank": 0, "size": 2, "checks": {"allreduce_cpu": {"ok": True, "latency_us": 50.0}}}
    assert mod.rank_problems({0: ok, 1: dict(ok, rank=1, host="node2")}, 2) == []
    bad = mod.rank_problems({0: ok, 1: dict(ok, rank=0, size=1, host="node2",
                                            checks={"dataloader": {"ok": False, "error": "wrong total 3"}})}, 2)
    assert bad == ["rank 1 on node2: the launcher started it as rank 1, Horovod sees rank 0 of 1 (MPI did not "
                   "initialise through the launcher: a PMI mismatch, e.g. srun --mpi)",
                   "rank 1 on node2: dataloader failed: wrong total 3",
                   "rank 1 on node2: Horovod size is 1, 2 ranks were launched"], bad
    assert mod.rank_problems({0: ok}, 2) == ["rank 1: no result (it did not start or was killed; see the job output)"]
