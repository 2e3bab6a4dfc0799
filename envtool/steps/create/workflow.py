"""``create``: execute a plan in a temporary sibling of the target, then move it into place.

Guarantees (the brief's "nothing is lost"): those of :mod:`envtool.steps.kernel.transaction` (lock,
build beside the target, rename, one clean-up path for failures and signals), and
* the build log lives in the user cache (``<cache>/logs/``) from the first line, so a failure
  keeps it; on success a copy goes to ``<prefix>/.envtool/create.log``.
"""
from __future__ import annotations

import json
import sys
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Optional

from envtool.core.errors import EnvtoolError, Interrupted
from envtool.core.paths import cache_root
from envtool.core.targets import check_outside_source
from envtool.spec.model import Spec
from envtool.core.plan import Plan, PlanOptions
from envtool.steps.create.horovod_build import check_system_tools
from envtool.steps.create.planner import make_plan
from envtool.steps.kernel.relocate import RelocationReport, rewrite_prefix
from envtool.steps.kernel.runner import Runner, new_log_path  # noqa: F401 (new_log_path: part of this module's interface)
from envtool.steps.kernel.transaction import BuildTransaction


@dataclass
class CreateResult:
    """What ``create`` did.

    Attributes:
        prefix: the final prefix.
        log: the build log (a copy is also inside the prefix).
        results: per-step results (``validate``, ``build-horovod``).
        timings: seconds per step.
        relocation: text files rewritten and binaries that embed the build prefix.
    """

    prefix: Path
    log: Path
    results: Dict[str, Any] = field(default_factory=dict)
    timings: Dict[str, float] = field(default_factory=dict)
    relocation: Dict[str, Any] = field(default_factory=dict)




def create(spec: Spec, options: PlanOptions, force: bool = False, verbose: bool = False,
           quiet: bool = False) -> CreateResult:
    """Build the environment for ``spec`` at ``options.prefix`` (through :class:`BuildTransaction`).

    Args:
        spec: the resolved spec.
        options: plan options; ``build_prefix`` is chosen here.
        force: replace the environment at the target (only once the new one is complete).
        verbose: echo subprocess output.
        quiet: no progress lines.
    Returns:
        a :class:`CreateResult`.
    Raises:
        TargetExists: the target exists without ``force``, or appeared during the build (exit 2;
            the new environment is then kept beside it, see ``exc.kept``).
        UsageError: the prefix is not a valid path, lies inside the clone source, or ``force``
            would replace what is not an environment (:func:`envtool.core.targets.check_replaceable`);
            the prefix lock is a symlink or another user's, or stays held (exit 2).
        EnvtoolError: a step or the validation failed; ``exc.log`` names the build log,
            ``exc.outcome`` what was left, ``exc.results`` what the steps reported.
        Interrupted: SIGINT/SIGTERM/SIGHUP (after clean-up; exit 130).
    """
    source = _clone_source(spec, options)
    log = new_log_path(spec.name)
    tx = BuildTransaction(options.prefix, force, log, source=source)
    target = tx.target
    runner = Runner(log_path=log, verbose=verbose, quiet=quiet)
    try:
        with tx, runner:
            report = _build(tx, runner, spec, options)
        _note_ready(target, log)
        _register(target, spec.name, quiet)
        return CreateResult(prefix=target, log=log, results=runner.results, timings=runner.timings,
                            relocation={"rewritten": len(report.rewritten), "binaries": report.binaries})
    except (EnvtoolError, Interrupted) as exc:
        if exc.results is None:
            exc.results = runner.results
        raise


def _clone_source(spec: Spec, options: PlanOptions) -> Optional[Path]:
    """The resolved environment a ``--clone`` create builds from (checked not to contain the
    target), or None without ``--clone``.

    Raises:
        UsageError: the source cannot be resolved, or the prefix lies inside it.
    """
    if options.clone is None:
        return None
    from envtool.engines.clone import resolve_source
    from envtool.steps.create.planner import clone_source

    source = resolve_source(clone_source(spec, options)[0])
    check_outside_source(Path(os.path.abspath(options.prefix)), source)
    return source


def _build(tx: BuildTransaction, runner: Runner, spec: Spec, options: PlanOptions) -> RelocationReport:
    """Inside the open transaction ``tx``: plan ``spec`` into ``tx.build``, run the plan, relocate
    the build prefix to the target, write ``.envtool/create.json`` and the log copy, and move the
    build into place (``tx.commit``).

    Returns:
        the relocation report (text files rewritten, binaries that embed the build prefix).
    Raises:
        EnvtoolError: a missing system tool, or a step failed; Interrupted: a signal (``tx`` cleans
            up on the way out).
    """
    target, build = tx.target, tx.build
    options = replace(options, prefix=target, build_prefix=build)
    plan = make_plan(spec, options)
    check_system_tools(plan.steps)
    runner.note(f"envtool create {spec.name} ({spec.path}) -> {target}; building in {build}")
    if options.lock_reason:
        runner.note(f"packages: {options.lock_reason}")
        runner.progress(f"packages: {options.lock_reason}")
    for p in tx.swept:
        runner.note(f"removed stale build directory {p}")
    runner.run_plan(plan)
    if options.clone is not None:
        from envtool.engines.clone_steps import clone_view

        runner.results["clone"] = clone_view(runner.results)
    report = rewrite_prefix(build, str(build), str(target))
    runner.note(f"relocated: {len(report.rewritten)} text files rewritten, "
                f"{len(report.binaries)} binaries embed the build prefix")
    for b in report.binaries:
        runner.note(f"  binary embeds build prefix: {b}")
    _write_record(build, target, spec, plan, runner)
    runner.note(f"moving {build} -> {target}")
    shutil.copy2(runner.log_path, build / ".envtool" / "create.log")
    tx.commit()
    return report


def _write_record(build: Path, target: Path, spec: Spec, plan: Plan, runner: Runner) -> None:
    """Write ``build/.envtool/create.json``: the spec, the final prefix ``target``, the time, the
    plan's steps and what they reported and took (what ``envtool list``/``remove`` take as proof)."""
    meta = build / ".envtool"
    meta.mkdir(exist_ok=True)
    (meta / "create.json").write_text(json.dumps({
        "spec": spec.name, "spec_file": spec.path, "prefix": str(target), "created": time.time(),
        "steps": [s.to_dict() for s in plan.steps], "results": _jsonable(runner.results),
        "timings": runner.timings}, indent=2, default=str) + "\n")


def _note_ready(target: Path, log: Path) -> None:
    """Append the closing line to the prefix's log copy, then to the build log."""
    with open(target / ".envtool" / "create.log", "a", encoding="utf-8") as fh:
        fh.write(f"environment ready at {target}\n")
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"environment ready at {target}\n")


def _register(target: Path, spec_name: str, quiet: bool) -> None:
    """Add ``target`` to the user's registry (:mod:`envtool.core.registry`, what ``envtool list``
    reads); a registry that cannot be written is said on stderr, never a failure of the create."""
    from envtool.core import registry

    try:
        registry.record(target, spec_name)
    except OSError as exc:
        if not quiet:
            print(f"envtool: note: {target} is not in the list of your environments ('envtool list'): cannot "
                  f"write {registry.registry_dir()} ({exc.strerror or exc})", file=sys.stderr)


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))
