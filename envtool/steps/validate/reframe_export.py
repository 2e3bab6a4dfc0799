"""``validate --export reframe``: the validation as a ReFrame test and the site's ReFrame settings
(:mod:`envtool.validate.reframe`); nothing runs."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envtool.core.errors import UsageError
from envtool.scheduler.model import LaunchStep
from envtool.steps.jobscript import Target, build_request
from envtool.steps.validate.judge import expected_warnings, frameworks_of, start_method
from envtool.steps.validate.job import JobOptions
from envtool.validate import checks as vc
from envtool.validate import ranks as rk


@dataclass
class ReframeResult:
    """What ``--export reframe`` wrote: the test and settings files, ReFrame's system, partition
    and scheduler, the layout, the site's references and the ``reframe`` line to run (shell-quoted)."""

    test: Path
    settings: Path
    system: str
    partition: str
    scheduler: str
    layout: Dict[str, int]
    references: Dict[str, list]
    command: str
    site: Optional[str] = None
    spec: Optional[str] = None
    launch: Dict[str, Any] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)
    #: the site's published references for the node count left out of the test because their
    #: stack is not the environment's, each with ``why`` (:func:`split_references`)
    not_comparable: List[Dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (the keys of ``validate --export reframe --json``)."""
        return {"ok": True, "test": str(self.test), "settings": str(self.settings), "system": self.system,
                "partition": self.partition, "scheduler": self.scheduler, "layout": self.layout,
                "references": self.references, "not_comparable": self.not_comparable, "command": self.command,
                "site": self.site, "spec": self.spec, "launch": self.launch}


def split_references(target, nodes: int) -> Tuple[list, List[Dict[str, Any]]]:
    """The site's references for ``nodes`` nodes that the ReFrame test carries, and those it does
    not: a published reference (with a stack) whose stack is not the environment's as far as
    validate knows it (:func:`envtool.steps.validate.references.environment_stack`) is not
    comparable, so it is not a bound of the test. Returns ``(carried, [{reference's fields,
    "status": "not comparable", "why": [...]}])``."""
    from envtool.steps.validate import references as published_refs

    env = published_refs.environment_stack(target)
    carried, left = [], []
    for r in target.site.references_for(nodes):
        why = r.differences(env)
        if why:
            left.append(dict(r.to_dict(), status=published_refs.NOT_COMPARABLE, why=why,
                             environment_stack=env.describe(), environment_stack_hash=env.digest()))
        else:
            carried.append(r)
    return carried, left


def launch_of(site) -> Dict[str, Any]:
    """How the ReFrame test starts its ranks, beside the site's default launch (``launch.default``)
    as :func:`envtool.scheduler.ddp.choose` reads it for ``jobscript`` and ``validate --submit``.

    The test carries the rank probe (Horovod's checks), which ``validate --submit`` too starts with
    the launcher whatever the default; the default's DDP launch is for the torch.distributed checks,
    which the test does not carry. Returns ``{"name": "launcher", "site_default": NAME or None,
    "origin": WHERE, "note": WORDS}``.

    Raises:
        SpecError: the site's default is a DDP launch its scheduler cannot write (exit 2, naming
            the file and ``launch.default``), as ``jobscript`` refuses it.
    """
    from envtool.scheduler import ddp, get
    from envtool.scheduler.model import capabilities

    choice = ddp.choose(site, None, capabilities(get(site.scheduler)))
    if choice.ddp:
        note = (f"ranks start with ReFrame's srun launcher (the rank probe's Horovod checks, as validate --submit "
                f"starts them); {choice.origin} is {choice.name}, for the torch.distributed checks, which the "
                f"ReFrame test does not carry: run validate --submit for them")
    else:
        note = f"ranks start with ReFrame's srun launcher; {choice.origin} is {choice.name}"
    return {"name": ddp.LAUNCHER, "site_default": choice.name if choice.from_site else None,
            "origin": choice.origin, "note": note}


def _files(output: str, settings_path: Optional[str]) -> Tuple[Path, Path]:
    """The test and settings paths, refused when they are not Python module names or the same file."""
    test = Path(output).absolute()
    if test.suffix != ".py" or not test.stem.isidentifier():
        raise UsageError(f"-o {output}: expected a Python file name (NAME.py, NAME a Python identifier: ReFrame "
                         f"loads it as a module)")
    settings_file = Path(settings_path).absolute() if settings_path else test.with_name(f"{test.stem}_settings.py")
    if settings_file.suffix != ".py" or not settings_file.stem.isidentifier():
        raise UsageError(f"--settings {settings_path}: expected a Python file name (NAME.py)")
    if settings_file == test:
        raise UsageError(f"--settings {settings_path}: the same file as -o {output}")
    return test, settings_file


def _replaceable(path: Path, mark: str, opt: str) -> None:
    """Refuse a missing directory, or a file there that envtool did not write (its first line differs)."""
    if not path.parent.is_dir():
        raise UsageError(f"{opt} {path}: the directory {path.parent} does not exist")
    if not (path.exists() or path.is_symlink()):
        return
    try:
        first = path.read_text(errors="replace")[:len(mark)] if path.is_file() and not path.is_symlink() else ""
    except OSError:
        first = ""
    if first != mark:
        raise UsageError(f"{opt} {path}: the file exists and envtool did not write it; remove it or choose another name")


def _access(site, account: Optional[str], queue: Optional[str]) -> List[str]:
    """The job options ReFrame's partition passes (account, constraint, QOS or partition, directives)."""
    from envtool.spec.names import CONTROL_RE

    b = site.batch
    access = [f"--account={account}"] if account else []
    if b.constraint:
        access.append(f"--constraint={b.constraint}")
    if queue:
        access.append(f"--qos={queue}" if b.queue_option == "qos" else f"--partition={queue}")
    access += list(b.directives)
    for a in access:
        if CONTROL_RE.search(a):
            raise UsageError(f"{a!r}: a job option holds a control character (newline …)")
    return access


def _export(target: Target, req, access: List[str], scheduler: str):
    """The :class:`envtool.validate.reframe.ReframeExport` of the request."""
    from envtool.scheduler.script import setup_lines
    from envtool.validate import reframe as rf

    lay, b, spec = req.layout, target.site.batch, target.spec
    check_build = shlex.join(([target.python, str(target.prefix / "bin" / "horovodrun")] if target.prefix
                              else ["horovodrun"]) + ["--check-build"]) + " > check-build.txt 2>&1 || true"
    what = str(target.prefix) if target.prefix else f"module {target.module}"
    probe = rk.probe_argv(target.python, Path("rank_probe.py"), Path("."), "probe", start_method(target),
                          framework=vc.benchmark_framework(frameworks_of(target)))
    return rf.ReframeExport(
        system=rf.reframe_name(target.site.name, "site"),
        partition=rf.reframe_name(req.effective_queue or "default", "default"),
        descr=f"envtool validation of {what}" + (f" (spec {spec.name})" if spec is not None else "")
              + f" on {lay.nodes} node(s), {lay.ranks} ranks",
        python=target.python, prerun=tuple(setup_lines(req)) + (check_build,), nodes=lay.nodes,
        num_tasks=lay.ranks, num_tasks_per_node=lay.ranks_per_node, scheduler=scheduler, access=tuple(access),
        launcher_options=(f"--mpi={b.mpi}",) if b.mpi else (), num_cpus_per_task=lay.cpus_per_rank,
        num_gpus_per_node=lay.gpus_per_node, time_limit=f"{req.seconds}s" if req.seconds else None,
        probe_args=tuple(probe[4:]),
        check_build=rf.check_build_pairs(spec.expect.check_build if spec is not None else None),
        warnings=expected_warnings(target),
        references={r.name: (r.value, r.lower, r.upper, r.unit) for r in split_references(target, lay.nodes)[0]})


def export_reframe(target: Target, job: JobOptions, output: str = "envtool_validate_rfm.py",
                   settings_path: Optional[str] = None, scheduler: str = "slurm") -> ReframeResult:
    """Write the validation as a ReFrame test and the site's ReFrame settings.

    Args:
        target: the environment and site (a site whose scheduler is ReFrame's ``slurm``).
        job: the layout and access options, as ``--submit``'s.
        output: the test file (``.py``); settings_path: the settings file (default: beside
            ``output``, ``<stem>_settings.py``).
        scheduler: ReFrame's scheduler, ``slurm`` (sacct) or ``squeue`` (no accounting).
    Raises:
        UsageError: not a Slurm site, a bad file name, or a file there that envtool did not write.
        SpecError: the site file lacks what the layout needs (names the field).
    """
    from envtool import __version__
    from envtool.core.atomic import write_text_atomic
    from envtool.validate import reframe as rf

    site = target.site
    if site.scheduler not in rf.SITE_SCHEDULERS:
        raise UsageError(f"--export reframe writes ReFrame's Slurm partition (scheduler slurm, launcher srun); site "
                         f"{site.name} ({site.path}) has scheduler {site.scheduler or 'none'}: give a Slurm site "
                         f"with --site or --site-file")
    if scheduler not in rf.SCHEDULERS:
        raise UsageError(f"--reframe-scheduler {scheduler}: expected one of {', '.join(rf.SCHEDULERS)}")
    launch = launch_of(site)
    test, settings_file = _files(output, settings_path)
    for path, mark, opt in ((test, rf.TEST_MARK, "-o"), (settings_file, rf.SETTINGS_MARK, "--settings")):
        _replaceable(path, mark, opt)
    steps = [LaunchStep(tuple(rk.probe_argv(target.python, Path("rank_probe.py"), Path("."), "probe",
                                            start_method(target),
                                            framework=vc.benchmark_framework(frameworks_of(target)))))]
    req = build_request(target, job.nodes, steps, job.ranks_per_node, job.gpus_per_rank, job.time_limit, job.account,
                        job.queue, "envtool-validate", extra_env=[("PYTHONUNBUFFERED", "1")])
    exp = _export(target, req, _access(site, job.account, req.effective_queue), scheduler)
    write_text_atomic(test, rf.render_test(exp, __version__, test.name, settings_file.name))
    write_text_atomic(settings_file, rf.render_settings(exp, __version__, test.name, settings_file.name))
    lay = req.layout
    return ReframeResult(test=test, settings=settings_file, system=exp.system, partition=exp.partition,
                         scheduler=scheduler, layout={"nodes": lay.nodes, "ranks": lay.ranks,
                                                      "ranks_per_node": lay.ranks_per_node},
                         references={k: list(v) for k, v in exp.references.items()},
                         command=shlex.join(["reframe", "-C", str(settings_file), "-c", str(test), "-r"]),
                         site=site.name, spec=target.spec.name if target.spec is not None else None,
                         launch=launch, not_comparable=split_references(target, lay.nodes)[1])
