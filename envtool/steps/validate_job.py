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
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypedDict

from envtool.core import procs
from envtool.core.errors import CheckFailed, EnvtoolError, UsageError
from envtool.scheduler.model import LaunchStep, Layout, SchedulerOutputError, capabilities
from envtool.steps.jobscript import Target, build_request, render
from envtool.validate import ranks as rk
from envtool.validate import sweep

#: Seconds a Gloo or torch.distributed step may take when ``--timeout`` is not given.
RENDEZVOUS_SECONDS = 900
#: (controller, phase of its step) in the order the job runs them.
CONTROLLER_PHASES = (("mpi", "probe"), ("gloo", "probe-gloo"), ("torch", "probe-torch"))

Progress = Callable[[str], None]
#: A result as ``--json`` prints it: one JSON object whose keys each function's docstring lists
#: (some only on some paths, e.g. ``preflight`` with a pre-flight, ``benchmark`` with ``--benchmark``).
Result = Dict[str, Any]


class CheckBuildResult(TypedDict, total=False):
    """What :func:`_check_build` found: ``ok``, and ``error`` (no or unreadable output) or ``found``
    (:meth:`envtool.horovod.checkbuild.CheckBuild.to_dict`), ``controllers`` (built ones' names),
    and where the spec expects a build ``table`` (text) and ``missing`` (``"NAME (section)"``)."""

    ok: bool
    error: str
    found: Dict[str, object]
    controllers: List[str]
    table: str
    missing: List[str]


@dataclass
class JobWatch:
    """What :func:`_wait` saw of a job while it ran.

    Attributes:
        output: the job's output file, read into ``output_at_timeout`` before a cancel.
        nodes: the job's node list, a hostlist such as ``node[1-2]`` (once it runs, on schedulers
            with ``unresponsive_nodes``), else None.
        lost: ``(node, state)`` of the nodes that stopped responding.
        output_at_timeout: the output's text when ``--timeout`` ran out, or None.
    """

    output: Optional[Path] = None
    nodes: Optional[str] = None
    lost: List[Tuple[str, str]] = field(default_factory=list)
    output_at_timeout: Optional[str] = None


def _check_build(target: Target, text: Optional[str]) -> CheckBuildResult:
    """Parse check-build output and compare it with the spec (when it expects one)."""
    from envtool.horovod import checkbuild

    out: CheckBuildResult = {"ok": True}
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


def _run_horovodrun(target: Target, prefix: Path, ranks: int, controller: Optional[str], argv: List[str],
                    timeout: float, log) -> int:
    from envtool.scheduler import launcher

    cmd = launcher.horovodrun_argv(prefix, ranks, controller) + argv
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PATH=f"{prefix / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
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
             timeout: float = 600.0, progress: Progress = lambda s: None, import_time: bool = False,
             slow_seconds: float = rk.SLOW_IMPORT_SECONDS) -> Result:
    """Validate ``target.prefix`` on this machine (see the module docstring).

    Args:
        target: from :func:`envtool.steps.jobscript.resolve_target` (needs a prefix).
        ranks: ranks of the allreduce and of the benchmark's N-rank point.
        benchmark: also run the scaling benchmark.
        steps: timed training steps per benchmark point; batch_size: samples per step and rank.
        timeout: seconds each horovodrun may take.
        progress: called with one line per phase.
        import_time: in the first controller's run, every rank also counts the file system
            metadata calls of its import under the prefix (strace; see
            :func:`envtool.validate.rank_probe.trace_import`); ``import_time`` in the result.
        slow_seconds: p99 import seconds above which an import from a shared file system is
            reported with the staging fix.
    Returns:
        ``{"ok", "problems", "check_build", "runs": {controller: [records]}, "benchmark", "run_dir", "log",
        "import_time"}``; after a passing run its temporary directory is removed (``run_dir`` and
        ``log`` None), after a failed one it is kept for its log (``import_time``: :func:`envtool.validate.ranks.import_summary` of the first
        run, each rank's import timed in every run).
    Raises:
        UsageError: no prefix (a ``--module`` needs ``--submit``), or no horovodrun in it.
    """
    from envtool.validate import probes

    prefix = target.prefix
    if prefix is None:
        raise UsageError("--module needs --submit (the module is loaded in the job); give --prefix to validate here")
    run_dir = Path(tempfile.mkdtemp(prefix="envtool-validate-"))
    probe = rk.install_probe(run_dir)
    log_path = run_dir / "validate.log"
    result: Result = {"run_dir": str(run_dir), "log": str(log_path), "where": "here"}
    problems: List[str] = []
    with open(log_path, "w") as log:
        progress("horovodrun --check-build ...")
        try:
            text = probes.check_build_output(prefix)
        except FileNotFoundError:
            shutil.rmtree(run_dir, ignore_errors=True)  # nothing ran: nothing to keep
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
            trace = import_time and not runs
            rc = _run_horovodrun(target, prefix, ranks, controller, rk.probe_argv(target.python, probe, run_dir, phase,
                                                                          _method(target), import_trace=trace),
                                 timeout, log)
            recs = rk.gather(run_dir, phase)
            if not runs:
                summary = rk.import_summary(recs, slow_seconds)
                if summary is not None:
                    summary["controller"] = controller
                result["import_time"] = summary
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
                _run_horovodrun(target, prefix, n, controller, rk.probe_argv(target.python, probe, run_dir, phase,
                                                                     batch_size=batch_size, steps=steps), timeout, log)
                points[n] = rk.gather(run_dir, phase)
                problems += [f"benchmark at {n}: {p}" for p in rk.judge(points[n], n)]
            scaling = rk.scaling(points[1], points[ranks])
            scaling["controller"] = controller
            result["benchmark"] = scaling
    result["problems"] = problems
    result["ok"] = not problems
    if result["ok"]:
        # nothing to read afterwards: the records are in the result; a failed (or interrupted)
        # run keeps its directory, whose log the command names
        shutil.rmtree(run_dir, ignore_errors=True)
        result.update(run_dir=None, log=None)
    return result


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (the job is cancelled)."""


def run_job(target: Target, nodes: int, ranks_per_node: Optional[int], gpus_per_rank: Optional[int] = None,
            time_limit: Optional[str] = None, account: Optional[str] = None, queue: Optional[str] = None,
            benchmark: bool = False, steps: int = 20, batch_size: int = 32, workdir: Optional[str] = None,
            timeout: Optional[float] = None, progress: Progress = lambda s: None,
            preflight_only: bool = False, slow_seconds: float = rk.SLOW_IMPORT_SECONDS,
            sweep_max: int = sweep.MAX_SIZE, image: Optional[str] = None,
            binds: Sequence[str] = ()) -> Result:
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
        slow_seconds: p99 import seconds above which an import from a shared file system is
            reported with the staging fix.
        sweep_max: bytes of the sweep's largest allreduce (0: no sweep); see
            :mod:`envtool.validate.sweep`.

    Every rank times its import of torch and horovod.torch and counts the file system metadata
    calls of that import under the prefix (strace on the compute node; a node without strace is
    named); ``import_time`` in the result summarises them (:func:`envtool.validate.ranks.import_summary`).
    Every controller the build has runs across the nodes (Slurm sites): Horovod's MPI controller
    through the site's ``srun --mpi=``; Horovod's Gloo controller and ``torch.distributed`` (gloo
    backend) under ``srun --mpi=none`` with their rendezvous served by ``rendezvous.py`` in the
    batch shell (the job's first node; why there, see that file). Each step ends with the
    allreduce sweep, judged against the site file's ``validation`` section (sweep references, fabric).

    With ``target.stage`` (:func:`envtool.steps.jobscript.resolve_staged`) the job first stages the
    pack to each node's local storage; the pre-flight then checks the staged copy on every node,
    and its lockfile against the pack's (the source environment's).

    On a Slurm site the job starts with the pre-flight (:mod:`envtool.validate.preflight`): one
    task per node, before the environment is activated, and a gate that stops the script before
    the main step when a node cannot run it.

    With ``image`` (``validate --image``; ``target`` from
    :func:`envtool.steps.container_run.resolve_image_target`) check-build and every rank of the MPI
    step run inside the image through the site's container runtime (:func:`_in_image`), the run
    directory bound into it; the pre-flight and the Gloo and torch.distributed steps are not run.

    Returns:
        ``{"ok", "problems", "job_id", "state", "exit_status", "preflight", "check_build",
        "ranks": [records of the MPI step], "import_time", "controllers": {name: {"phase", "ranks", "sweep",
        "transport", "skipped"}}, "benchmark", "run_dir", "script", "output"}``.
    Raises:
        CheckFailed: the scheduler refused the job (its message).
        KeyboardInterrupt: Ctrl-C or SIGTERM; the job has been cancelled first.
        SpecError / UsageError: the site file lacks a value, a bad option (exit 2).
    """
    from envtool import scheduler

    from envtool.validate import pmi
    from envtool.validate import preflight as pf

    sched = scheduler.get(target.site.scheduler)
    poll_max = job_poll_max()   # a bad ENVTOOL_JOB_POLL is refused before anything is written or submitted
    launcher_note: Optional[str] = None
    with_preflight = capabilities(sched).preflight and image is None
    if image is not None and preflight_only:
        raise UsageError("--preflight checks the environment's prefix on every node; with --image the image "
                         "carries the environment: drop --preflight")
    if preflight_only and not with_preflight:
        raise UsageError(f"--preflight: the pre-flight is written for Slurm sites so far; site {target.site.name} "
                         f"({target.site.path}) uses scheduler {target.site.scheduler or 'none'}")
    if preflight_only and benchmark:
        raise UsageError("--preflight runs the pre-flight alone: drop --benchmark")
    if image is not None and benchmark:
        raise UsageError("--benchmark runs on the host's environment: with --image drop --benchmark (the image's "
                         "ranks are validated by check-build and the allreduce)")
    step_launcher = capabilities(sched).step_launcher
    if step_launcher and target.launcher is not None and target.launcher.program != step_launcher:
        # validation steps start ranks with their own PMI plugin (--mpi=none for Gloo and
        # torch.distributed), which only srun takes; the site's batch.launcher stays for job scripts
        import dataclasses

        from envtool.scheduler.launcher import Launcher

        chosen = target.launcher.program
        launcher_note = (f"ranks are started with {step_launcher} (the site's launcher {chosen} is for job "
                         f"scripts; the validation's steps choose their own PMI plugin, which {step_launcher} takes)")
        progress(f"validate: {launcher_note}")
        target = dataclasses.replace(target, launcher=Launcher(program=step_launcher, template=step_launcher,
                                                               scheduler=sched.NAME, native=True))
    if image is not None:  # checked before anything is written
        from envtool.steps.container_run import container_of, image_path

        image = image_path(container_of(target.site), image, must_exist=True)
    run_dir = Path(workdir).absolute() if workdir else Path.cwd() / time.strftime("envtool-validate-%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    probe = rk.install_probe(run_dir)
    python = target.python
    method = _method(target)
    job_steps: List[LaunchStep] = []
    pmi_result = None
    if with_preflight:
        pf.clear(run_dir)  # reports of an earlier run in this directory (written by preflight.sh)
        pf_script = pf.install(run_dir)
        iface = getattr(target.site.batch, "interface", None)
        gpu = bool(target.site.gpus_per_node) and (gpus_per_rank is None or gpus_per_rank > 0)
        job_steps += [LaunchStep(tuple(pf.node_argv(pf_script, run_dir, target.prefix, iface, nodes, gpu)),
                                 per_node=True, early=True),
                      LaunchStep(tuple(pf.gate_argv(pf_script, run_dir, nodes, _lock(target))),
                                 direct=True, early=True)]
        if not iface:
            # the interface every node chose, for the main step (with its source as a comment)
            job_steps.append(LaunchStep(("source", str(pf.interface_env(run_dir))), direct=True, early=True))
        # the launcher's PMI against the MPI build: on this host, before anything is submitted
        progress("pre-flight: srun --mpi=list against the MPI build ...")
        pmi_result = pmi.check(target.prefix, target.site.batch.mpi, target.site.path, socket.gethostname())
        if pmi_result.problems and not preflight_only:
            return {"run_dir": str(run_dir), "script": None, "output": None, "scheduler": sched.NAME,
                    "layout": {"nodes": nodes, "ranks": None, "ranks_per_node": ranks_per_node}, "job_id": None,
                    "state": "not submitted", "exit_status": None, "check_build": None, "ranks": [],
                    "preflight": {"ok": False, "nodes": [], "problems": list(pmi_result.problems),
                                  "warnings": list(pmi_result.notes), "pmi": _pmi_dict(pmi_result)},
                    "problems": list(pmi_result.problems) + ["the job was not submitted: its launcher and MPI "
                                                             "do not match"], "ok": False}
    sweep_args = ["--sweep", str(sweep_max)] if sweep_max else []
    if image is not None:
        section = container_of(target.site)
        job_steps += [LaunchStep(_in_image(section, image, [python, str(Path(python).parent / "horovodrun"),
                                                            "--check-build"], binds, run_dir),
                                 redirect=str(run_dir / "check-build.txt"), direct=True, may_fail=True),
                      LaunchStep(_in_image(section, image, rk.probe_argv(python, IMAGE_RUN_DIR / probe.name,
                                                                          IMAGE_RUN_DIR, "probe", method)
                                           + sweep_args, binds, run_dir), mpi=section.mpi, may_fail=True)]
    elif not preflight_only:
        job_steps += [LaunchStep(tuple(([python, str(target.prefix / "bin" / "horovodrun")] if target.prefix
                                        else ["horovodrun"]) + ["--check-build"]),
                                 redirect=str(run_dir / "check-build.txt"), direct=True, may_fail=True),
                      LaunchStep(tuple(rk.probe_argv(python, probe, run_dir, "probe", method, import_trace=True)
                                       + sweep_args), may_fail=with_preflight)]
        for _, phase in CONTROLLER_PHASES:  # results of an earlier run in this directory (the probes wrote them)
            for old in [f for pat in ("rank-*.json", "pid-*.json", "*.txt") for f in (run_dir / phase).glob(pat)]:
                old.unlink()
        if with_preflight:  # Slurm: Gloo and torch.distributed across nodes, rendezvous served in the job
            rdv = rk.install_rendezvous(run_dir)
            wait = str(int(timeout or RENDEZVOUS_SECONDS))
            for kind, phase, controller in (("horovod-gloo", "probe-gloo", "gloo"), ("torch-gloo", "probe-torch",
                                                                                    "torch")):
                job_steps.append(LaunchStep(
                    tuple(rk.probe_argv(python, probe, run_dir, phase, method) + ["--controller", controller]
                          + sweep_args),
                    wrap=(python, str(rdv), kind, str(run_dir), phase, wait, "--"), mpi="none", may_fail=True))
    # srun labels each line with its task number (srun(1): SLURM_LABELIO, same as --label): a hang
    # can then name the last line each rank printed
    extra_env = [("PYTHONUNBUFFERED", "1")] + list(capabilities(sched).label_output)
    req = build_request(target, nodes, job_steps, ranks_per_node, gpus_per_rank, time_limit, account, queue,
                        "envtool-validate", str(run_dir / "job.out"), str(run_dir), extra_env=extra_env)
    lay = req.layout
    if lay.gpus_per_rank and sweep_max and not preflight_only:
        # NCCL says which network transport it picked (NET/Socket, NET/IB, NET/OFI) at INFO level
        (run_dir / "nccl").mkdir(exist_ok=True)
        for old in (run_dir / "nccl").glob("*.log"):
            old.unlink()
        extra_env += [("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT,NET"),
                      ("NCCL_DEBUG_FILE", str(run_dir / "nccl" / "%h.%p.log"))]
        req = build_request(target, nodes, job_steps, ranks_per_node, gpus_per_rank, time_limit, account, queue,
                            "envtool-validate", str(run_dir / "job.out"), str(run_dir), extra_env=extra_env)
    if benchmark:
        one = Layout(1, 1, lay.gpus_per_rank, lay.cpus_per_rank)
        job_steps += [LaunchStep(tuple(rk.probe_argv(python, probe, run_dir, "bench-1", batch_size=batch_size,
                                                     steps=steps)), layout=one),
                      LaunchStep(tuple(rk.probe_argv(python, probe, run_dir, f"bench-{lay.ranks}",
                                                     batch_size=batch_size, steps=steps)))]
        req = build_request(target, nodes, job_steps, ranks_per_node, gpus_per_rank, time_limit, account, queue,
                            "envtool-validate", str(run_dir / "job.out"), str(run_dir), extra_env=extra_env)
    text = render(req)
    script = run_dir / "job.sh"
    script.write_text(text)
    script.chmod(0o755)
    result: Result = {"run_dir": str(run_dir), "script": str(script), "output": str(run_dir / "job.out"),
                                 "scheduler": sched.NAME, "layout": {"nodes": lay.nodes, "ranks": lay.ranks,
                                                                     "ranks_per_node": lay.ranks_per_node}}
    if launcher_note:
        result["launcher_note"] = launcher_note
    old_term = signal.signal(signal.SIGTERM, _raise_terminated) if _main_thread() else None
    watch = JobWatch(output=run_dir / "job.out")
    try:
        if not capabilities(sched).submits:
            state, code = _run_local_script(script, run_dir, progress, timeout)
            result.update(job_id=None, state=state, exit_status=code)
        else:
            job_id = _submit(sched, script)
            result["job_id"] = job_id
            progress(f"job {job_id} submitted ({sched.NAME}); script {script}")
            state, code = _wait(sched, job_id, progress, timeout, watch, poll_max)
            result.update(state=state, exit_status=code)
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    problems: List[str] = _lost_nodes(sched, result.get("job_id"), watch, run_dir, script)
    if state == TIMED_OUT:
        problems.append(f"job {result.get('job_id')} did not finish within {timeout:.0f} s; it was cancelled; the "
                        f"last line each rank printed: "
                        f"{_last_lines(watch.output_at_timeout, run_dir / 'job.out', lay.ranks)}")
    if with_preflight:
        pf_recs = pf.gather(run_dir)
        pf_warnings: List[str] = list(pmi_result.notes) if pmi_result else []
        pf_problems = list(pmi_result.problems) if pmi_result else []
        pf_problems += pf.judge(pf_recs, lay.nodes, target.prefix, _lock(target),
                                site_path=target.site.path, run_dir=run_dir, warnings=pf_warnings)
        if target.stage is not None and len(pf_recs) < lay.nodes:
            pf_problems.insert(0, _stage_failed(target.stage, run_dir / "job.out"))
        result["preflight"] = {"ok": not pf_problems, "nodes": pf_recs, "problems": pf_problems,
                               "warnings": pf_warnings, "pmi": _pmi_dict(pmi_result) if pmi_result else None}
        if pf_problems:
            problems += pf_problems
            if not preflight_only and not rk.gather(run_dir, "probe"):
                problems.append("the main step did not run: the pre-flight stopped the job")
        elif preflight_only and state not in ("COMPLETED", "DONE", "F", "gone", "exit 0"):
            problems.append(f"the pre-flight job ended {state} (exit status {code}); see {run_dir / 'job.out'}")
        if preflight_only or (pf_problems and not rk.gather(run_dir, "probe")):
            result.update(check_build=None, ranks=[], problems=problems, ok=not problems)
            return result
    if state == NODE_LOST:  # what the ranks left is a consequence: name the node, not every rank
        result.update(check_build=None, ranks=rk.gather(run_dir, "probe"), problems=problems, ok=False)
        return result
    cb_text = (run_dir / "check-build.txt").read_text(errors="replace") if (run_dir / "check-build.txt").exists() else ""
    cb = _check_build(target, cb_text)
    result["check_build"] = cb
    if not cb["ok"]:
        problems.append("check-build: " + (", ".join(cb.get("missing") or []) + " expected but not built"
                                           if cb.get("missing") else str(cb.get("error"))))
    recs = rk.gather(run_dir, "probe")
    result["ranks"] = recs
    result["import_time"] = rk.import_summary(recs, slow_seconds)
    problems += rk.judge(recs, lay.ranks, _expected_warnings(target))
    if any(": no result" in p for p in problems):
        said = rk.errors_in_output(run_dir / "job.out")
        if said:
            problems.append("the job output says: " + " | ".join(said))
    result["controllers"] = _controllers(target, run_dir, lay, recs, with_preflight, sweep_max, problems)
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


#: Where ``validate --image`` binds the run directory inside the image: ``/mnt``, which the FHS
#: defines for temporarily mounted file systems and Debian's base-files ships
#: (https://refspecs.linuxfoundation.org/FHS_3.0/fhs/ch03s12.html). A runtime that runs an image
#: read-only (Charliecloud's ``ch-run``) can bind only onto a directory the image has.
IMAGE_RUN_DIR = Path("/mnt")


def _in_image(section, image: str, argv: Sequence[str], binds: Sequence[str], run_dir: Path) -> Tuple[str, ...]:
    """``argv`` run inside ``image`` by the site's container runtime, the run directory bound at
    :data:`IMAGE_RUN_DIR` and ``binds`` after it (:func:`envtool.scheduler.containers.wrap`)."""
    from envtool.scheduler import containers

    return tuple(containers.wrap(section, image, argv, [f"{run_dir}:{IMAGE_RUN_DIR}"] + list(binds)))


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


def _lost_nodes(sched, job_id, watch: JobWatch, run_dir: Path, script: Path) -> List[str]:
    """Problems naming the nodes of the job whose slurmd stopped responding, or where srun could
    not start a step (from the job output), each with a fix line; [] for other schedulers."""
    if job_id is None or not capabilities(sched).names_nodes:
        return []
    nodes = watch.nodes or sched.job_nodes(job_id)
    lost = dict(watch.lost)
    if nodes and not lost:
        lost = dict(sched.unresponsive_nodes(nodes))
    try:
        failed = dict(sched.parse_launch_failures((run_dir / "job.out").read_text(errors="replace")))
    except OSError:
        failed = {}
    problems = []
    for node in sorted(set(lost) | set(failed)):
        said = []
        if node in lost:
            said.append(f"Slurm reports it {lost[node]} (its slurmd does not respond)")
        if node in failed:
            said.append(f"srun could not start a step there: {failed[node]}")
        problems.append(f"{node}: the node was lost during job {job_id}: {'; '.join(said)}; fix: tell the site's "
                        f"admins (slurmd on {node}); meanwhile run without it: "
                        f"{shlex.join(['sbatch', '--exclude=' + node, str(script)])}")
    return problems


def _last_lines(text: Optional[str], path: Path, ranks: int) -> str:
    """``rank R: 'LINE'`` for each rank (the last line srun labelled with its task number), from
    ``text`` (the output when the job was cancelled) or else the file at ``path``."""
    if text is None:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            text = ""
    last = rk.last_lines(text)
    return "; ".join(f"rank {r}: {last[r]!r}" if r in last else f"rank {r}: printed nothing"
                     for r in range(ranks))


def _pmi_dict(res) -> Dict[str, object]:
    """The PMI comparison for ``--json``."""
    mpi = res.mpi
    return {"plugin": res.plugin, "srun_plugins": list(res.srun_plugins),
            "mpi": {"name": mpi.name, "speaks": list(mpi.speaks), "source": mpi.source} if mpi else None}


def _controllers(target: Target, run_dir: Path, lay: Layout, mpi_recs: List[dict], across: bool, sweep_max: int,
                 problems: List[str]) -> Dict[str, dict]:
    """Per controller: its ranks, sweep rows and transport; appends problems (prefixed with the
    controller) for the Gloo and torch.distributed steps, failed sweeps, missed references and a
    NCCL transport that is not the site's fabric."""
    site_validate = getattr(target.site, "validate", None)
    references = site_validate.references if site_validate is not None else ()
    fabric = site_validate.fabric if site_validate is not None else None
    out: Dict[str, dict] = {}
    for controller, phase in CONTROLLER_PHASES:
        if controller != "mpi" and not across:
            continue
        skipped = run_dir / phase / "skipped.txt"
        if skipped.exists():
            out[controller] = {"phase": phase, "ranks": [], "sweep": [], "skipped": skipped.read_text().strip()}
            continue
        failed = run_dir / phase / "failed.txt"
        if controller != "mpi" and failed.exists():
            why = failed.read_text(errors="replace").strip()[:300]
            problems.append(f"{controller}: the rendezvous in the job could not start: {why}")
            out[controller] = {"phase": phase, "ranks": [], "sweep": [], "skipped": None, "error": why}
            continue
        recs = mpi_recs if controller == "mpi" else rk.gather(run_dir, phase)
        if controller != "mpi":
            problems += [f"{controller}: {p}" for p in rk.judge(recs, lay.ranks, _expected_warnings(target))]
        rows = sweep.rows(recs)
        ifaces = sorted({str(r.get("iface")) for r in recs if r.get("iface")})
        entry = {"phase": phase, "ranks": recs, "sweep": rows, "skipped": None,
                 "transport": ("TCP over " + ", ".join(ifaces)) if ifaces and controller != "mpi" else
                 (("MPI; interface toward the first node: " + ", ".join(ifaces)) if ifaces else None)}
        if sweep_max and recs and all(r.get("ok") for r in recs):
            want = [n for n in sweep.SIZES if n <= sweep_max]
            if [r["bytes"] for r in rows] != want:
                problems.append(f"{controller}: the sweep lacks sizes "
                                + ", ".join(sweep.human_size(n) for n in want if n not in {r['bytes'] for r in rows}))
            problems += sweep.check_references(rows, references, controller, lay.nodes)
        out[controller] = entry
        gpu_rows = sweep.rows([{"checks": {"sweep": (r.get("checks") or {}).get("sweep_gpu") or {}}} for r in recs])
        if controller == "mpi" and gpu_rows:
            logs = sorted((run_dir / "nccl").glob("*.log")) if (run_dir / "nccl").is_dir() else []
            lines: List[str] = []
            for f in logs:
                lines += f.read_text(errors="replace").splitlines()
            nccl = sweep.nccl_transports(lines)
            out["nccl"] = {"phase": phase, "ranks": recs, "sweep": gpu_rows, "skipped": None,
                           "transport": nccl["network"] or ("inside the node: " + ", ".join(nccl["channels"])
                                                            if nccl["channels"] else None),
                           "nccl": nccl, "logs": [str(f) for f in logs]}
            problems += sweep.check_references(gpu_rows, references, "nccl", lay.nodes)
            if lay.nodes > 1:
                bad = sweep.check_fabric(nccl["network"], fabric)
                if bad:
                    problems.append(f"nccl: {bad} (NCCL_DEBUG=INFO logs: {run_dir / 'nccl'})")
    return out


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
    try:
        job_id = sched.parse_submit(proc.stdout + "\n" + proc.stderr) if proc.returncode == 0 else None
    except SchedulerOutputError:
        job_id = None
    if not job_id:
        raise CheckFailed(f"{shlex.join(argv)} refused the job (exit {proc.returncode}): "
                          f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    return job_id


#: the longest pause (s) between two looks at a submitted job's state, unless ``$ENVTOOL_JOB_POLL`` says otherwise
JOB_POLL_MAX = 5.0
#: the shortest ``$ENVTOOL_JOB_POLL`` accepted (s): each look runs squeue (and sinfo while the job runs)
JOB_POLL_MIN = 0.2


def job_poll_max() -> float:
    """The longest pause between two looks at a submitted job's state (seconds):
    ``$ENVTOOL_JOB_POLL``, else :data:`JOB_POLL_MAX`. The first look follows 0.5 s after submission
    (or this value, if smaller); each pause is 1.5 times the one before, up to this value.

    Raises:
        UsageError: the variable is not a finite number of seconds >= :data:`JOB_POLL_MIN` (exit 2).
    """
    text = os.environ.get("ENVTOOL_JOB_POLL", "").strip()
    if not text:
        return JOB_POLL_MAX
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (JOB_POLL_MIN <= value < float("inf")):
        raise UsageError(f"ENVTOOL_JOB_POLL: expected a number of seconds >= {JOB_POLL_MIN:g} (the longest pause "
                         f"between two looks at a submitted job), got {text[:50]!r}")
    return value


#: the job state :func:`_wait` returns when it cancelled a job that ran past ``--timeout``
TIMED_OUT = "TIMEOUT (cancelled by envtool)"
#: the job state :func:`_wait` returns when it cancelled a job because a node stopped responding
NODE_LOST = "NODE_NOT_RESPONDING (cancelled by envtool)"


def _wait(sched, job_id: str, progress: Progress, timeout: Optional[float],
          watch: Optional[JobWatch] = None, poll_max: float = JOB_POLL_MAX):
    """Poll until the job is done; cancel it on KeyboardInterrupt/SIGTERM, after ``timeout``
    (state :data:`TIMED_OUT`), or when a node of the job stops responding (state :data:`NODE_LOST`;
    schedulers with ``unresponsive_nodes``), filling in ``watch``. The pause between two polls
    starts at 0.5 s and grows by half each time up to ``poll_max`` seconds (:func:`job_poll_max`)."""
    started = time.monotonic()
    last = None
    interval = min(0.5, poll_max)
    watch = JobWatch() if watch is None else watch
    try:
        while True:
            phase, state, code = sched.state(job_id)
            if (phase, state) != last:
                progress(f"job {job_id} {phase} ({state})")
                last = (phase, state)
            if phase == "running" and hasattr(sched, "unresponsive_nodes"):
                watch.nodes = watch.nodes or sched.job_nodes(job_id)
                lost = sched.unresponsive_nodes(watch.nodes) if watch.nodes else []
                if lost:
                    watch.lost = list(lost)
                    progress(f"job {job_id}: {', '.join(n for n, _ in lost)} stopped responding "
                             f"({', '.join(st for _, st in lost)})")
                    _cancel(sched, job_id, progress)
                    return NODE_LOST, None
            if phase == "done":
                return state, code
            if timeout is not None and time.monotonic() - started > timeout:
                if watch.output is not None:   # what the ranks printed, before scancel adds its own lines
                    try:
                        watch.output_at_timeout = watch.output.read_text(errors="replace")
                    except OSError:
                        pass
                _cancel(sched, job_id, progress)
                return TIMED_OUT, None
            time.sleep(interval)
            interval = min(interval * 1.5, poll_max)
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


def export_reframe(target: Target, nodes: int, ranks_per_node: Optional[int], gpus_per_rank: Optional[int] = None,
                   time_limit: Optional[str] = None, account: Optional[str] = None, queue: Optional[str] = None,
                   output: str = "envtool_validate_rfm.py", settings_path: Optional[str] = None,
                   scheduler: str = "slurm") -> Result:
    """Write the validation as a ReFrame test and the site's ReFrame settings
    (:mod:`envtool.validate.reframe`).

    Args:
        target: the environment and site (a Slurm site).
        nodes, ranks_per_node, gpus_per_rank, time_limit, account, queue: the job, as ``--submit``'s.
        output: the test file (``.py``).
        settings_path: the settings file (default: beside ``output``, ``<stem>_settings.py``).
        scheduler: ReFrame's scheduler, ``slurm`` (sacct) or ``squeue`` (no accounting).
    Returns:
        ``{"ok", "test", "settings", "system", "partition", "scheduler", "layout", "references",
        "command"}`` (``command``: the shell-quoted ``reframe`` line to run).
    Raises:
        UsageError: not a Slurm site, a bad file name, or a file there that envtool did not write.
        SpecError: the site file lacks what the layout needs (names the field).
    """
    from envtool import __version__
    from envtool.core.atomic import write_text_atomic
    from envtool.scheduler.script import setup_lines
    from envtool.spec.names import CONTROL_RE
    from envtool.validate import reframe as rf

    site = target.site
    if site.scheduler != "slurm":
        raise UsageError(f"--export reframe writes ReFrame's Slurm partition (scheduler slurm, launcher srun); site "
                         f"{site.name} ({site.path}) has scheduler {site.scheduler or 'none'}: give a Slurm site "
                         f"with --site or --site-file")
    if scheduler not in rf.SCHEDULERS:
        raise UsageError(f"--reframe-scheduler {scheduler}: expected one of {', '.join(rf.SCHEDULERS)}")
    test = Path(output).absolute()
    if test.suffix != ".py" or not test.stem.isidentifier():
        raise UsageError(f"-o {output}: expected a Python file name (NAME.py, NAME a Python identifier: ReFrame "
                         f"loads it as a module)")
    settings_file = Path(settings_path).absolute() if settings_path else test.with_name(f"{test.stem}_settings.py")
    if settings_file.suffix != ".py" or not settings_file.stem.isidentifier():
        raise UsageError(f"--settings {settings_path}: expected a Python file name (NAME.py)")
    if settings_file == test:
        raise UsageError(f"--settings {settings_path}: the same file as -o {output}")
    for path, mark, opt in ((test, rf.TEST_MARK, "-o"), (settings_file, rf.SETTINGS_MARK, "--settings")):
        if not path.parent.is_dir():
            raise UsageError(f"{opt} {path}: the directory {path.parent} does not exist")
        if path.exists() or path.is_symlink():
            try:
                first = path.read_text(errors="replace")[:len(mark)] if path.is_file() and not path.is_symlink() else ""
            except OSError:
                first = ""
            if first != mark:
                raise UsageError(f"{opt} {path}: the file exists and envtool did not write it; remove it or choose "
                                 f"another name")
    steps = [LaunchStep(tuple(rk.probe_argv(target.python, Path("rank_probe.py"), Path("."), "probe",
                                            _method(target))))]
    req = build_request(target, nodes, steps, ranks_per_node, gpus_per_rank, time_limit, account, queue,
                        "envtool-validate", extra_env=[("PYTHONUNBUFFERED", "1")])
    lay = req.layout
    b = site.batch
    access = []
    if account:
        access.append(f"--account={account}")
    if b.constraint:
        access.append(f"--constraint={b.constraint}")
    q = req.effective_queue
    if q:
        access.append(f"--qos={q}" if b.queue_option == "qos" else f"--partition={q}")
    access += list(b.directives)
    for a in access:
        if CONTROL_RE.search(a):
            raise UsageError(f"{a!r}: a job option holds a control character (newline …)")
    check_build = shlex.join(([target.python, str(target.prefix / "bin" / "horovodrun")] if target.prefix
                              else ["horovodrun"]) + ["--check-build"]) + " > check-build.txt 2>&1 || true"
    refs = {r.name: (r.value, r.lower, r.upper, r.unit) for r in site.references_for(lay.nodes)}
    spec = target.spec
    what = str(target.prefix) if target.prefix else f"module {target.module}"
    exp = rf.ReframeExport(
        system=rf.reframe_name(site.name, "site"), partition=rf.reframe_name(q or "default", "default"),
        descr=f"envtool validation of {what}" + (f" (spec {spec.name})" if spec is not None else "")
              + f" on {lay.nodes} node(s), {lay.ranks} ranks",
        python=target.python, prerun=tuple(setup_lines(req)) + (check_build,), nodes=lay.nodes,
        num_tasks=lay.ranks, num_tasks_per_node=lay.ranks_per_node, scheduler=scheduler, access=tuple(access),
        launcher_options=(f"--mpi={b.mpi}",) if b.mpi else (), num_cpus_per_task=lay.cpus_per_rank,
        num_gpus_per_node=lay.gpus_per_node, time_limit=f"{req.seconds}s" if req.seconds else None,
        probe_args=tuple(rk.probe_argv(target.python, Path("rank_probe.py"), Path("."), "probe",
                                       _method(target))[4:]),
        check_build=rf.check_build_pairs(spec.expect.check_build if spec is not None else None),
        warnings=_expected_warnings(target), references=refs)
    write_text_atomic(test, rf.render_test(exp, __version__, test.name, settings_file.name))
    write_text_atomic(settings_file, rf.render_settings(exp, __version__, test.name, settings_file.name))
    return {"ok": True, "test": str(test), "settings": str(settings_file), "system": exp.system,
            "partition": exp.partition, "scheduler": scheduler,
            "layout": {"nodes": lay.nodes, "ranks": lay.ranks, "ranks_per_node": lay.ranks_per_node},
            "references": {k: list(v) for k, v in refs.items()},
            "command": shlex.join(["reframe", "-C", str(settings_file), "-c", str(test), "-r"])}
