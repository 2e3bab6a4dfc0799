"""The contract every registered scheduler and launcher passes (issue 28, item 2).

Each scheduler registered in ``envtool.spec.registry`` is named by its module, renders its
directives into a job script, parses the captured real outputs of its submit and status commands
(tests/data/scheduler/, sources in its README.md), refuses garbled output with a clear
``SchedulerOutputError`` (never another exception: also checked with Hypothesis on arbitrary
text), and is accepted as a site file's ``scheduler``. A toy scheduler kept in the tests
(tests/helpers/toy_scheduler.py, one file + one registration) passes the same contract, with
outputs captured live from its real commands, and a site file can name it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO, run_envtool
from envtool import scheduler
from envtool.core.errors import SpecError
from envtool.scheduler import launcher as launcher_mod
from envtool.scheduler import script
from envtool.scheduler.model import JobRequest, JobState, LaunchStep, Layout, SchedulerOutputError
from envtool.spec import registry, sites
from helpers.speed import scaled

DATA = Path(REPO) / "tests" / "data" / "scheduler"

#: (scheduler, file, parser, expected): every captured output and what it must parse to.
CAPTURED = [
    ("slurm", "slurm/sbatch-parsable.stdout", "parse_submit", "1"),
    ("slurm", "slurm/sbatch-parsable-2.stdout", "parse_submit", "2"),
    ("slurm", "slurm/squeue-running.stdout", "parse_status", {"1": JobState("running", "RUNNING")}),
    ("slurm", "slurm/squeue-held.stdout", "parse_status", {"3": JobState("queued", "PENDING")}),
    ("slurm", "slurm/squeue-all.stdout", "parse_status",
     {"1": JobState("running", "RUNNING"), "3": JobState("queued", "PENDING")}),
    ("slurm", "slurm/squeue-finished.stdout", "parse_status", {}),
    ("slurm", "slurm/squeue-unknown-id.stdout", "parse_status", {}),
    ("slurm", "slurm/scontrol-running.stdout", "parse_final_status", {"1": JobState("running", "RUNNING")}),
    ("slurm", "slurm/scontrol-failed.stdout", "parse_final_status", {"2": JobState("done", "FAILED", 3)}),
    ("slurm", "slurm/scontrol-completed.stdout", "parse_final_status", {"1": JobState("done", "COMPLETED", 0)}),
    ("slurm", "slurm/scontrol-unknown-id.stdout", "parse_final_status", {}),
    ("lsf", "lsf/bsub.stdout", "parse_submit", "764254593"),
    ("lsf", "lsf/bjobs-running.stdout", "parse_status", {"111": JobState("running", "RUN")}),
    ("lsf", "lsf/bjobs-not-found.stdout", "parse_status", {}),
    ("lsf", "lsf/bjobs-no-unfinished.stdout", "parse_status", {}),
    ("pbs", "pbs/qstat-f-pbspro.stdout", "parse_status",
     {"68350.mycluster": JobState("queued", "Q"), "68351.mycluster": JobState("queued", "Q"),
      "69301.mycluster": JobState("running", "R"), "69302.mycluster": JobState("queued", "H"),
      "74164.mycluster": JobState("running", "R"), "74165.mycluster": JobState("queued", "H")}),
]
#: a captured error output must not be read as a job id
REFUSED_SUBMIT = [("slurm", "slurm/sbatch-missing-script.stderr"), ("lsf", "lsf/bjobs-not-found.stdout")]
#: registered schedulers that run jobs without a queue (no job ids, nothing to parse)
NO_QUEUE = ("local",)
GARBLED = ["", "\x00\x1b[31m<html>502 Bad Gateway</html>\n", "Job <abc> is submitted\n", "sbatch: error: x\n",
           "JOBID\n12 RUN\n" + "x" * 5000]


@pytest.fixture
def toy():
    """Register the toy scheduler (the one registration) for one test, then remove it."""
    registry.register_scheduler("toy", "helpers.toy_scheduler")
    yield scheduler.get("toy")
    registry.SCHEDULERS.unregister("toy")


def _names():
    return [n for n in registry.SCHEDULERS]


def _site(tmp_path: Path, sched: str, extra: str = "") -> Path:
    path = tmp_path / f"s-{sched}.yaml"
    path.write_text(f"name: s-{sched}\nscheduler: {sched}\nlauncher: 'mpirun -np {{ranks}}'\ngpus_per_node: 0\n"
                    f"batch:\n  cpus_per_node: 8\n{extra}")
    return path


def _contract(name: str, tmp_path: Path) -> None:
    sched = scheduler.get(name)
    assert sched.NAME == name
    for attr in ("DIRECTIVE", "DEFAULT_LAUNCHER", "SUBMIT_STDIN", "directives", "submit_argv", "parse_submit",
                 "status_argv", "parse_status", "state", "cancel_argv"):
        assert hasattr(sched, attr), f"{name} lacks {attr}"
    assert sched.DEFAULT_LAUNCHER is None or sched.DEFAULT_LAUNCHER in registry.LAUNCHERS
    site_name = registry.NONE if name == registry.NO_SCHEDULER else name
    assert site_name in registry.site_scheduler_names()
    sf = sites.load_site(_site(tmp_path, site_name))
    assert sf.scheduler == (None if site_name == registry.NONE else name)
    req = JobRequest(site=sf, layout=Layout(nodes=1, ranks_per_node=2, cpus_per_rank=4),
                     steps=(LaunchStep(argv=("python", "train.py")),), seconds=600, job_name="contract")
    text = script.render(req)
    for words in sched.directives(req):
        assert all(isinstance(w, str) for w in words)
        assert sched.DIRECTIVE and f"{sched.DIRECTIVE} {script.quote_words(words)}" in text
    assert "python train.py" in text
    assert all(isinstance(w, str) for w in sched.submit_argv("/tmp/job.sh"))
    if name not in NO_QUEUE:
        assert sched.status_argv("42") and sched.cancel_argv("42")
    for bad in GARBLED:
        with pytest.raises(SchedulerOutputError) as e:
            sched.parse_submit(bad)
        assert "expected" in str(e.value)


@pytest.mark.parametrize("name", _names())
def test_every_registered_scheduler_passes_the_contract(name, tmp_path):
    _contract(name, tmp_path)


@pytest.mark.parametrize("name,path,parser,expected", CAPTURED, ids=[c[1] for c in CAPTURED])
def test_parsers_read_captured_real_outputs(name, path, parser, expected):
    assert getattr(scheduler.get(name), parser)((DATA / path).read_text()) == expected


@pytest.mark.parametrize("name,path", REFUSED_SUBMIT)
def test_an_error_output_is_no_job_id(name, path):
    with pytest.raises(SchedulerOutputError):
        scheduler.get(name).parse_submit((DATA / path).read_text())


def test_every_scheduler_with_a_queue_has_captured_outputs_or_is_listed_as_missing():
    covered = {c[0] for c in CAPTURED}
    documented_gap = {"cobalt"}  # tests/data/scheduler/README.md, "Not covered"
    assert set(registry.SCHEDULERS) - set(NO_QUEUE) == covered | documented_gap


@pytest.mark.parametrize("name", ["slurm", "lsf", "pbs", "cobalt"])
def test_garbled_status_output_is_a_clear_error(name):
    sched = scheduler.get(name)
    for bad in ["\x00\x1b[31m<html>502 Bad Gateway</html>\n12 ???\n", "12345 %%%% §§§\n"]:
        with pytest.raises(SchedulerOutputError) as e:
            sched.parse_status(bad)
        msg = str(e.value)
        assert "expected" in msg and "\x00" not in msg and "\x1b" not in msg and len(msg) < 400


@pytest.mark.parametrize("name", ["slurm", "lsf", "pbs", "cobalt"])
@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=300))
def test_parsers_give_a_value_or_a_clear_error_on_any_text(name, text):
    sched = scheduler.get(name)
    try:
        job_id = sched.parse_submit(text)
        assert isinstance(job_id, str) and job_id and job_id in text
    except SchedulerOutputError:
        pass
    try:
        states = sched.parse_status(text)
        assert all(isinstance(k, str) and isinstance(v, JobState) and v.phase in
                   ("queued", "running", "done", "unknown") for k, v in states.items())
    except SchedulerOutputError:
        pass


def test_site_file_refuses_an_unregistered_scheduler_naming_the_registered_ones(tmp_path):
    path = _site(tmp_path, "toy")
    with pytest.raises(SpecError) as e:
        sites.load_site(path)
    msg = str(e.value)
    assert str(path) in msg and "scheduler" in msg
    for name in registry.site_scheduler_names():
        assert name in msg


def test_toy_scheduler_passes_the_contract_and_a_site_file_can_name_it(toy, tmp_path):
    _contract("toy", tmp_path)
    assert "toy" in registry.site_scheduler_names()


def test_toy_scheduler_parses_its_real_outputs(toy, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("sleep 60\n")
    proc = subprocess.run(toy.submit_argv(str(job)), capture_output=True, text=True, timeout=scaled(30), check=True)
    pid = toy.parse_submit(proc.stdout)
    try:
        status = subprocess.run(toy.status_argv(pid), capture_output=True, text=True, timeout=scaled(30)).stdout
        assert toy.parse_status(status)[pid].phase == "running"
        assert toy.state(pid).phase == "running"
        subprocess.run(toy.cancel_argv(pid), timeout=scaled(30), check=True)
        deadline = time.monotonic() + scaled(30)
        while toy.state(pid).phase == "running" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert toy.state(pid).phase == "done"
    finally:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_launcher_is_chosen_apart_from_the_scheduler(tmp_path):
    lay = Layout(nodes=2, ranks_per_node=4, cpus_per_rank=8)
    # a Slurm site naming Open MPI's mpirun: job scripts build mpirun's words from the layout
    sf = sites.load_site(_site(tmp_path, "slurm", "  launcher: mpirun\n"))
    assert sf.batch.launcher == "mpirun"
    req = JobRequest(site=sf, layout=lay, steps=(LaunchStep(argv=("python", "t.py")),))
    launch = launcher_mod.for_site(sf)
    assert launch.native and launch.program == "mpirun"
    assert launch.batch_argv(req, lay) == ["mpirun", "-np", "8", "--map-by", "ppr:4:node:PE=8"]
    assert "mpirun -np 8 --map-by ppr:4:node:PE=8 python t.py" in script.render(req)
    # a PBS site naming srun gets srun; no batch.launcher: the scheduler's default launcher
    sf = sites.load_site(_site(tmp_path, "pbs", "  launcher: srun\n"))
    assert launcher_mod.for_site(sf).batch_argv(req, lay) == ["srun"]
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: plain\nscheduler: pbs\nlauncher: 'mpiexec -n {ranks}'\nbatch:\n  cpus_per_node: 32\n")
    sf = sites.load_site(plain)
    assert launcher_mod.for_site(sf).batch_argv(req, lay)[:5] == ["mpiexec", "-n", "8", "--ppn", "4"]
    # every registered launcher builds words that start with its program
    for name in registry.launcher_names():
        assert scheduler.get_launcher(name).launch_argv(req, lay)[0] == name


def test_unknown_batch_launcher_is_refused_with_the_field_named(tmp_path):
    path = _site(tmp_path, "slurm", "  launcher: teleport\n")
    with pytest.raises(SpecError) as e:
        sites.load_site(path)
    msg = str(e.value)
    assert "batch.launcher" in msg and str(path) in msg and "srun" in msg and "mpirun" in msg
    proc = run_envtool("jobscript", "--site-file", path, "--module", "m", "--nodes", "1", "--ranks-per-node", "1",
                       "--", "true")
    assert proc.returncode == 2 and "batch.launcher" in proc.stderr and "Traceback" not in proc.stderr
