"""The actions of ``validate --submit``'s steps (:mod:`envtool.steps.validate.job`); each takes
``(step, runner)``, reads the :class:`~envtool.steps.validate.job.JobPlan` in ``step.data`` and
what earlier steps returned (``runner.results``), and returns its own result."""
from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from envtool.core.errors import CheckFailed
from envtool.core.plan import Step, StepContext
from envtool.steps.validate import judge as jd
from envtool.steps.validate import watch as wt
from envtool.steps.validate.results import JobResult
from envtool.validate import ranks as rk


def preflight(step: Step, runner: StepContext):
    """The launcher's PMI against the MPI build, on this host, before anything is written.

    Raises:
        CheckFailed: they do not match (and more than the pre-flight was asked for); its
            ``step_result`` is the :class:`envtool.validate.pmi.PmiResult`.
    """
    from envtool.validate import pmi

    plan = step.data
    runner.progress("pre-flight: srun --mpi=list against the MPI build ...")
    stage = plan.target.stage  # a staged copy: its libraries are read where it was packed from
    res = pmi.check(plan.target.prefix, plan.target.site.batch.mpi, plan.target.site.path, socket.gethostname(),
                    staged_from=Path(stage.packed_from) if stage is not None and stage.packed_from else None,
                    staged_lock=stage.lock_sha256 if stage is not None else "")
    if res.problems and not plan.options.preflight_only:
        raise CheckFailed("; ".join(res.problems), step_result=res)
    return res


def _clear(run_dir: Path, phases: List[str]) -> None:
    """Results of an earlier run in this directory (the probes wrote them)."""
    for phase in phases:
        for old in [f for pat in ("rank-*.json", "pid-*.json", "*.txt") for f in (run_dir / phase).glob(pat)]:
            old.unlink()


def write_script(step: Step, runner: StepContext) -> str:
    """Make the run directory, copy the rank probe (the pre-flight, the rendezvous server) into it,
    clear an earlier run's results there and write the job script; returns its path."""
    from envtool.validate import preflight as pf

    plan = step.data
    run_dir = plan.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    rk.install_probe(run_dir)
    if plan.with_preflight:
        pf.clear(run_dir)  # reports of an earlier run in this directory (written by preflight.sh)
        pf.install(run_dir)
    if any(c.rendezvous for c in plan.checks):
        rk.install_rendezvous(run_dir)
    if plan.image is None:
        _clear(run_dir, [c.phase for c in plan.checks])
    if plan.layout.gpus_per_rank and plan.options.sweep_max and plan.checks:
        (run_dir / "nccl").mkdir(exist_ok=True)
        for old in (run_dir / "nccl").glob("*.log"):
            old.unlink()
    plan.script.write_text(plan.text)
    plan.script.chmod(0o755)
    runner.note(f"wrote {plan.script}")
    return str(plan.script)


def submit(step: Step, runner: StepContext) -> str:
    """Submit the script; returns the job id (:func:`envtool.steps.validate.watch.submit`)."""
    plan = step.data
    # kept at once, in the same statement: any failure from here on cancels it (job.run_job)
    job_id = runner.results["submit"] = wt.submit(plan.sched, plan.script)
    runner.note(f"job {job_id}")
    runner.progress(f"job {job_id} submitted ({plan.sched.NAME}); script {plan.script}")
    return job_id


@dataclass
class Ended:
    """How the job ended: its id (None when run here), state, exit code and what the watch saw."""

    job_id: Optional[str]
    state: str
    code: Optional[int]
    watch: wt.JobWatch


def watch(step: Step, runner: StepContext) -> Ended:
    """Wait for the job; Ctrl-C/SIGTERM, ``--timeout``, a lost node or any failure while it waits
    cancel it (:func:`watch.wait`)."""
    plan = step.data
    job_id = runner.results["submit"]
    seen = wt.JobWatch(output=plan.run_dir / "job.out")
    try:
        state, code = wt.wait(plan.sched, job_id, runner.progress, plan.timeout, seen, plan.poll_max)
    except BaseException:
        if seen.cancelled:
            runner.results["cancelled"] = job_id  # wait() cancelled it before re-raising
        raise
    runner.note(f"job {job_id} ended {state} (exit status {code})")
    return Ended(job_id, state, code, seen)


def run_script(step: Step, runner: StepContext) -> Ended:
    """No scheduler: run the script here (:func:`envtool.steps.validate.watch.run_local_script`)."""
    plan = step.data
    state, code = wt.run_local_script(plan.script, plan.run_dir, runner.progress, plan.timeout)
    return Ended(None, state, code, wt.JobWatch(output=plan.run_dir / "job.out"))


@dataclass
class Collected:
    """What the job left in the run directory: the pre-flight's per-node records, check-build's
    output, the records of each check's phase, and the benchmark's."""

    preflight: List[Dict[str, str]] = field(default_factory=list)
    check_build: str = ""
    records: Dict[str, List[dict]] = field(default_factory=dict)
    bench: Optional[tuple] = None


def collect(step: Step, runner: StepContext) -> Collected:
    """Read what the ranks and the pre-flight wrote."""
    from envtool.validate import preflight as pf

    plan = step.data
    run_dir = plan.run_dir
    cb = run_dir / "check-build.txt"
    out = Collected(preflight=pf.gather(run_dir) if plan.with_preflight else [],
                    check_build=cb.read_text(errors="replace") if cb.exists() else "",
                    records={"probe": rk.gather(run_dir, "probe")})
    for c in plan.checks:
        out.records[c.phase] = rk.gather(run_dir, c.phase)
    if plan.options.benchmark:
        out.bench = (rk.gather(run_dir, "bench-1"), rk.gather(run_dir, f"bench-{plan.layout.ranks}"))
    runner.note("records: " + ", ".join(f"{k} {len(v)}" for k, v in out.records.items()))
    return out


def judge(step: Step, runner: StepContext) -> JobResult:
    """Judge what was collected (:func:`envtool.steps.validate.judge.job`)."""
    plan = step.data
    ended = runner.results.get("watch") or runner.results.get("run-script")
    return jd.job(plan, ended, runner.results.get("preflight"), runner.results["collect"])
