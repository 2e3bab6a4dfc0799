"""``create``: execute a plan in a temporary sibling of the target, then move it into place.

Guarantees (the brief's "nothing is lost"):
* the target appears only after every step, validation included, has passed;
* on any failure, Ctrl-C or SIGTERM the temporary prefix is removed and nothing is left at the
  target (an existing target replaced with ``--force`` is kept until the new one is in place);
* the build log lives in the user cache (``<cache>/logs/``) from the first line, so a failure
  keeps it; on success a copy goes to ``<prefix>/.envtool/create.log``.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict

from envtool.core.errors import EnvtoolError, UsageError
from envtool.core.paths import cache_root
from envtool.spec.model import Spec
from envtool.core.plan import PlanOptions
from envtool.steps.planner import make_plan
from envtool.steps.relocate import move_into_place, note_failure, rewrite_prefix
from envtool.steps.runner import Runner


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


def new_log_path(spec_name: str) -> Path:
    """A fresh log file path under ``<cache>/logs`` (``<spec>-<UTC time>-<pid>.log``)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return cache_root() / "logs" / f"{spec_name}-{stamp}-{os.getpid()}.log"


class _Terminated(BaseException):
    """SIGTERM turned into an exception so that clean-up runs."""


def create(spec: Spec, options: PlanOptions, force: bool = False, verbose: bool = False,
           quiet: bool = False) -> CreateResult:
    """Build the environment for ``spec`` at ``options.prefix``.

    Args:
        spec: the resolved spec.
        options: plan options; ``build_prefix`` is chosen here.
        force: replace an existing target (only once the new one is complete).
        verbose: echo subprocess output.
        quiet: no progress lines.
    Returns:
        a :class:`CreateResult`.
    Raises:
        UsageError: the target exists and ``force`` is false (exit 2).
        EnvtoolError: a step or the validation failed; ``exc.log`` names the build log and
            ``exc.results`` holds what the steps reported (the target is untouched).
        KeyboardInterrupt: interrupted (after clean-up).
    """
    target = Path(os.path.abspath(options.prefix))
    if target.exists() and not force:
        raise UsageError(f"{target} exists; choose another --prefix or pass --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    build = target.parent / f".{target.name}.envtool-build-{os.getpid()}"
    if build.exists():
        shutil.rmtree(build)
    options = replace(options, prefix=target, build_prefix=build)
    plan = make_plan(spec, options)
    log = new_log_path(spec.name)
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):
        raise _Terminated()

    signal.signal(signal.SIGTERM, on_term)
    runner = Runner(log_path=log, verbose=verbose, quiet=quiet)
    try:
        with runner:
            runner.note(f"envtool create {spec.name} ({spec.path}) -> {target}; building in {build}")
            if options.lock_reason:
                runner.note(f"packages: {options.lock_reason}")
                runner.progress(f"packages: {options.lock_reason}")
            runner.run_plan(plan)
            report = rewrite_prefix(build, str(build), str(target))
            runner.note(f"relocated: {len(report.rewritten)} text files rewritten, "
                        f"{len(report.binaries)} binaries embed the build prefix")
            for b in report.binaries:
                runner.note(f"  binary embeds build prefix: {b}")
            meta = build / ".envtool"
            meta.mkdir(exist_ok=True)
            (meta / "create.json").write_text(json.dumps({
                "spec": spec.name, "spec_file": spec.path, "prefix": str(target), "created": time.time(),
                "steps": [s.to_dict() for s in plan.steps], "results": _jsonable(runner.results),
                "timings": runner.timings}, indent=2, default=str) + "\n")
            move_into_place(build, target)
            runner.note(f"environment ready at {target}")
        shutil.copy2(log, target / ".envtool" / "create.log")
        return CreateResult(prefix=target, log=log, results=runner.results, timings=runner.timings,
                            relocation={"rewritten": len(report.rewritten), "binaries": report.binaries})
    except (BaseException) as exc:  # noqa: B902 - clean up on anything, then re-raise
        note_failure(log, exc, build, target)
        if isinstance(exc, _Terminated):
            exc = KeyboardInterrupt("terminated")
        if isinstance(exc, EnvtoolError) or isinstance(exc, KeyboardInterrupt):
            exc.log = log  # type: ignore[attr-defined]
            exc.results = runner.results  # type: ignore[attr-defined]
            raise exc
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))
