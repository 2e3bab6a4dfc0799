"""Compose a spec and the user's options into an ordered :class:`Plan`.

Order: load site modules → create (or clone, or install from a lock) → build Horovod →
validate → lock → modulefile. Planning does no I/O beyond reading specs; ``create`` executes
exactly the plan made for its temporary build prefix.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import os
import shlex
from typing import List, Tuple

from envtool.core.errors import EnvtoolError, UsageError
from envtool.engines.registry import engine_for, engines
from envtool.spec.model import Spec
from envtool.steps import from_lock, horovod_build, lock_step, modulefile_step, validate
from envtool.core.plan import Plan, PlanOptions, Step, StepContext, redact


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


def clone_source(spec: Spec, options: PlanOptions) -> Tuple[str, str]:
    """What ``--clone`` copies, and why: the SOURCE given, else the site's base env for the spec
    (``site.base_env``), else ``""`` — the active environment, ``$CONDA_PREFIX`` (the one the site's
    module activates; :func:`envtool.engines.clone.resolve_source`).

    Returns:
        ``(source, reason)``: the source string for the engine and a phrase for people.
    """
    if options.clone:
        return options.clone, "given"
    if spec.site.base_env:
        return spec.site.base_env, f"the base env of site {spec.site.name} for {spec.name}"
    active = os.environ.get("CONDA_PREFIX")
    if active:
        return "", f"the active environment $CONDA_PREFIX={active}"
    return "", "no SOURCE, no site base env and $CONDA_PREFIX unset"


def _layered(spec: Spec, options: PlanOptions) -> bool:
    """Whether the environment sees packages it does not hold: a ``system_site_packages`` venv, or
    a clone of a venv (made as a venv layered over it)."""
    if spec.engine == "venv" and spec.venv.system_site_packages:
        return True
    if options.clone is None:
        return False
    from envtool.engines import clone

    source, _ = clone_source(spec, options)
    try:
        return clone.source_kind(clone.resolve_source(source)) == "venv"
    except (EnvtoolError, OSError):  # a source not on this machine (plan for a site)
        return False


def decide_installer(spec: Spec, options: PlanOptions) -> PlanOptions:
    """``options`` with ``install_with`` decided (:func:`envtool.engines.installer.decide`) when the
    plan may install pip packages and nothing decided it yet; otherwise ``options`` unchanged.

    Raises:
        UsageError: ``--installer`` was given for a plan that installs no pip package (exit 2).

    pip's configuration is read with the base interpreter's pip
    (:func:`envtool.engines.installer.base_python`): the files and ``PIP_*`` variables it reads are
    those the new environment's pip reads (a new environment has no ``pip.conf`` of its own).
    """
    if options.install_with is not None:
        return options
    if not (spec.packages.pip or options.from_lock is not None or spec.horovod.install == "pip-build"):
        if options.installer:
            raise UsageError(f"--installer {options.installer}: spec {spec.name!r} installs no pip packages (no "
                             "packages.pip, no lock, Horovod not built with pip), so there is nothing for an "
                             "installer of pip packages to do; leave --installer out")
        return options
    from envtool.engines.installer import decide, requested

    chosen = decide(requested(options.installer or None), layered=_layered(spec, options))
    return dataclasses.replace(options, install_with=dataclasses.replace(chosen, link=options.link_files))


def make_plan(spec: Spec, options: PlanOptions) -> Plan:
    """The ordered plan for ``spec`` at ``options.prefix``.

    Raises:
        UsageError: an option the spec's engine cannot honour (e.g. ``--clone`` with venv).
        SpecError: a build variable the Horovod version cannot take.
    """
    engine = engine_for(spec.engine, options.engine)
    options = decide_installer(spec, options)
    steps: List[Step] = []
    steps += module_steps(spec)
    loaded = None
    if options.clone is not None:
        source, _ = clone_source(spec, options)
        steps += engine.clone_steps(spec, source, options)
    elif options.from_lock is not None:
        loaded = from_lock.load_checked(spec, options.from_lock)
        steps += from_lock.plan_steps(spec, options, loaded, engine)
    else:
        steps += engine.create_steps(spec, options)
    steps += horovod_build.plan_steps(spec, options, locked=loaded.built("horovod") if loaded else None)
    if loaded is not None:
        steps += from_lock.verify_steps(options, loaded)
    steps += validate.plan_steps(spec, options)
    steps += lock_step.plan_steps(spec, options)
    steps += modulefile_step.plan_steps(spec, options)
    return Plan(spec=spec, options=options, steps=tuple(with_spec_env(spec, s) for s in steps))


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


def with_spec_env(spec: Spec, step: Step) -> Step:
    """``step`` with ``spec.site.env`` and ``spec.env`` added to its env when it installs packages
    (:func:`install_step_ids`); a variable the step sets itself wins. Other steps are returned as is."""
    if step.id not in install_step_ids():
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
    for i, step in enumerate(plan.steps, 1):
        lines.append(f"{i}. [{step.id}] {step.title}")
        if step.env:
            lines.append("   env: " + " ".join(f"{k}={shlex.quote(redact(v))}" for k, v in step.env))
        if step.drop_env:
            lines.append("   unset: " + " ".join(step.drop_env))
        for line in step.shell_lines(with_env=False):
            lines.append(f"   $ {line}")
        for note in step.notes:
            lines.append(f"   note: {note}")
    return "\n".join(lines)
