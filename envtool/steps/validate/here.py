"""``envtool validate`` on this machine: a plan of typed steps run by the one runner.

Steps: ``check-build`` (``horovodrun --check-build`` compared with the spec), one ``probe-CHECK``
per validation check with a local launch (:func:`envtool.validate.checks.select`; today Horovod's
MPI and Gloo controllers through ``horovodrun``, each run only when the build has that controller:
an allreduce on the CPU, a DataLoader under the spec's start method after Horovod is up), with
``benchmark`` the synthetic training step at 1 rank and N ranks, then ``judge``. The run directory
is temporary: removed after a passing run, kept (with its log) after a failed or interrupted one.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from envtool.core import frameworks
from envtool.core.errors import StepFailed, UsageError
from envtool.core.plan import Step, StepContext
from envtool.steps.jobscript import Target
from envtool.steps.validate.judge import expected_warnings, frameworks_of, start_method
from envtool.steps.validate.results import CheckBuildResult, HereResult, read_check_build
from envtool.validate import checks as vc
from envtool.validate import ranks as rk
from envtool.validate.launches import HereContext, here_phase


@dataclass(frozen=True)
class HereOptions:
    """What ``validate`` (without ``--submit``) was asked for.

    Attributes:
        ranks: ranks of each check and of the benchmark's N-rank point.
        benchmark: also run the scaling benchmark; steps, batch_size: its size.
        timeout: seconds each horovodrun may take.
        import_time: the first check's ranks also count their imports' metadata calls (strace).
        slow_seconds: p99 import seconds above which an import is reported with the staging fix.
    """

    ranks: int = 2
    benchmark: bool = False
    steps: int = 20
    batch_size: int = 32
    timeout: float = 600.0
    import_time: bool = False
    slow_seconds: float = rk.SLOW_IMPORT_SECONDS


@dataclass(frozen=True)
class HerePlan:
    """The steps' payload: the target, the options, the run directory, the rank probe in it and
    the candidate checks (those whose backend check-build lacks are skipped when they come)."""

    target: Target
    options: HereOptions
    prefix: Path
    run_dir: Path
    probe: Path
    checks: Tuple[vc.ValidationCheck, ...]


@dataclass
class HereRun:
    """One check's run: the check, horovodrun's exit status, the ranks' records and the last
    exception line horovodrun printed ("" for none)."""

    check: vc.ValidationCheck
    rc: int
    records: List[dict]
    error: str = ""


def _env(target: Target, prefix: Path) -> Dict[str, str]:
    """The variables the ranks get on top of this process's environment (the Runner adds them to
    it; only these are written to the log, never the inherited ones, which may hold secrets):
    unbuffered output, the prefix's bin first on PATH, the site's and spec's ``env`` and
    search-path entries (as the job script sets them)."""
    env = {"PYTHONUNBUFFERED": "1", "PATH": f"{prefix / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update(dict(target.env))
    for k, op, entry in target.env_paths:  # env: {VAR: {prepend|append: DIR}}, as the job script does
        old = env.get(k, os.environ.get(k))
        env[k] = entry if not old else (f"{entry}{os.pathsep}{old}" if op == "prepend" else f"{old}{os.pathsep}{entry}")
    return env


def _run(runner: StepContext, plan: HerePlan, argv: List[str]) -> Tuple[int, str]:
    """Run one horovodrun (output to the log); its exit status (124 when it ran past the timeout)
    and the last exception line it printed (``ValueError: MPI support has not been built. …``), or ""."""
    import re

    try:
        proc = runner.run(argv, env=_env(plan.target, plan.prefix), timeout=plan.options.timeout,
                          check=False)
    except StepFailed as exc:
        runner.note(f"(failed: {exc})")
        return 124, ""
    errors = re.findall(r"^(?:\[\d+(?:,\d+)?\]<std\w+>:)?(\w+(?:Error|Exception): .+)$", proc.stdout or "", re.M)
    return proc.returncode, (errors[-1].strip()[:300] if errors else "")


def _label(framework: str) -> str:
    """check-build's label of a spec's framework (``TensorFlow``), ``""`` for one it does not know
    (a plug-in's)."""
    return frameworks.get(framework).label if framework in frameworks.NAMES else ""


def check_build(step: Step, runner: StepContext) -> CheckBuildResult:
    """``horovodrun --check-build`` read and compared with the spec."""
    from envtool.validate import probes

    plan: HerePlan = step.data
    try:
        text = probes.check_build_output(plan.prefix)
    except subprocess.TimeoutExpired:
        text = ""
    runner.note(text)
    return read_check_build(plan.target.spec, text)


def run_check(step: Step, runner: StepContext) -> Optional[HereRun]:
    """Run one check's ranks through its local launch; None when the build lacks its backend."""
    plan: HerePlan = step.data[0]
    check: vc.ValidationCheck = step.data[1]
    built = {c.lower() for c in runner.results["check-build"].controllers or []}
    spec = plan.target.spec
    if not built and spec is not None:
        # check-build names no controller when no framework binding of the build imports (it asks the
        # bindings): run what the spec asks for, so each rank says why its binding fails
        built = {c.lower() for c in spec.horovod.controllers}
    if check.backend not in built:
        runner.note(f"{check.name}: the build has no {check.backend} controller; not run")
        return None
    listed = (runner.results["check-build"].found or {}).get("frameworks")
    label = _label(check.framework)
    if spec is None and isinstance(listed, dict) and label and not listed.get(label):
        # no spec says which frameworks Horovod was built for: one installed beside it may not be
        runner.note(f"{check.name}: check-build lists no {label}; not run (no spec asks for it)")
        return None
    first = not any(isinstance(v, HereRun) for v in runner.results.values())
    ctx = HereContext(prefix=plan.prefix, python=plan.target.python, ranks=plan.options.ranks,
                      probe=plan.probe, run_dir=plan.run_dir, method=start_method(plan.target),
                      import_trace=plan.options.import_time and first)
    rc, error = _run(runner, plan, vc.launch_for(check, "here").build(check, ctx))
    return HereRun(check, rc, rk.gather(plan.run_dir, here_phase(check)), error)


def _runs(results: dict) -> List[HereRun]:
    return [v for v in results.values() if isinstance(v, HereRun)]


def benchmark(step: Step, runner: StepContext) -> Optional[Dict[str, List[dict]]]:
    """The training step at 1 rank and N ranks, of the spec's framework
    (:func:`envtool.validate.checks.benchmark_framework`: PyTorch's synthetic CNN step, or the same
    network as a Keras step), with Gloo when it ran for that framework, else the first run's backend."""
    from envtool.scheduler import launcher

    plan: HerePlan = step.data
    runs = _runs(runner.results)
    if not runs:
        return None
    framework = vc.benchmark_framework(frameworks_of(plan.target))
    backends = [r.check.backend for r in runs if r.check.framework == framework] or [r.check.backend for r in runs]
    controller = "gloo" if "gloo" in backends else backends[0]
    points: Dict[str, List[dict]] = {"controller": controller, "framework": framework}  # type: ignore[dict-item]
    for n in (1, plan.options.ranks):
        runner.progress(f"benchmark at {n} rank(s) ...")
        argv = launcher.horovodrun_argv(plan.prefix, n, controller) + rk.probe_argv(
            plan.target.python, plan.probe, plan.run_dir, f"bench-{n}", batch_size=plan.options.batch_size,
            steps=plan.options.steps, framework=framework)
        _run(runner, plan, argv)
        points[str(n)] = rk.gather(plan.run_dir, f"bench-{n}")
    return points


def judge(step: Step, runner: StepContext) -> HereResult:
    """The :class:`HereResult`: check-build, every run's ranks, the benchmark."""
    plan: HerePlan = step.data
    cb: CheckBuildResult = runner.results["check-build"]
    result = HereResult(run_dir=plan.run_dir, log=runner.log_path, check_build=cb)
    if cb.problem():
        result.problems.append(str(cb.problem()))
    warnings = expected_warnings(plan.target)
    for run in _runs(runner.results):
        key = run.check.result_key
        if not result.runs:
            summary = rk.import_summary(run.records, plan.options.slow_seconds)
            if summary is not None:
                summary["controller"] = key
            result.import_time = dict(summary) if summary is not None else None
        result.runs[key] = run.records
        result.checks.append(run.check.name)
        judged = rk.judge(run.records, plan.options.ranks, warnings)
        result.problems += [f"{key}: {p}" for p in judged]
        if run.rc != 0 and not run.records:
            # no rank started: horovodrun itself stopped (it asks the framework bindings which
            # controllers the build has; a binding that does not import leaves it none)
            label = _label(run.check.framework) or run.check.framework
            listed = (cb.found or {}).get("frameworks")
            why = ("" if isinstance(listed, dict) and listed.get(label) else
                   f"; check-build lists no {label}: Horovod's {run.check.binding} does not import here")
            result.problems.insert(len(result.problems) - len(judged),
                                   f"{key}: no {label} rank started: horovodrun exited with {run.rc}"
                                   + (f" ({run.error})" if run.error else "") + why + f" (see {runner.log_path})")
        elif run.rc != 0 and not judged:
            result.problems.append(f"{key}: horovodrun exited with {run.rc} (see {runner.log_path})")
    if not result.runs:
        result.problems.append("Horovod has neither a Gloo nor an MPI controller: nothing to run ranks with")
    skip = vc.dataloader_skipped(frameworks_of(plan.target))
    if skip:
        result.skipped["dataloader"] = skip
    _judge_benchmark(plan, runner.results.get("benchmark"), result)
    return result


def _judge_benchmark(plan: HerePlan, points: Optional[dict], result: HereResult) -> None:
    if not points:
        return
    n = plan.options.ranks
    for k in ("1", str(n)):
        result.problems += [f"benchmark at {k}: {p}" for p in rk.judge(points[k], int(k))]
    scaling = dict(rk.scaling(points["1"], points[str(n)]))
    scaling["controller"] = points["controller"]
    scaling["framework"] = points.get("framework", "pytorch")
    result.benchmark = scaling


def plan_steps(plan: HerePlan) -> List[Step]:
    """``check-build``, one step per candidate check, ``benchmark`` (when asked) and ``judge``."""
    n = plan.options.ranks
    steps = [Step(id="check-build", title="horovodrun --check-build", data=plan, action=check_build,
                  commands=((plan.target.python, str(plan.prefix / "bin" / "horovodrun"),
                             "--check-build"),))]
    steps += [Step(id=f"probe-{c.name}", title=f"{n}-rank probe with the {c.backend} controller ({c.binding})",
                   data=(plan, c), action=run_check) for c in plan.checks]
    if plan.options.benchmark:
        steps.append(Step(id="benchmark", title=f"benchmark at 1 and {n} rank(s)", data=plan, action=benchmark))
    return steps + [Step(id="judge", title="judge the ranks' records", data=plan, action=judge)]


def run_here(target: Target, opts: HereOptions, make_runner: Callable[[Path], object]) -> HereResult:
    """Validate ``target.prefix`` on this machine (see the module docstring).

    Args:
        target: from :func:`envtool.steps.jobscript.resolve_target` (needs a prefix).
        opts: the request.
        make_runner: ``log path -> Runner`` (a context manager), for the log in the run directory.
    Returns:
        the :class:`HereResult`; after a passing run the run directory is removed (``run_dir`` and
        ``log`` None), after a failed one it is kept for its log.
    Raises:
        UsageError: no prefix (a ``--module`` needs ``--submit``), or no horovodrun in it.
    """
    prefix = target.prefix
    if prefix is None:
        raise UsageError("--module needs --submit (the module is loaded in the job); give --prefix to validate here")
    if not (Path(prefix) / "bin" / "horovodrun").exists():
        raise UsageError(f"--prefix {prefix}: no bin/horovodrun (is Horovod installed there?)")
    spec = target.spec
    frameworks = frameworks_of(target)
    run_dir = Path(tempfile.mkdtemp(prefix="envtool-validate-"))
    plan = HerePlan(target=target, options=opts, prefix=Path(prefix), run_dir=run_dir, probe=rk.install_probe(run_dir),
                    checks=tuple(vc.select(vc.Selection(where="here", frameworks=frameworks))))
    steps = plan_steps(plan)
    with make_runner(run_dir / "validate.log") as runner:  # type: ignore[attr-defined]
        for i, step in enumerate(steps, 1):
            runner.run_step(step, i, len(steps))
        result: HereResult = runner.results["judge"]
    if result.ok:  # nothing to read afterwards: the records are in the result
        shutil.rmtree(run_dir, ignore_errors=True)
        result.run_dir = result.log = None
    return result
