"""What ``validate`` found, as dataclasses (``to_dict()`` gives the ``--json`` objects)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from envtool.core.errors import EnvtoolError


def _drop_none(d: Dict[str, Any], keep: tuple = ()) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None or k in keep}


@dataclass
class CheckBuildResult:
    """``horovodrun --check-build`` read and compared with the spec.

    Attributes:
        ok: it answered and (where the spec expects a build) has everything expected.
        error: no or unreadable output, else None.
        found: :meth:`envtool.horovod.checkbuild.CheckBuild.to_dict`, or None.
        controllers: the built controllers' names (``MPI``, ``Gloo``), or None.
        table: the comparison with the spec (text), or None when it expects none.
        missing: ``NAME (section)`` of what is expected but not built, or None.
    """

    ok: bool
    error: Optional[str] = None
    found: Optional[Dict[str, object]] = None
    controllers: Optional[List[str]] = None
    table: Optional[str] = None
    missing: Optional[List[str]] = None

    def problem(self) -> Optional[str]:
        """The problem line when not ok, else None."""
        if self.ok:
            return None
        return "check-build: " + (", ".join(self.missing) + " expected but not built" if self.missing
                                  else str(self.error))

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (absent parts left out)."""
        return _drop_none(dict(ok=self.ok, error=self.error, found=self.found, controllers=self.controllers,
                               table=self.table, missing=self.missing), keep=("ok",))


def read_check_build(spec: Any, text: Optional[str]) -> CheckBuildResult:
    """Parse check-build output and compare it with ``spec.expect.check_build`` (when a spec expects one).

    Args:
        spec: the :class:`envtool.spec.model.Spec`, or None.
        text: what ``horovodrun --check-build`` printed, or None/"" when it printed nothing.
    """
    from envtool.horovod import checkbuild

    if not text:
        return CheckBuildResult(ok=False, error="no horovodrun --check-build output")
    try:
        found = checkbuild.parse(text)
    except EnvtoolError as exc:
        return CheckBuildResult(ok=False, error=str(exc))
    out = CheckBuildResult(ok=True, found=found.to_dict(), controllers=[n for n, ok in found.controllers if ok])
    if spec is not None and spec.expect.check_build is not None:
        comparison = checkbuild.compare(found, spec.expect.check_build)
        out.table = checkbuild.format_table(comparison)
        out.ok = comparison.ok
        out.missing = [f"{r.name} ({r.section.replace('_', ' ')})" for r in comparison.missing]
    return out


@dataclass
class ControllerResult:
    """One check's step of a job (``controllers`` in the result, by its key).

    Attributes:
        phase: the rank probe's phase; check: the check's registry name.
        ranks: the records of its ranks; sweep: the allreduce sweep's rows.
        skipped: why the probe skipped it (the build lacks the controller), or None.
        transport: what carried its traffic (``TCP over eth0``), or None.
        error: why its rendezvous could not start, or None.
        nccl: NCCL's transports (GPU sweeps of the MPI step), logs: the NCCL log files, else None.
    """

    phase: str
    ranks: List[dict] = field(default_factory=list)
    sweep: List[dict] = field(default_factory=list)
    skipped: Optional[str] = None
    transport: Optional[str] = None
    error: Optional[str] = None
    check: Optional[str] = None
    nccl: Optional[Dict[str, Any]] = None
    logs: Optional[List[str]] = None

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form."""
        return _drop_none(dict(phase=self.phase, check=self.check, ranks=self.ranks, sweep=self.sweep,
                               skipped=self.skipped, transport=self.transport, error=self.error, nccl=self.nccl,
                               logs=self.logs), keep=("skipped", "transport"))


@dataclass
class PreflightResult:
    """The pre-flight: ``ok``, per-node ``nodes`` records, ``problems``, ``warnings`` and the PMI
    comparison (``pmi``: plug-in, srun's plug-ins, the MPI build)."""

    ok: bool
    nodes: List[Dict[str, str]] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    pmi: Optional[Dict[str, object]] = None

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form."""
        return dict(ok=self.ok, nodes=self.nodes, problems=self.problems, warnings=self.warnings, pmi=self.pmi)


@dataclass
class Extras:
    """What the CLI adds to either result: the site, the spec, the staged copy, the plot file."""

    site: Optional[str] = None
    spec: Optional[str] = None
    stage: Optional[Dict[str, Any]] = None
    plot: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return _drop_none(dict(site=self.site, spec=self.spec, stage=self.stage, plot=self.plot),
                          keep=("site", "spec"))


@dataclass
class JobResult:
    """``validate --submit``: what the job did and what it found.

    Attributes:
        run_dir, script, output: the run directory, the job script and its output (script and
            output None when nothing was written).
        scheduler: the site's scheduler; layout: ``{"nodes", "ranks", "ranks_per_node"}``.
        job_id, state, exit_status: the job (``job_id`` None without a scheduler); ``state``
            ``not submitted`` when the pre-flight on this host stopped it.
        checks: the validation checks the job ran (names).
        launcher_note: why the ranks start with the scheduler's step launcher, or None.
        launch_note: how the torch.distributed checks started and where that came from
            (``--launch`` or the site file's ``launch.default``), or None.
        preflight, check_build: their results, or None.
        ranks: the records of the site launcher's step; controllers: per check key.
        import_time: :func:`envtool.validate.ranks.import_summary` of those ranks.
        benchmark: :func:`envtool.validate.ranks.scaling`, with ``--benchmark``.
        problems: one line each; ok: none.
    """

    run_dir: Path
    scheduler: str
    layout: Dict[str, Optional[int]]
    script: Optional[Path] = None
    output: Optional[Path] = None
    job_id: Optional[str] = None
    state: Optional[str] = None
    exit_status: Optional[int] = None
    checks: List[str] = field(default_factory=list)
    launcher_note: Optional[str] = None
    launch_note: Optional[str] = None
    preflight: Optional[PreflightResult] = None
    check_build: Optional[CheckBuildResult] = None
    ranks: List[dict] = field(default_factory=list)
    import_time: Optional[Dict[str, Any]] = None
    controllers: Optional[Dict[str, ControllerResult]] = None
    benchmark: Optional[Dict[str, Any]] = None
    problems: List[str] = field(default_factory=list)
    #: what passed but deserves a look (a rank whose MPI_Finalize hung), one line each
    warnings: List[str] = field(default_factory=list)
    #: the check steps the job script ran once more because a rank died of a crash signal inside
    #: ``hvd.init()``: ``{phase, check, ranks: [{rank, host, pid, signal, said}]}`` each
    retries: List[Dict[str, Any]] = field(default_factory=list)
    extras: Extras = field(default_factory=Extras)
    #: the site's published references for the node count, each with its status (``passed``,
    #: ``failed``, ``not measured``, ``not comparable``) and why
    #: (:func:`envtool.steps.validate.references.verdict`)
    references: List[Dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problem."""
        return not self.problems

    @property
    def log(self) -> Optional[str]:
        """The file to read after a failure: the job's output."""
        return str(self.output) if self.output else None

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (the keys of ``validate --submit --json``)."""
        d: Dict[str, Any] = dict(
            run_dir=str(self.run_dir), script=str(self.script) if self.script else None,
            output=str(self.output) if self.output else None, scheduler=self.scheduler, layout=self.layout,
            job_id=self.job_id, state=self.state, exit_status=self.exit_status, checks=self.checks,
            check_build=self.check_build.to_dict() if self.check_build else None, ranks=self.ranks,
            problems=self.problems, warnings=self.warnings, retries=self.retries, ok=self.ok)
        if self.launcher_note:
            d["launcher_note"] = self.launcher_note
        if self.launch_note:
            d["launch_note"] = self.launch_note
        if self.preflight is not None:
            d["preflight"] = self.preflight.to_dict()
        if self.controllers is not None:
            d["import_time"] = self.import_time
            d["controllers"] = {k: c.to_dict() for k, c in self.controllers.items()}
            d["references"] = self.references
        if self.benchmark is not None:
            d["benchmark"] = self.benchmark
        d.update(self.extras.to_dict())
        return d


@dataclass
class HereResult:
    """``validate`` on this machine.

    Attributes:
        run_dir, log: the temporary run directory and its log; None after a passing run (removed).
        check_build: its result; runs: the records per check key (``gloo``, ``mpi``,
            ``tensorflow-gloo``, ``tensorflow-mpi``).
        checks: the validation checks run (names).
        skipped: checks that do not apply, with why (``dataloader`` for a spec without PyTorch).
        import_time: the first run's import summary, or None; benchmark: with ``--benchmark``.
        problems: one line each; ok: none.
    """

    run_dir: Optional[Path]
    log: Optional[Path]
    check_build: Optional[CheckBuildResult] = None
    runs: Dict[str, List[dict]] = field(default_factory=dict)
    checks: List[str] = field(default_factory=list)
    import_time: Optional[Dict[str, Any]] = None
    benchmark: Optional[Dict[str, Any]] = None
    problems: List[str] = field(default_factory=list)
    extras: Extras = field(default_factory=Extras)
    skipped: Dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No problem."""
        return not self.problems

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (the keys of ``validate --json``)."""
        d: Dict[str, Any] = dict(run_dir=str(self.run_dir) if self.run_dir else None,
                                 log=str(self.log) if self.log else None, where="here",
                                 check_build=self.check_build.to_dict() if self.check_build else None,
                                 runs=self.runs, checks=self.checks, import_time=self.import_time,
                                 skipped=self.skipped, problems=self.problems, ok=self.ok)
        if self.benchmark is not None:
            d["benchmark"] = self.benchmark
        d.update(self.extras.to_dict())
        return d
