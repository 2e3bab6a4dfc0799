"""Validation checks as data (issue 39, item 2) and ``validate --submit --dry-run`` (item 1): the
checks a site implies, the plan printed without writing or submitting anything, and a toy check
and launch (tests/helpers/toy_validation.py) registered, selected and written into the job script."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_envtool
from helpers.speed import scaled


def _site(tmp_path: Path, scheduler: str = "slurm", gpus: int = 0) -> Path:
    path = tmp_path / f"{scheduler}.yaml"
    path.write_text(f"""name: toy{scheduler}
summary: a site for the dry run
platforms: [linux-64]
scheduler: {scheduler}
gpus_per_node: {gpus}
batch:
  cpus_per_node: 4
  mpi: pmix
""")
    return path


@pytest.fixture(scope="module")
def venv_prefix(tmp_path_factory) -> Path:
    prefix = tmp_path_factory.mktemp("env") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=scaled(120))
    return prefix


def _dry(tmp_path, prefix, site, *extra):
    return ["validate", "--prefix", str(prefix), "--site-file", str(site), "--submit", "--nodes", "2",
            "--ranks-per-node", "2", "--workdir", str(tmp_path / "run"), "--dry-run", *extra]


def test_dry_run_prints_the_plan_and_submits_nothing(tmp_path, venv_prefix):
    proc = run_envtool(*_dry(tmp_path, venv_prefix, _site(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for step in ("[preflight]", "[write-script]", "[submit]", "[watch]", "[collect]", "[judge]"):
        assert step in out, out
    assert "checks: horovod-mpi, horovod-gloo, torch-gloo" in out
    assert "#SBATCH" in out and "--mpi=none" in out and "rendezvous.py" in out
    assert " --sweep 67108864" in out, out  # the default sweep goes to 64 MiB (validate --help)
    assert f"submit: sbatch --parsable {tmp_path / 'run' / 'job.sh'}" in out
    assert not (tmp_path / "run").exists()  # nothing written


def test_dry_run_json_is_the_plan(tmp_path, venv_prefix):
    proc = run_envtool(*_dry(tmp_path, venv_prefix, _site(tmp_path), "--json"))
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["plan"]
    assert [c["name"] for c in plan["checks"]] == ["horovod-mpi", "horovod-gloo", "torch-gloo"]
    assert [s["id"] for s in plan["steps"]] == ["preflight", "write-script", "submit", "watch", "collect", "judge"]
    assert plan["submit"][0] == "sbatch" and plan["script_text"].startswith("#!")
    assert plan["layout"] == {"nodes": 2, "ranks": 4, "ranks_per_node": 2}
    assert not (tmp_path / "run").exists()


def test_every_step_is_bounded_and_the_job_has_a_default_timeout(tmp_path, venv_prefix):
    """Issue 45, item 1: each check's srun line ends the step when one task exits non-zero
    (``--kill-on-bad-exit=1``, Slurm's declared capability) and has its own ``--time`` from the work
    (import + rendezvous + 24 sweep sizes to 64 MiB: 180 + 120 + 240 s = 9 min); without --timeout the
    job's overall limit is derived and shown in the plan and its JSON; --timeout replaces it."""
    proc = run_envtool(*_dry(tmp_path, venv_prefix, _site(tmp_path), "--json"))
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["plan"]
    lines = [ln for ln in plan["script_text"].splitlines() if "rank_probe.py" in ln and "srun" in ln]
    assert len(lines) == 3, plan["script_text"]  # MPI, Gloo, torch.distributed
    # srun's own options, then the bounds, then the program
    assert all("--kill-on-bad-exit=1 --time=9 " in ln.split("rank_probe.py")[0].split("srun ", 1)[1]
               for ln in lines), lines
    assert plan["timeout"] == {"seconds": 600 + 3 * 540, "source": plan["timeout"]["source"]}
    # each check's step runs once more when a rank died of a crash signal in hvd.init() (issue 45, item 3)
    assert all(ln.startswith("envtool_retry_init probe") for ln in lines), lines
    assert plan["step_bounds"] == {"kill_on_bad_exit": ["--kill-on-bad-exit=1"], "step_time": "--time",
                                   "text": "srun --kill-on-bad-exit=1 --time=MINUTES on each check's step"}
    assert plan["timeout"]["source"].startswith("derived")
    text = run_envtool(*_dry(tmp_path, venv_prefix, _site(tmp_path))).stdout
    assert "timeout: 2220 s (derived" in text, text
    assert "step bounds: srun --kill-on-bad-exit=1 --time=MINUTES on each check's step" in text, text
    own = json.loads(run_envtool(*_dry(tmp_path, venv_prefix, _site(tmp_path), "--json", "--timeout", "77")).stdout)
    assert own["plan"]["timeout"] == {"seconds": 77.0, "source": "--timeout"}
    pbs = json.loads(run_envtool(*_dry(tmp_path, venv_prefix, _site(tmp_path, "pbs"), "--json")).stdout)["plan"]
    assert "--kill-on-bad-exit" not in pbs["script_text"] and pbs["timeout"]["seconds"] == 600 + 540
    # a scheduler without per-step bounds says so, and why (issue 45, item 4)
    assert pbs["step_bounds"]["kill_on_bad_exit"] == [] and pbs["step_bounds"]["step_time"] == ""
    assert pbs["step_bounds"]["text"].startswith("none per step: PBS Pro has no step launcher"), pbs["step_bounds"]


def test_a_site_without_a_step_launcher_runs_the_site_launch_only(tmp_path, venv_prefix):
    """PBS has no per-step PMI choice (``srun --mpi=none``): no rendezvous checks, no pre-flight."""
    proc = run_envtool(*_dry(tmp_path, venv_prefix, _site(tmp_path, "pbs"), "--json"))
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["plan"]
    assert [c["name"] for c in plan["checks"]] == ["horovod-mpi"] and plan["preflight"] is False
    assert plan["submit"][0] == "qsub" and "--mpi=none" not in plan["script_text"]


def test_dry_run_needs_submit(tmp_path, venv_prefix):
    proc = run_envtool("validate", "--prefix", venv_prefix, "--dry-run", "--json")
    assert proc.returncode == 2 and "add --submit" in json.loads(proc.stdout)["error"]


def test_a_toy_check_and_launch_are_selected_and_written_into_the_job_script(tmp_path, venv_prefix, capsys):
    """One file (tests/helpers/toy_validation.py) and one registration each: the toy check is
    selected where its device and framework fit, and its launch writes its line into the script."""
    from envtool.cli.main import main
    from envtool.validate import checks as vc

    vc.CHECKS.register("toy-tf-nccl", "helpers.toy_validation:TOY")
    vc.CHECKS.register("toy-tf-gloo", "helpers.toy_validation:TOY_CPU")
    vc.LAUNCHES.register("toyrun", "helpers.toy_validation:LAUNCH")
    try:
        picked = [c.name for c in vc.select(vc.Selection(where="job", frameworks=("tensorflow",), gpus=True))]
        assert picked == ["horovod-tf-mpi", "toy-tf-nccl"]  # no step launcher: no rendezvous checks; no pytorch
        assert "toy-tf-nccl" not in [c.name for c in vc.select(vc.Selection(where="job", gpus=False))]
        code = main(_dry(tmp_path, venv_prefix, _site(tmp_path), "--json"))
        plan = json.loads(capsys.readouterr().out)["plan"]
    finally:
        vc.CHECKS.unregister("toy-tf-nccl")
        vc.CHECKS.unregister("toy-tf-gloo")
        vc.LAUNCHES.unregister("toyrun")
    assert code == 0
    names = [c["name"] for c in plan["checks"]]
    # no spec, no framework installed in the prefix: PyTorch's checks (and the toy's, declared for it);
    # the site has no GPUs
    assert names == ["horovod-mpi", "horovod-gloo", "torch-gloo", "toy-tf-gloo"], names
    assert "toyrun --nproc auto" in plan["script_text"] and "probe-toy --controller toy" in plan["script_text"]
    assert "toy-tf-nccl" not in vc.CHECKS.names()


def test_a_check_that_is_not_a_validation_check_is_refused():
    from envtool.validate import checks as vc

    vc.CHECKS.register("broken", object())
    try:
        with pytest.raises(TypeError, match="must be a ValidationCheck"):
            vc.select(vc.Selection(where="job"))
    finally:
        vc.CHECKS.unregister("broken")


def test_validate_here_logs_only_the_variables_it_adds(monkeypatch, tmp_path):
    """The ranks' variables passed to the Runner (and so written to the build log, and to stderr with
    -v) are only what validate adds; an inherited secret stays out, the PATH entry is there."""
    from types import SimpleNamespace

    from envtool.steps.validate import here

    monkeypatch.setenv("ENVTOOL_TEST_SECRET_TOKEN", "s3cr3t-value")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/old/lib")
    target = SimpleNamespace(env=(("FOO", "1"),), env_paths=(("LD_LIBRARY_PATH", "prepend", "/new/lib"),))
    env = here._env(target, tmp_path)
    assert "ENVTOOL_TEST_SECRET_TOKEN" not in env and "s3cr3t-value" not in " ".join(env.values())
    assert env["PATH"].startswith(f"{tmp_path / 'bin'}:") and env["FOO"] == "1"
    assert env["LD_LIBRARY_PATH"] == "/new/lib:/old/lib"


def test_an_lsf_submit_line_printed_for_pasting_carries_the_script(tmp_path):
    """LSF's bsub reads the job script on standard input; the plan's submit line must run alone when
    pasted, so it redirects the script instead of printing a bare ``bsub``."""
    import shlex

    from envtool.scheduler import lsf
    from envtool.steps.validate import watch

    script = tmp_path / "a dir" / "job.sh"
    script.parent.mkdir()
    script.write_text("#BSUB -J x\necho hi\n")
    argv = watch.pasteable_submit_argv(lsf, script)
    assert argv[:2] == ["sh", "-c"] and argv[-1] == str(script)
    # pasted into a shell, bsub gets the script on its standard input (cat stands in for bsub here)
    line = shlex.join(argv).replace("exec bsub", "exec cat", 1)
    out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout == script.read_text()


def test_without_a_spec_the_installed_framework_picks_the_checks(tmp_path):
    """A prefix with no spec record: TensorFlow installed (its dist-info) selects Horovod's
    TensorFlow checks and its Keras benchmark, not PyTorch's."""
    prefix = tmp_path / "tfenv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=scaled(120))
    (site,) = prefix.glob("lib/python3*/site-packages")
    info = site / "tensorflow_cpu-2.12.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorflow-cpu\nVersion: 2.12.1\n")
    (info / "RECORD").write_text("")
    proc = run_envtool(*_dry(tmp_path, prefix, _site(tmp_path), "--benchmark", "--json"))
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["plan"]
    assert [c["name"] for c in plan["checks"]] == ["horovod-tf-mpi", "horovod-tf-gloo"], plan["checks"]
    assert all(c["framework"] == "tensorflow" for c in plan["checks"])
    assert "bench-4 --framework tensorflow" in plan["script_text"], plan["script_text"]
