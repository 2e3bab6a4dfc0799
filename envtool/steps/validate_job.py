"""``envtool validate``: the checks ``create`` runs, on this machine or as a batch job.

On this machine (:func:`run_here`): ``horovodrun --check-build`` compared with the spec; for every
controller the build has (Gloo, MPI) an N-rank ``horovodrun`` of the rank probe (allreduce on the
controller's CPU tensor operations, a DataLoader under the spec's start method after Horovod is up);
with ``benchmark`` the synthetic training step at 1 rank and N ranks.

As a job (:func:`run_job`): the same probe as a job script from :mod:`envtool.steps.jobscript`
(check-build once in the batch shell, the probe on every rank through the site's launcher, the
benchmark at 1 rank and all ranks), submitted to the site's scheduler, watched (queued → running
→ done, job id shown) and cancelled on Ctrl-C/SIGTERM; results are gathered per rank from the run
directory (which must be on a file system the compute nodes share: the current directory by
default).
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from envtool.core import procs
from envtool.core.errors import CheckFailed, EnvtoolError, UsageError
from envtool.scheduler.model import LaunchStep, Layout
from envtool.steps.jobscript import Target, build_request, render
from envtool.validate import ranks as rk

Progress = Callable[[str], None]


def _check_build(target: Target, text: Optional[str]) -> Dict[str, object]:
    """Parse check-build output and compare it with the spec (when it expects one)."""
    from envtool.horovod import checkbuild

    out: Dict[str, object] = {"ok": True}
    if not text:
        return {"ok": False, "error": "no horovodrun --check-build output"}
    try:
        found = checkbuild.parse(text)
    except EnvtoolError as exc:
        return {"ok": False, "error": str(exc)}
    out["found"] = found.to_dict()
    out["controllers"] = [n for n, ok in found.controllers if ok]
    if target.spec is not None and target.spec.expect.check_build is not None:
        comparison = checkbuild.compare(found, target.spec.expect.check_build)
        out["table"] = checkbuild.format_table(comparison)
        out["ok"] = comparison.ok
        out["missing"] = [f"{r.name} ({r.section.replace('_', ' ')})" for r in comparison.missing]
    return out


def _method(target: Target) -> Optional[str]:
    return target.spec.expect.dataloader_start_method if target.spec is not None else None


def _run_horovodrun(target: Target, ranks: int, controller: Optional[str], argv: List[str], timeout: float,
                    log) -> int:
    from envtool.scheduler import launcher

    cmd = launcher.horovodrun_argv(target.prefix, ranks, controller) + argv
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PATH=f"{target.prefix / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    for k, v in target.env:
        env[k] = v
    for k, op, entry in target.env_paths:  # env: {VAR: {prepend|append: DIR}}, as the job script does
        old = env.get(k)
        env[k] = entry if not old else (f"{entry}{os.pathsep}{old}" if op == "prepend" else f"{old}{os.pathsep}{entry}")
    log.write(f"$ {shlex.join(cmd)}\n")
    log.flush()
    try:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout,
                              preexec_fn=procs.die_with_parent)
    except subprocess.TimeoutExpired:
        log.write(f"(timed out after {timeout:.0f} s)\n")
        return 124
    return proc.returncode


def run_here(target: Target, ranks: int = 2, benchmark: bool = False, steps: int = 20, batch_size: int = 32,
             timeout: float = 600.0, progress: Progress = lambda s: None) -> Dict[str, object]:
    """Validate ``target.prefix`` on this machine (see the module docstring).

    Args:
        target: from :func:`envtool.steps.jobscript.resolve_target` (needs a prefix).
        ranks: ranks of the allreduce and of the benchmark's N-rank point.
        benchmark: also run the scaling benchmark.
        steps: timed training steps per benchmark point; batch_size: samples per step and rank.
        timeout: seconds each horovodrun may take.
        progress: called with one line per phase.
    Returns:
        ``{"ok", "problems", "check_build", "runs": {controller: [records]}, "benchmark", "run_dir", "log"}``.
    Raises:
        UsageError: no prefix (a ``--module`` needs ``--submit``), or no horovodrun in it.
    """
    from envtool.validate import probes

    if target.prefix is None:
        raise UsageError("--module needs --submit (the module is loaded in the job); give --prefix to validate here")
    run_dir = Path(tempfile.mkdtemp(prefix="envtool-validate-"))
    probe = rk.install_probe(run_dir)
    log_path = run_dir / "validate.log"
    result: Dict[str, object] = {"run_dir": str(run_dir), "log": str(log_path), "where": "here"}
    problems: List[str] = []
    with open(log_path, "w") as log:
        progress("horovodrun --check-build ...")
        try:
            text = probes.check_build_output(target.prefix)
        except FileNotFoundError:
            raise UsageError(f"--prefix {target.prefix}: no bin/horovodrun (is Horovod installed there?)") from None
        except subprocess.TimeoutExpired:
            text = ""
        log.write(text + "\n")
        cb = _check_build(target, text)
        result["check_build"] = cb
        if not cb["ok"]:
            problems.append("check-build: " + (", ".join(cb.get("missing") or []) + " expected but not built"
                                               if cb.get("missing") else str(cb.get("error"))))
        runs: Dict[str, List[dict]] = {}
        for controller in [c.lower() for c in cb.get("controllers", []) if c.lower() in ("gloo", "mpi")]:
            progress(f"{ranks}-rank probe with the {controller} controller ...")
            phase = f"probe-{controller}"
            rc = _run_horovodrun(target, ranks, controller, rk.probe_argv(target.python, probe, run_dir, phase,
                                                                          _method(target)), timeout, log)
            recs = rk.gather(run_dir, phase)
            runs[controller] = recs
            problems += [f"{controller}: {p}" for p in rk.judge(recs, ranks, _expected_warnings(target))]
            if rc != 0 and not rk.judge(recs, ranks, _expected_warnings(target)):
                problems.append(f"{controller}: horovodrun exited with {rc} (see {log_path})")
        if not runs:
            problems.append("Horovod has neither a Gloo nor an MPI controller: nothing to run ranks with")
        result["runs"] = runs
        if benchmark and runs:
            controller = "gloo" if "gloo" in runs else next(iter(runs))
            points = {}
            for n in (1, ranks):
                progress(f"benchmark at {n} rank(s) ...")
                phase = f"bench-{n}"
                _run_horovodrun(target, n, controller, rk.probe_argv(target.python, probe, run_dir, phase,
                                                                     batch_size=batch_size, steps=steps), timeout, log)
                points[n] = rk.gather(run_dir, phase)
                problems += [f"benchmark at {n}: {p}" for p in rk.judge(points[n], n)]
            result["benchmark"] = rk.scaling(points[1], points[ranks])
            result["benchmark"]["controller"] = controller
    result["problems"] = problems
    result["ok"] = not problems
    return result


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (the job is cancelled)."""


def run_job(target: Target, nodes: int, ranks_per_node: Optional[int], gpus_per_rank: Optional[int] = None,
            time_limit: Optional[str] = None, account: Optional[str] = None, queue: Optional[str] = None,
            benchmark: bool = False, steps: int = 20, batch_size: int = 32, workdir: Optional[str] = None,
            timeout: Optional[float] = None, progress: Progress = lambda s: None,
            preflight_only: bool = False) -> Dict[str, object]:
    """Run the validation as a batch job through the site's scheduler (see the module docstring).

    Args:
        target: the environment and site.
        nodes, ranks_per_node, gpus_per_rank: the layout (defaults as ``jobscript``'s).
        time_limit: ``H:MM:SS`` for the job, or None (the site's default).
        account, queue: as ``jobscript``.
        benchmark: add the 1-rank and all-rank benchmark steps.
        workdir: the run directory (default ``./envtool-validate-<time>``; must be visible to the
            compute nodes).
        timeout: seconds to wait for the job before cancelling it (None: as long as it takes).
        progress: called with each state change (``job 12 queued (PENDING)``).
        preflight_only: run the pre-flight alone (Slurm sites).

    With ``target.stage`` (:func:`envtool.steps.jobscript.resolve_staged`) the job first stages the
    pack to each node's local storage; the pre-flight then checks the staged copy on every node,
    and its lockfile against the pack's (the source environment's).

    On a Slurm site the job starts with the pre-flight (:mod:`envtool.validate.preflight`): one
    task per node, before the environment is activated, and a gate that stops the script before
    the main step when a node cannot run it.

    Returns:
        ``{"ok", "problems", "job_id", "state", "exit_status", "preflight", "check_build",
        "ranks": [records], "benchmark", "run_dir", "script", "output"}``.
    Raises:
        CheckFailed: the scheduler refused the job (its message).
        KeyboardInterrupt: Ctrl-C or SIGTERM; the job has been cancelled first.
        SpecError / UsageError: the site file lacks a value, a bad option (exit 2).
    """
    from envtool import scheduler

    from envtool.validate import preflight as pf

    sched = scheduler.get(target.site.scheduler)
    with_preflight = getattr(sched, "PREFLIGHT", False)
    if preflight_only and not with_preflight:
        raise UsageError(f"--preflight: the pre-flight is written for Slurm sites so far; site {target.site.name} "
                         f"({target.site.path}) uses scheduler {target.site.scheduler or 'none'}")
    if preflight_only and benchmark:
        raise UsageError("--preflight runs the pre-flight alone: drop --benchmark")
    run_dir = Path(workdir).absolute() if workdir else Path.cwd() / time.strftime("envtool-validate-%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    probe = rk.install_probe(run_dir)
    python = target.python
    method = _method(target)
    job_steps: List[LaunchStep] = []
    if with_preflight:
        for old in (run_dir / pf.DIR).glob("task-*.txt") if (run_dir / pf.DIR).is_dir() else []:
            old.unlink()  # reports of an earlier run in this directory (written by preflight.sh)
        pf_script = pf.install(run_dir)
        job_steps += [LaunchStep(tuple(pf.node_argv(pf_script, run_dir, target.prefix)), per_node=True, early=True),
                      LaunchStep(tuple(pf.gate_argv(pf_script, run_dir, nodes, _lock(target))),
                                 direct=True, early=True)]
    if not preflight_only:
        job_steps += [LaunchStep(tuple(([python, str(target.prefix / "bin" / "horovodrun")] if target.prefix
                                        else ["horovodrun"]) + ["--check-build"]),
                                 redirect=str(run_dir / "check-build.txt"), direct=True, may_fail=True),
                      LaunchStep(tuple(rk.probe_argv(python, probe, run_dir, "probe", method)))]
    req = build_request(target, nodes, job_steps, ranks_per_node, gpus_per_rank, time_limit, account, queue,
                        "envtool-validate", str(run_dir / "job.out"), str(run_dir),
                        extra_env=[("PYTHONUNBUFFERED", "1")])
    lay = req.layout
    if benchmark:
        one = Layout(1, 1, lay.gpus_per_rank, lay.cpus_per_rank)
        job_steps += [LaunchStep(tuple(rk.probe_argv(python, probe, run_dir, "bench-1", batch_size=batch_size,
                                                     steps=steps)), layout=one),
                      LaunchStep(tuple(rk.probe_argv(python, probe, run_dir, f"bench-{lay.ranks}",
                                                     batch_size=batch_size, steps=steps)))]
        req = build_request(target, nodes, job_steps, ranks_per_node, gpus_per_rank, time_limit, account, queue,
                            "envtool-validate", str(run_dir / "job.out"), str(run_dir),
                            extra_env=[("PYTHONUNBUFFERED", "1")])
    text = render(req)
    script = run_dir / "job.sh"
    script.write_text(text)
    script.chmod(0o755)
    result: Dict[str, object] = {"run_dir": str(run_dir), "script": str(script), "output": str(run_dir / "job.out"),
                                 "scheduler": sched.NAME, "layout": {"nodes": lay.nodes, "ranks": lay.ranks,
                                                                     "ranks_per_node": lay.ranks_per_node}}
    old_term = signal.signal(signal.SIGTERM, _raise_terminated) if _main_thread() else None
    try:
        if sched.NAME == "local":
            state, code = _run_local_script(script, run_dir, progress, timeout)
            result.update(job_id=None, state=state, exit_status=code)
        else:
            job_id = _submit(sched, script)
            result["job_id"] = job_id
            progress(f"job {job_id} submitted ({sched.NAME}); script {script}")
            state, code = _wait(sched, job_id, progress, timeout)
            result.update(state=state, exit_status=code)
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    problems: List[str] = []
    if with_preflight:
        pf_recs = pf.gather(run_dir)
        pf_problems = pf.judge(pf_recs, lay.nodes, target.prefix, _lock(target))
        if target.stage is not None and len(pf_recs) < lay.nodes:
            pf_problems.insert(0, _stage_failed(target.stage, run_dir / "job.out"))
        result["preflight"] = {"ok": not pf_problems, "nodes": pf_recs, "problems": pf_problems}
        if pf_problems:
            problems += pf_problems
            if not preflight_only and not rk.gather(run_dir, "probe"):
                problems.append("the main step did not run: the pre-flight stopped the job")
        elif preflight_only and state not in ("COMPLETED", "DONE", "F", "gone", "exit 0"):
            problems.append(f"the pre-flight job ended {state} (exit status {code}); see {run_dir / 'job.out'}")
        if preflight_only or (pf_problems and not rk.gather(run_dir, "probe")):
            result.update(check_build=None, ranks=[], problems=problems, ok=not problems)
            return result
    cb_text = (run_dir / "check-build.txt").read_text(errors="replace") if (run_dir / "check-build.txt").exists() else ""
    cb = _check_build(target, cb_text)
    result["check_build"] = cb
    if not cb["ok"]:
        problems.append("check-build: " + (", ".join(cb.get("missing") or []) + " expected but not built"
                                           if cb.get("missing") else str(cb.get("error"))))
    recs = rk.gather(run_dir, "probe")
    result["ranks"] = recs
    problems += rk.judge(recs, lay.ranks, _expected_warnings(target))
    if any(": no result" in p for p in problems):
        said = rk.errors_in_output(run_dir / "job.out")
        if said:
            problems.append("the job output says: " + " | ".join(said))
    if benchmark:
        one_recs, many_recs = rk.gather(run_dir, "bench-1"), rk.gather(run_dir, f"bench-{lay.ranks}")
        if not problems:
            problems += [f"benchmark at 1: {p}" for p in rk.judge(one_recs, 1)]
            problems += [f"benchmark at {lay.ranks}: {p}" for p in rk.judge(many_recs, lay.ranks)]
        result["benchmark"] = rk.scaling(one_recs, many_recs)
    if state not in ("COMPLETED", "DONE", "F", "gone", "exit 0") and not problems:
        problems.append(f"the job ended {state} (exit status {code}); see {run_dir / 'job.out'}")
    result["problems"] = problems
    result["ok"] = not problems
    return result


def _lock(target: Target) -> Optional[str]:
    """The lockfile sha256 every node must see: the pack's for a staged environment (the source's
    lock, carried in the pack), else the prefix's as this host sees it."""
    from envtool.validate import preflight as pf

    if target.stage is not None:
        return target.stage.lock_sha256 or None
    return pf.lock_sha256(target.prefix)


def _stage_failed(stage, output: Path) -> str:
    """The problem line when nodes did not get as far as the pre-flight in a staged job: what the
    staging lines said (``envtool stage: …``, else the job output's error lines)."""
    try:
        text = output.read_text(errors="replace")
    except OSError:
        text = ""
    said = [line.strip()[:300] for line in text.splitlines() if line.startswith("envtool stage:")][:3]
    said = said or rk.errors_in_output(output)
    return (f"staging {stage.file} to node-local storage ({stage.node_local}) did not finish on every node"
            + (": " + " | ".join(said) if said else "") + f"; see {output}")


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_terminated(signum, frame):
    raise _Terminated("terminated")


def _submit(sched, script: Path) -> str:
    argv = sched.submit_argv(str(script))
    stdin = script.read_text() if getattr(sched, "SUBMIT_STDIN", False) else None
    try:
        # the job is the scheduler's, not envtool's child: it does not carry envtool's process marker
        env = {k: v for k, v in os.environ.items() if k != procs.BUILD_MARKER}
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, input=stdin, cwd=script.parent,
                              env=env)
    except FileNotFoundError:
        raise UsageError(f"{argv[0]} is not on PATH: run on a login node of the site, or load its scheduler "
                         f"module") from None
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{argv[0]} did not answer within 120 s") from None
    job_id = sched.parse_job_id(proc.stdout + "\n" + proc.stderr) if proc.returncode == 0 else None
    if not job_id:
        raise CheckFailed(f"{shlex.join(argv)} refused the job (exit {proc.returncode}): "
                          f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    return job_id


def _wait(sched, job_id: str, progress: Progress, timeout: Optional[float]):
    """Poll until the job is done; cancel it on KeyboardInterrupt/SIGTERM or after ``timeout``."""
    started = time.monotonic()
    last = None
    interval = 0.5
    try:
        while True:
            phase, state, code = sched.state(job_id)
            if (phase, state) != last:
                progress(f"job {job_id} {phase} ({state})")
                last = (phase, state)
            if phase == "done":
                return state, code
            if timeout is not None and time.monotonic() - started > timeout:
                _cancel(sched, job_id, progress)
                raise CheckFailed(f"job {job_id} did not finish within {timeout:.0f} s; it was cancelled")
            time.sleep(interval)
            interval = min(interval * 1.5, 10.0)
    except KeyboardInterrupt:
        _cancel(sched, job_id, progress)
        raise


def _cancel(sched, job_id: str, progress: Progress) -> None:
    """Cancel the job and wait (up to 60 s) until the scheduler no longer lists it as queued or running."""
    argv = sched.cancel_argv(job_id)
    progress(f"cancelling job {job_id}: {shlex.join(argv)}")
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
    try:
        subprocess.run(argv, capture_output=True, text=True, timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            phase, state, _ = sched.state(job_id)
            if phase not in ("queued", "running"):
                progress(f"job {job_id} cancelled ({state})")
                return
            time.sleep(0.5)
        progress(f"job {job_id} still listed after scancel; check it with the scheduler")
    except (OSError, subprocess.TimeoutExpired) as exc:
        progress(f"could not cancel job {job_id}: {exc}")
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)


def _run_local_script(script: Path, run_dir: Path, progress: Progress, timeout: Optional[float]):
    """No scheduler: run the script with bash in its own process group (killed on Ctrl-C)."""
    progress(f"running {script} on this machine")
    with open(run_dir / "job.out", "ab") as out:
        proc = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT, cwd=run_dir,
                                start_new_session=True, preexec_fn=procs.die_with_parent)
        try:
            code = proc.wait(timeout=timeout)
        except (KeyboardInterrupt, subprocess.TimeoutExpired) as exc:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise CheckFailed(f"the script did not finish within {timeout:.0f} s; it was stopped") from None
    return ("exit 0" if code == 0 else f"exit {code}"), code


def _expected_warnings(target) -> tuple:
    """The spec's ``expect.import_warnings`` (patterns of accepted import warnings), or ()."""
    spec = getattr(target, "spec", None)
    return tuple(spec.expect.import_warnings) if spec is not None else ()
