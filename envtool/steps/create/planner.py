"""Compose a spec and the user's options into an ordered :class:`Plan`.

Order: load site modules → create (or clone, or install from a lock) → build Horovod →
validate → lock → modulefile. The machine is probed once, up front (:func:`envtool.steps.kernel.machine.probe`);
composing the steps reads that value and does no other I/O beyond reading specs and the lock.
``create`` executes exactly the plan made for its temporary build prefix.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import os
import shlex
from typing import List, Optional, Tuple

from envtool.checks import gpu as gpu_check
from envtool.core import external, gpu_gates
from envtool.engines.registry import engine_for, engines
from envtool.spec.model import Spec
from envtool.steps.create import validate_step as validate
from envtool.steps.create import from_lock
from envtool.steps.create import horovod_build
from envtool.steps.create import lock_step
from envtool.steps.kernel import machine
from envtool.steps.create import modulefile_step
from envtool.steps.kernel.machine import clone_source, decide_installer  # noqa: F401  (part of this module's interface)
from envtool.core.plan import Plan, PlanOptions, Step, StepContext, format_steps, redact  # noqa: F401 (format_steps: part of this module's interface)


def module_steps(spec: Spec) -> List[Step]:
    """Load the site's modules (Lmod) into envtool's own environment, so every later step sees them."""
    if not spec.site.modules:
        return []
    return [Step(id="load-modules", title="Load site modules: " + " ".join(spec.site.modules),
                 commands=(("module", "load", *spec.site.modules),),
                 notes=("applied to envtool's environment with `$LMOD_CMD python load …`",),
                 action=_load_modules, data=ModulesData(tuple(spec.site.modules)))]


@dataclass(frozen=True)
class ModulesData:
    """Payload of ``load-modules``: the site's modules, in load order."""

    modules: Tuple[str, ...]


def _load_modules(step: Step, runner: StepContext) -> None:
    from envtool.core.errors import StepFailed

    lmod = os.environ.get("LMOD_CMD")
    if not lmod:
        raise StepFailed(step.id, "the spec needs site modules (" + " ".join(step.data.modules) +
                         ") but Lmod is not initialised here ($LMOD_CMD is unset)", runner.log_path)
    proc = runner.run([lmod, "python", "load", *step.data.modules])
    exec(compile(proc.stdout, "<lmod>", "exec"), {"os": os})  # Lmod's own output for Python


def check_site_modules(spec: Spec, environ=None) -> None:
    """Before ``create`` does any work: the spec's site modules must be loadable here.

    Lmod is asked to load them all, in order, in a child process whose output is discarded
    (``$LMOD_CMD python load M1 M2 …``: Lmod prints the code a shell would run and exits 1 when a
    module is unknown; https://lmod.readthedocs.io/en/latest/010_user.html). In order, so that a
    module that a hierarchy shows only after an earlier one is loaded (a compiler, then its MPI) is
    found as the ``load-modules`` step would find it. A spec for another site stops at once with
    Lmod's first error paragraph as the cause, not after Lmod's boilerplate.

    Args:
        spec: the resolved spec (``spec.site.modules``, ``spec.site.name``).
        environ: the environment to read ``LMOD_CMD`` and ``MODULEPATH`` from (default ``os.environ``).
    Raises:
        UsageError: Lmod is not initialised, or it knows none of some module (exit 2), naming the
            modules, the spec's site and the site detected on this machine, with what to do.
    """
    import subprocess

    from envtool.core.errors import UsageError
    from envtool.spec import sites

    mods = tuple(spec.site.modules)
    if not mods:
        return
    env = dict(os.environ if environ is None else environ)
    lmod = env.get("LMOD_CMD")
    said = ""
    if lmod:
        try:
            proc = external.run([lmod, "python", "load", *mods], env=env, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"$LMOD_CMD {lmod}: cannot ask Lmod to load {' '.join(mods)} ({exc})") from None
        if proc.returncode == 0:
            return
        said = _lmod_error(proc.stderr) or f"exit {proc.returncode}"
    found = sites.detect(env)
    here = f"this machine is detected as site {found.name} ({found.reason})" if found is not None \
        else "this machine is not detected as any site"
    cause = (f"Lmod says: {said}" if lmod else "Lmod is not initialised here ($LMOD_CMD is unset)")
    mine = found.name if found is not None else "local"
    raise UsageError(
        f"spec {spec.name} is for site {spec.site.name or '?'} and loads its modules {' '.join(mods)}; {cause}; "
        f"{here}. Nothing was done. Run create on {spec.site.name or 'that site'}, pick a spec for this machine "
        f"(envtool specs --site {shlex.quote(mine)}), or see the steps without running them "
        f"(envtool plan {shlex.quote(spec.name)})")


def _lmod_error(stderr: str, limit: int = 400) -> str:
    """Lmod's error paragraph (``The following module(s) are unknown: "cudnn/8.7.0"``) on one line,
    without its advice boilerplate; ``""`` when there is none. At most ``limit`` characters."""
    text = stderr.replace("\r", "")
    at = text.find("Lmod has detected the following error:")
    if at < 0:
        return ""
    para = text[at + len("Lmod has detected the following error:"):].strip().split("\n\n", 1)[0]
    return " ".join(para.split())[:limit]


def make_plan(spec: Spec, options: PlanOptions) -> Plan:
    """The ordered plan for ``spec`` at ``options.prefix``.

    Raises:
        UsageError: an option the spec's engine cannot honour (e.g. ``--clone`` with venv).
        SpecError: a build variable the Horovod version cannot take.
    """
    gpu = gpu_check.plan_report(spec)  # a driver too old, MIG, a known-bad stack: refused before anything runs
    refuse_gpu(spec, gpu)
    engine = engine_for(spec.engine, options.engine)  # resolved once; every step below gets this one
    options = machine.probe(spec, options, engine)  # the one look at the machine; what follows reads values
    steps: List[Step] = []
    steps += module_steps(spec)
    loaded = None
    if options.clone is not None:
        source, _ = clone_source(spec, options)
        steps += engine.clone_steps(spec, source, options)
    elif options.from_lock is not None:
        assert options.machine is not None  # probe() set it
        loaded = from_lock.load_checked(spec, options.from_lock, interpreter=options.machine.lock_interpreter)
        steps += from_lock.plan_steps(spec, options, loaded, engine)
    else:
        steps += engine.create_steps(spec, options)
    steps += horovod_build.plan_steps(spec, options, locked=loaded.built("horovod") if loaded else None, loaded=loaded)
    if loaded is not None:
        steps += from_lock.verify_steps(options, loaded)
    steps += validate.plan_steps(spec, options)
    steps += lock_step.plan_steps(spec, options)
    steps += modulefile_step.plan_steps(spec, options)
    ids = install_step_ids()
    return Plan(spec=spec, options=options, steps=tuple(with_spec_env(spec, s, ids) for s in steps), gpu=gpu)


def refuse_gpu(spec: Spec, report: "gpu_gates.GpuReport") -> None:
    """Stop ``plan`` and ``create`` when a GPU gate failed or a known-bad communication stack matched
    (:func:`envtool.core.gpu_gates.plan_report`).

    Raises:
        UsageError: naming each failed gate and matched rule with its source and fix (exit 2).
    """
    problems = report.problems()
    if not problems:
        return
    from envtool.core.errors import UsageError

    where = f"site {spec.site.name}'s gpu section ({spec.site.gpu.source}, {spec.site.gpu.date})" \
        if spec.site.gpu is not None else f"site {spec.site.name}"
    raise UsageError(f"spec {spec.name} cannot run as planned on {where}:\n"
                     + "".join(f"  - {p}\n    fix: {f}\n" for p, f in problems)
                     + "Nothing was done. If the site changed, update its site file's gpu section.")


def install_step_ids() -> frozenset:
    """Ids of the steps that install packages: what every registered engine declares
    (:attr:`Engine.install_step_ids <envtool.engines.base.Engine.install_step_ids>`) plus the lock's
    ``install-locked-pip``. The spec's (and its site's) ``env`` applies to them, because package
    scripts read it — WML-CE's post-link scripts refuse to run without
    ``IBM_POWERAI_LICENSE_ACCEPT=yes`` (docs/reference/stacks.md, IBM WML-CE 1.6 docs)."""
    out = {from_lock.LOCKED_PIP_STEP}
    for engine in engines():
        out |= engine.install_step_ids
    return frozenset(out)


def with_spec_env(spec: Spec, step: Step, ids: Optional[frozenset] = None) -> Step:
    """``step`` with ``spec.site.env`` and ``spec.env`` added to its env when it installs packages
    (``ids``, default :func:`install_step_ids`); a variable the step sets itself wins. Other steps
    are returned as is."""
    if step.id not in (install_step_ids() if ids is None else ids):
        return step
    merged = dict(spec.site.env)
    merged.update(spec.env)
    merged.update(step.env)
    if not merged or merged == dict(step.env):
        return step
    return dataclasses.replace(step, env=tuple(merged.items()))


def format_plan(plan: Plan) -> str:
    """Human-readable plan: numbered steps, their exact commands, environment and notes."""
    spec = plan.spec
    lines = [f"Plan for {spec.name} ({spec.path}) -> {plan.options.prefix}",
             f"engine: {plan.options.engine or spec.engine}; site: {plan.options.site or spec.site.name}; "
             f"platforms: {', '.join(spec.platforms)}"]
    if plan.options.clone is not None:
        source, why = clone_source(spec, plan.options)
        lines.append(f"clone source: {source or '$CONDA_PREFIX'} ({why})")
    if plan.options.lock_reason:
        lines.append(f"packages: {plan.options.lock_reason}")
    if plan.options.install_with is not None:
        lines.append(f"installer: {redact(plan.options.install_with.reason)}")
    if plan.gpu is not None and not plan.gpu.skipped:
        lines += plan.gpu.lines()
    lines += format_steps(plan.steps)
    return "\n".join(lines)


