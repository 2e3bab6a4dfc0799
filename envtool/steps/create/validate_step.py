"""The ``validate`` step: what the spec expects, checked for real inside the new environment.

* ``horovodrun --check-build`` parsed and compared with ``expect.check_build``;
* a real DataLoader with 2 workers under ``expect.dataloader_start_method``;
* a 2-rank allreduce through ``horovodrun`` for every framework of ``horovod.frameworks`` with a
  probe (PyTorch: ``horovod.torch``; TensorFlow: ``horovod.tensorflow`` and a 2-epoch Keras
  ``model.fit`` whose weights must agree on both ranks) and every controller of
  ``horovod.controllers`` (Gloo, MPI);
* the DataLoader check only where PyTorch is among the frameworks (it is PyTorch's); a spec
  without PyTorch gets ``dataloader_skipped`` naming why;
* importing each framework and its Horovod binding (``torch``, ``horovod.torch``) in one process:
  every warning that prints is reported, and one that ``expect.import_warnings`` does not name
  fails validation (a warning printed once per rank is noise in every job's output).
The step returns its result (the runner records it under ``validate``); a mismatch raises
:class:`CheckFailed` carrying the same result.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from envtool.core import external, frameworks, procs
from envtool.core.errors import CheckFailed, StepFailed
from envtool.core.prefix import PrefixData
from envtool.horovod import checkbuild
from envtool.probes import probe_path
from envtool.spec.model import Spec
from envtool.core.plan import PlanOptions, Step
from envtool.validate import probes
from envtool.validate.checks import dataloader_skipped


def plan_steps(spec: Spec, options: PlanOptions) -> List[Step]:
    """The ``validate`` step, or none when the spec expects nothing."""
    prefix = Path(options.work_prefix)
    commands = []
    notes = []
    expect = spec.expect
    if expect.check_build is not None:
        commands.append(("PYTHONUNBUFFERED=1", str(prefix / "bin" / "horovodrun"), "--check-build"))
        cb = expect.check_build
        notes.append("expect check-build: frameworks " + ", ".join(cb.frameworks or ["-"]) + "; controllers "
                     + ", ".join(cb.controllers or ["-"]) + "; tensor operations "
                     + ", ".join(cb.tensor_operations or ["-"]))
    allreduces = allreduce_runs(spec)
    for framework, controller in allreduces:
        commands.append(tuple(probes.allreduce_command(prefix, 2, controller, framework)))
    if expect.dataloader_start_method and not dataloader_skipped(spec.horovod.frameworks):
        commands.append((str(PrefixData(prefix).python), str(probe_path("dataloader")),
                         expect.dataloader_start_method))
        notes.append(f"a DataLoader with 2 workers must run under start method {expect.dataloader_start_method!r}")
    if not commands:
        return []
    modules = import_modules(spec)
    if modules:
        commands.append((str(PrefixData(prefix).python), str(probe_path("imports")), *modules))
        notes.append("importing " + ", ".join(modules) + " must print no warning"
                     + (" but those matching expect.import_warnings" if spec.expect.import_warnings else ""))
    dataloader = bool(expect.dataloader_start_method and not dataloader_skipped(spec.horovod.frameworks))
    return [Step(id="validate", title="Validate: horovodrun --check-build"
                 + (", DataLoader start method" if dataloader else "")
                 + (", 2-rank allreduce" if allreduces else "") + (", clean imports" if modules else ""),
                 commands=tuple(commands), notes=tuple(notes), action=_run_validate,
                 data=ValidateData(spec=spec, prefix=str(prefix), allreduces=allreduces, imports=tuple(modules)))]


#: The frameworks whose 2-rank allreduce ``create`` runs (those :mod:`envtool.probes.allreduce` has a
#: binding for), and the controllers it runs them with.
ALLREDUCE_FRAMEWORKS = ("pytorch", "tensorflow")
ALLREDUCE_CONTROLLERS = ("gloo", "mpi")


def allreduce_runs(spec: Spec) -> Tuple[Tuple[str, str], ...]:
    """``(framework, controller)`` of every 2-rank allreduce ``create`` runs: each framework of
    ``horovod.frameworks`` the allreduce probe has a binding for, with each controller of
    ``horovod.controllers`` (Gloo, MPI); none when Horovod is not installed or nothing is expected
    of check-build (then nothing says the build has them)."""
    if spec.horovod.install == "none" or spec.expect.check_build is None:
        return ()
    return tuple((f, c) for f in spec.horovod.frameworks if f in ALLREDUCE_FRAMEWORKS
                 for c in ALLREDUCE_CONTROLLERS if c in spec.horovod.controllers)


@dataclass(frozen=True)
class ValidateData:
    """Payload of ``validate``: the spec (its ``expect``), the prefix, the 2-rank allreduces to run
    (``(framework, controller)``, :func:`allreduce_runs`), and the modules to import."""

    spec: Spec
    prefix: str
    allreduces: Tuple[Tuple[str, str], ...]
    imports: Tuple[str, ...]


def import_modules(spec: Spec) -> tuple:
    """The modules whose import validation checks: each of ``horovod.frameworks`` (``torch``) and,
    when Horovod is installed, its binding (``horovod.torch``; for TensorFlow also
    ``horovod.tensorflow.keras``, as the ranks import them), in that order."""
    out = []
    for name in spec.horovod.frameworks:
        try:
            fw = frameworks.get(name)
        except KeyError:
            continue
        out.append(fw.module)
        if spec.horovod.install != "none":
            out.append(fw.binding)
            if fw.name == "tensorflow":  # what validation's ranks import too (the Keras check)
                out.append("horovod.tensorflow.keras")
    return tuple(out)


def _check_build(prefix: Path):
    try:
        return probes.check_build_output(prefix), None
    except FileNotFoundError as exc:
        return None, f"no horovodrun in the environment ({exc})"
    except subprocess.TimeoutExpired:
        return None, "horovodrun --check-build did not answer in time"


def _allreduce(prefix: Path, framework: str = "pytorch", controller: str = "gloo"):
    """Run one 2-rank allreduce; ``(ok, output)``."""
    argv = probes.allreduce_command(prefix, 2, controller, framework)
    env = dict(os.environ, PYTHONUNBUFFERED="1", PATH=f"{prefix / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    try:
        proc = external.run(argv, timeout=300, env=env, preexec_fn=procs.die_with_parent)
    except subprocess.TimeoutExpired as exc:
        said = external.decode(exc.stdout)  # bytes (https://docs.python.org/3/library/subprocess.html#subprocess.TimeoutExpired)
        return False, f"timed out after 300 s: {said}"
    output = proc.stdout + proc.stderr
    return proc.returncode == 0 and probes.parse_allreduce(proc.stdout, 2), output


def _say_each_probe(runner, names: Dict[Any, str]) -> None:
    """Progress of the concurrent probes (together 10-15 s on 2 cores): which run, then each as it
    finishes with its time (the verdicts follow once all are in).

    Args:
        runner: the step runner (its ``progress`` lines go to stderr unless quiet).
        names: future → what it probes (None keys, probes not run, are left out).
    """
    import time
    from concurrent.futures import as_completed

    running = {f: n for f, n in names.items() if f is not None}
    if not running:
        return
    started = time.monotonic()
    runner.progress("      running " + ", ".join(running.values()) + " (concurrently)")
    for future in as_completed(running):
        runner.progress(f"      {running[future]} finished ({time.monotonic() - started:.1f} s)")


def _judge_check_build(step: Step, runner, cb_future, expected, result: dict, problems: List[str]) -> None:
    text, error = cb_future.result()
    if error:
        raise StepFailed(step.id, error, runner.log_path)
    runner.note("horovodrun --check-build output:\n" + text)
    try:
        found = checkbuild.parse(text)
    except checkbuild.CheckBuildParseError as exc:
        raise StepFailed(step.id, str(exc), runner.log_path) from None
    comparison = checkbuild.compare(found, expected)
    result["check_build"] = {"found": found.to_dict(), "comparison": comparison.to_dict()}
    result["table"] = checkbuild.format_table(comparison)
    if not comparison.ok:
        problems.append("horovodrun --check-build lacks " + ", ".join(
            f"{r.name} ({r.section.replace('_', ' ')})" for r in comparison.missing))


def _judge_allreduce(runner, ar_futures, result: dict, problems: List[str]) -> None:
    """Each 2-rank allreduce's verdict into ``result["allreduces"]`` (``result["allreduce"]``: the
    first, as before TensorFlow had one); a failure names the framework and the controller, and the
    rank when a rank said why."""
    runs = []
    for (framework, controller), future in ar_futures.items():
        ok, output = future.result()
        label = frameworks.get(framework).label
        runner.note(f"2-rank {label} allreduce ({controller}) output:\n" + output)
        entry: Dict[str, Any] = {"ranks": 2, "framework": framework, "controller": controller, "ok": ok}
        keras = probes.parse_keras(output)
        if keras:
            entry["keras_fit"] = keras
        runs.append(entry)
        if not ok:
            why = probes.allreduce_failure(output)
            problems.append(f"the 2-rank {label} allreduce with {controller} (binding "
                            f"{frameworks.get(framework).binding}) failed" + (f": {why}" if why else "")
                            + f"; see {runner.log_path}")
    result["allreduces"] = runs
    if runs:
        result["allreduce"] = runs[0]


def _judge_dataloader(runner, dl_future, method, result: dict, problems: List[str]) -> None:
    dl = dl_future.result()
    runner.note(f"DataLoader probe: {dl}")
    result["dataloader"] = dl.to_dict()
    if not dl.ok:
        problems.append(f"DataLoader with start method {method!r} failed: {dl.error}")


def _judge_imports(runner, im_future, spec: Spec, modules, result: dict, problems: List[str]) -> None:
    imported, error = im_future.result()
    if error:
        problems.append(f"importing {', '.join(modules)} gave no answer: {error}")
        return
    unexpected = probes.unexpected_warnings(imported, spec.expect.import_warnings)
    result["imports"] = {"modules": [r.to_dict() for r in imported],
                         "unexpected": [{"module": m, "warning": w} for m, w in unexpected]}
    for r in imported:
        runner.note(f"import {r.module}: " + ("ok" if r.ok else f"FAILED ({r.error})") + f", {r.seconds:.2f} s"
                    + "".join(f"\n  printed: {line}" for line in r.printed()))
    failed = [r for r in imported if not r.ok]
    if failed:
        problems.append("; ".join(f"import {r.module} failed: {r.error}" for r in failed))
    for m, w in unexpected:
        problems.append(f"import {m} printed a warning the spec does not expect: {w} "
                        "(fix its cause, or accept it with a pattern under expect.import_warnings)")


def _run_validate(step: Step, runner) -> dict:
    """Run the probes concurrently (each is its own subprocess), then judge them in order."""
    from concurrent.futures import ThreadPoolExecutor

    d: ValidateData = step.data
    spec: Spec = d.spec
    prefix = Path(d.prefix)
    result: Dict[str, Any] = {"ok": True}   # the step's result, a JSON object (create --json)
    problems: List[str] = []
    method = spec.expect.dataloader_start_method
    skip = dataloader_skipped(spec.horovod.frameworks)
    if skip:
        result["dataloader_skipped"] = skip
        method = None
    expected = spec.expect.check_build
    modules = d.imports
    with ThreadPoolExecutor(max_workers=4) as pool:
        python = PrefixData(prefix).python
        im_future = pool.submit(probes.import_modules, python, modules) if modules else None
        cb_future = pool.submit(_check_build, prefix) if expected is not None else None
        ar_futures = {run: pool.submit(_allreduce, prefix, *run) for run in d.allreduces}
        dl_future = pool.submit(probes.dataloader, python, method) if method else None
        said: Dict[Any, str] = {cb_future: "horovodrun --check-build", dl_future: f"DataLoader ({method})",
                                im_future: "clean imports"}
        said.update({f: f"2-rank {frameworks.get(fw).label} allreduce ({c})" for (fw, c), f in ar_futures.items()})
        _say_each_probe(runner, said)
    if cb_future is not None and expected is not None:
        _judge_check_build(step, runner, cb_future, expected, result, problems)
    if ar_futures:
        _judge_allreduce(runner, ar_futures, result, problems)
    if dl_future is not None:
        _judge_dataloader(runner, dl_future, method, result, problems)
    if im_future is not None:
        _judge_imports(runner, im_future, spec, modules, result, problems)
    result["ok"] = not problems
    result["problems"] = problems
    if problems:
        raise CheckFailed("validation failed: " + "; ".join(problems), step_result=result)
    return result


def format_report(result: dict) -> str:
    """The validation table printed by ``create`` (check-build rows, allreduce, DataLoader)."""
    lines = []
    if "table" in result:
        lines.append(result["table"])
    for a in result.get("allreduces") or ():
        name = f"2-rank {frameworks.get(a['framework']).label} allreduce ({a['controller']})"
        lines.append(f"{name:<28}{'ok':<11}{'ok' if a['ok'] else 'FAILED'}")
        if "keras_fit" in a:
            ok = bool(a["keras_fit"]) and all(k.get("ok") for k in a["keras_fit"])
            lines.append(f"{'  Keras fit, weights agree':<28}{'yes':<11}{'ok' if ok else 'FAILED'}")
    if "dataloader_skipped" in result:
        lines.append(f"{'DataLoader start method':<28}{'-':<11}skipped: {result['dataloader_skipped']}")
    if "dataloader" in result:
        d = result["dataloader"]
        status = "ok" if d["ok"] else f"FAILED: {d['error']}"
        lines.append(f"{'DataLoader start method':<28}{d['method']:<11}{status}")
    if "imports" in result:
        imp = result["imports"]
        names = ", ".join(m["module"] for m in imp["modules"])
        printed = sum(len(m["warnings"]) + len([ln for ln in m["stderr"].splitlines() if ln.strip()])
                      for m in imp["modules"])
        status = "ok" if not imp["unexpected"] else f"FAILED: {len(imp['unexpected'])} unexpected warning(s)"
        lines.append(f"{'import ' + names:<28}{'no warning':<11}{status}"
                     + (f" ({printed} expected warning(s))" if printed and not imp["unexpected"] else ""))
    return "\n".join(lines)
