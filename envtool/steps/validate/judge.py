"""Judge what a ``validate --submit`` job left: the pre-flight, check-build, each check's ranks and
sweep, the NCCL transport, the benchmark, lost nodes and timeouts (one problem line each)."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envtool.scheduler.model import capabilities
from envtool.steps.validate import references as published_refs
from envtool.steps.validate import watch as wt
from envtool.steps.validate.results import ControllerResult, JobResult, PreflightResult, read_check_build
from envtool.validate import ranks as rk
from envtool.validate import sweep


def start_method(target) -> Optional[str]:
    """The spec's ``expect.dataloader_start_method``, or None."""
    return target.spec.expect.dataloader_start_method if target.spec is not None else None


def frameworks_of(target) -> Tuple[str, ...]:
    """The frameworks whose checks validation selects: the spec's ``horovod.frameworks``; without a
    spec (or one naming none), those installed in the prefix (its pip distributions and conda
    records, by :data:`envtool.core.frameworks.FRAMEWORKS`' package names), in check-build order;
    ``("pytorch",)`` when neither says (a module validated in a job, an empty prefix)."""
    from envtool.core import frameworks
    from envtool.core.prefix import PrefixData

    spec = getattr(target, "spec", None)
    if spec is not None and spec.horovod.frameworks:
        return tuple(spec.horovod.frameworks)
    found = set()
    prefix = getattr(target, "prefix", None)
    if prefix is not None:
        pd = PrefixData(Path(prefix))
        names = [d.name for d in pd.distributions] + [str(r.get("name")) for r in pd.conda_record_dicts]
        found = {fw.name for fw in (frameworks.by_package(n.lower()) for n in names) if fw is not None}
    return tuple(n for n in frameworks.NAMES if n in found) or ("pytorch",)


def _benchmark_framework(target) -> str:
    from envtool.validate import checks as vc

    return vc.benchmark_framework(frameworks_of(target))


def expected_warnings(target) -> tuple:
    """The spec's ``expect.import_warnings`` (patterns of accepted import warnings), or ()."""
    spec = getattr(target, "spec", None)
    return tuple(spec.expect.import_warnings) if spec is not None else ()


def lock_of(target) -> Optional[str]:
    """The lockfile sha256 every node must see: the pack's for a staged environment (the source's
    lock, carried in the pack), else the prefix's as this host sees it."""
    from envtool.validate import preflight as pf

    if target.stage is not None:
        return target.stage.lock_sha256 or None
    return pf.lock_sha256(target.prefix)


def pmi_dict(res) -> Dict[str, object]:
    """The PMI comparison (:class:`envtool.validate.pmi.PmiResult`) for ``--json``."""
    mpi = res.mpi
    return {"plugin": res.plugin, "srun_plugins": list(res.srun_plugins),
            "mpi": {"name": mpi.name, "speaks": list(mpi.speaks), "source": mpi.source} if mpi else None}


def stage_failed(stage, output: Path) -> str:
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


def lost_nodes(sched, job_id, watch: wt.JobWatch, run_dir: Path, script: Path) -> List[str]:
    """Problems naming the nodes of the job whose daemon stopped responding, or where the launcher
    could not start a step (from the job output), each with a fix line; [] for schedulers that do
    not name nodes."""
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


def last_lines(text: Optional[str], path: Path, ranks: int) -> str:
    """``rank R: 'LINE'`` for each rank (the last line the launcher labelled with its task number),
    from ``text`` (the output when the job was cancelled) or else the file at ``path``."""
    if text is None:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            text = ""
    last = rk.last_lines(text)
    return "; ".join(f"rank {r}: {last[r]!r}" if r in last else f"rank {r}: printed nothing" for r in range(ranks))


def named_causes(text: Optional[str], path: Path, shm_free: Optional[float] = None) -> List[str]:
    """The causes the job output names (:func:`envtool.validate.ranks.failure_causes`: node, rank and
    cause), from ``text`` (the output when the job was cancelled) or else the file at ``path``, read
    as bytes and decoded by :func:`envtool.core.external.decode`."""
    from envtool.core import external

    if text is None:
        try:
            text = external.decode(path.read_bytes())
        except OSError:
            text = ""
    return rk.failure_causes(text, shm_free)


def shm_free_mib(got) -> Optional[float]:
    """The least free MiB on ``/dev/shm`` the pre-flight's nodes reported (``shm_free_kib``), or None."""
    from envtool.core import external

    kib = [external.small_int(n.get("shm_free_kib")) for n in (getattr(got, "preflight", None) or [])
           if isinstance(n, dict)]
    free = [k / 1024 for k in kib if k is not None and k >= 0]
    return min(free) if free else None


def _controller_name(plan) -> str:
    """The main step's check (its controller: ``horovod-mpi``, ``torch-gloo``…), or ``probe``."""
    return str(plan.checks[0].name) if plan.checks else "probe"


def _main_phase(plan) -> str:
    return plan.checks[0].phase if plan.checks else "probe"


def _preflight(plan, ended, pmi_result, got, result: JobResult) -> bool:
    """Judge the pre-flight into ``result``; True when nothing more is to be judged (the
    pre-flight alone, or it stopped the job before the main step)."""
    from envtool.validate import preflight as pf

    target, opts = plan.target, plan.options
    warnings: List[str] = list(pmi_result.notes) if pmi_result else []
    problems = list(pmi_result.problems) if pmi_result else []
    problems += pf.judge(got.preflight, plan.layout.nodes, target.prefix, lock_of(target),
                         site_path=target.site.path, run_dir=plan.run_dir, warnings=warnings,
                         site_gpu=getattr(target.site, "gpu", None), ranks_per_node=plan.layout.ranks_per_node)
    if target.stage is not None and len(got.preflight) < plan.layout.nodes:
        problems.insert(0, stage_failed(target.stage, plan.run_dir / "job.out"))
    result.preflight = PreflightResult(ok=not problems, nodes=got.preflight, problems=problems, warnings=warnings,
                                       pmi=pmi_dict(pmi_result) if pmi_result else None)
    main_ran = bool(got.records.get(_main_phase(plan)))
    if problems:
        result.problems += problems
        if not opts.preflight_only and not main_ran:
            result.problems.append("the main step did not run: the pre-flight stopped the job")
    elif opts.preflight_only and ended.state not in wt.DONE_STATES:
        result.problems.append(f"the pre-flight job ended {ended.state} (exit status {ended.code}); see "
                               f"{plan.run_dir / 'job.out'}")
    return opts.preflight_only or bool(problems and not main_ran)


def _ranks(plan, got, result: JobResult) -> None:
    """check-build, the main step's ranks and their import times, into ``result``."""
    target = plan.target
    result.check_build = read_check_build(target.spec, got.check_build)
    if result.check_build.problem():
        result.problems.append(str(result.check_build.problem()))
    if not plan.checks:
        frameworks = ", ".join(target.spec.horovod.frameworks) if target.spec is not None else "any"
        result.problems.append(f"no validation check fits this spec's frameworks ({frameworks}) on site "
                               f"{target.site.name}: no ranks were run")
        return
    recs = got.records.get(_main_phase(plan), [])
    result.ranks = recs
    summary = rk.import_summary(recs, plan.options.slow_seconds)
    result.import_time = dict(summary) if summary is not None else None
    result.problems += rk.judge(recs, plan.layout.ranks, expected_warnings(target))
    result.warnings += rk.shutdown_warnings(recs)
    if any(": no result" in p for p in result.problems):
        named = named_causes(None, plan.run_dir / "job.out", shm_free_mib(got))
        if named:
            result.problems.append(f"{_controller_name(plan)}: the job output names: " + "; ".join(named))
        said = rk.errors_in_output(plan.run_dir / "job.out")
        if said:
            result.problems.append("the job output says: " + " | ".join(said))


def job(plan, ended, pmi_result, got) -> JobResult:
    """The :class:`JobResult` of a finished job.

    Args:
        plan: the :class:`~envtool.steps.validate.job.JobPlan`.
        ended: how the job ended (``job_id``, ``state``, ``code``, ``watch``).
        pmi_result: the pre-flight's PMI comparison on this host, or None.
        got: what the ranks wrote (:class:`~envtool.steps.validate.job_actions.Collected`).
    """
    lay, run_dir = plan.layout, plan.run_dir
    result = JobResult(run_dir=run_dir, scheduler=plan.sched.NAME, script=plan.script, output=run_dir / "job.out",
                       layout={"nodes": lay.nodes, "ranks": lay.ranks, "ranks_per_node": lay.ranks_per_node},
                       job_id=ended.job_id, state=ended.state, exit_status=ended.code,
                       checks=[c.name for c in plan.checks], launcher_note=plan.launcher_note,
                       launch_note=plan.launch_note)
    result.problems = lost_nodes(plan.sched, ended.job_id, ended.watch, run_dir, plan.script)
    result.retries = retries(plan)
    result.warnings += [retry_line(r) for r in result.retries]
    if ended.state == wt.TIMED_OUT:
        said = named_causes(ended.watch.output_at_timeout, run_dir / "job.out", shm_free_mib(got))
        result.problems.append(f"job {ended.job_id} did not finish within {plan.timeout:.0f} s; it was "
                               f"cancelled; the last line each rank printed: "
                               f"{last_lines(ended.watch.output_at_timeout, run_dir / 'job.out', lay.ranks)}"
                               + (f"; the output names ({_controller_name(plan)}): {'; '.join(said)}"
                                  if said else ""))
    if plan.with_preflight and _preflight(plan, ended, pmi_result, got, result):
        return result
    if ended.state == wt.NODE_LOST:  # what the ranks left is a consequence: name the node, not every rank
        result.ranks = got.records.get(_main_phase(plan), [])
        if not result.problems:
            result.problems.append(f"job {ended.job_id}: a node stopped responding; it was cancelled")
        return result
    _ranks(plan, got, result)
    result.controllers = controllers(plan, got, result.problems)
    result.references = reference_verdicts(plan, result.controllers, result.problems)
    if plan.options.benchmark and got.bench is not None:
        one, many = got.bench
        if not result.problems:
            result.problems += [f"benchmark at 1: {p}" for p in rk.judge(one, 1)]
            result.problems += [f"benchmark at {lay.ranks}: {p}" for p in rk.judge(many, lay.ranks)]
        result.benchmark = dict(rk.scaling(one, many))
        result.benchmark["framework"] = _benchmark_framework(plan.target)
    if ended.state not in wt.DONE_STATES and not result.problems:
        result.problems.append(f"the job ended {ended.state} (exit status {ended.code}); see {run_dir / 'job.out'}")
    return result


def retries(plan) -> List[Dict[str, Any]]:
    """The check steps the job script ran a second time (``RUN_DIR/retried/PHASE.json``, written by
    the rank probe's ``--died-in-init`` verdict): ``{phase, check, ranks, first_try}`` each, in the
    plan's check order; ``first_try`` is where the first try's results were moved."""
    import json

    out: List[Dict[str, Any]] = []
    for check in plan.checks:
        path = plan.run_dir / "retried" / f"{check.phase}.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        ranks = [r for r in (data.get("ranks") or []) if isinstance(r, dict)] if isinstance(data, dict) else []
        out.append({"phase": check.phase, "check": check.name, "ranks": ranks,
                    "first_try": str(plan.run_dir / "retried" / check.phase)})
    return out


def retry_line(retry: Dict[str, Any]) -> str:
    """``CHECK: retried once: rank R on HOST died of SIGNAL in hvd.init() (what said it)``."""
    said = "; ".join(f"rank {r.get('rank')} on {r.get('host')} died of {r.get('signal')} in hvd.init() "
                     f"({str(r.get('said'))[:160]})" for r in retry["ranks"])
    return (f"{retry['check']}: the step was retried once: {said or 'a rank died of a signal in hvd.init()'}; "
            f"the first try's results: {retry['first_try']}")


def _site_validation(plan):
    site_validate = getattr(plan.target.site, "validate", None)
    references = site_validate.references if site_validate is not None else ()
    fabric = site_validate.fabric if site_validate is not None else None
    return references, fabric


def _site_vendor(plan):
    """The :class:`~envtool.core.gpu_vendors.GpuVendor` of the site's ``gpu.vendor``, or None."""
    from envtool.core import gpu_vendors

    return gpu_vendors.vendor(getattr(getattr(plan.target.site, "gpu", None), "vendor", None))


def _transport(check, recs: List[dict]) -> Optional[str]:
    ifaces = sorted({str(r.get("iface")) for r in recs if r.get("iface")})
    if not ifaces:
        return None
    if check.backend != "mpi":
        return "TCP over " + ", ".join(ifaces)
    return "MPI; interface toward the first node: " + ", ".join(ifaces)


def _sweep_problems(plan, key: str, recs: List[dict], rows: List[dict]) -> List[str]:
    """A sweep that lacks sizes, and sizes that miss the site file's references."""
    sweep_max = plan.options.sweep_max
    if not (sweep_max and recs and all(r.get("ok") for r in recs)):
        return []
    out = []
    want = [n for n in sweep.SIZES if n <= sweep_max]
    if [r["bytes"] for r in rows] != want:
        have = {r["bytes"] for r in rows}
        out.append(f"{key}: the sweep lacks sizes " + ", ".join(sweep.human_size(n) for n in want if n not in have))
    references, _ = _site_validation(plan)
    return out + sweep.check_references(rows, references, key, plan.layout.nodes)


def _controller(plan, check, got, problems: List[str], main: bool) -> ControllerResult:
    """One check's entry; its problems (prefixed with its key) go to ``problems``."""
    key, phase = check.result_key, check.phase
    skipped = plan.run_dir / phase / "skipped.txt"
    if skipped.exists():
        return ControllerResult(phase=phase, check=check.name, skipped=skipped.read_text(errors="replace").strip())
    failed = plan.run_dir / phase / "failed.txt"
    if not main and failed.exists():
        why = failed.read_text(errors="replace").strip()[:300]
        problems.append(f"{key}: the rendezvous in the job could not start: {why}")
        return ControllerResult(phase=phase, check=check.name, error=why)
    recs = got.records.get(phase, [])
    if not main:
        problems += [f"{key}: {p}" for p in rk.judge(recs, plan.layout.ranks, expected_warnings(plan.target))]
    rows = sweep.rows(recs)
    problems += _sweep_problems(plan, key, recs, rows)
    return ControllerResult(phase=phase, check=check.name, ranks=recs, sweep=rows, transport=_transport(check, recs))


def _nccl(plan, phase: str, recs: List[dict], problems: List[str]) -> Optional[ControllerResult]:
    """The GPU sweep of the main step (NCCL): its rows, the transport NCCL picked, the fabric check."""
    gpu_rows = sweep.rows([{"checks": {"sweep": (r.get("checks") or {}).get("sweep_gpu") or {}}} for r in recs])
    if not gpu_rows:
        return None
    nccl_dir = plan.run_dir / "nccl"
    logs = sorted(nccl_dir.glob("*.log")) if nccl_dir.is_dir() else []
    lines: List[str] = []
    for f in logs:
        lines += f.read_text(errors="replace").splitlines()
    nccl: Dict[str, Any] = dict(sweep.nccl_transports(lines))
    # the version NCCL printed: what a published reference's stack is compared with
    nccl["version"] = published_refs.nccl_version_in(lines)
    vendor = _site_vendor(plan)
    # the network plug-in the site's GPU vendor's library loads (libnccl-net.so, librccl-net.so)
    nccl["plugin"] = sweep.plugin_status(lines, vendor)
    transport = nccl["network"] or ("inside the node: " + ", ".join(nccl["channels"]) if nccl["channels"] else None)
    references, fabric = _site_validation(plan)
    problems += sweep.check_references(gpu_rows, references, "nccl", plan.layout.nodes)
    if plan.layout.nodes > 1:
        bad = sweep.check_fabric(nccl["network"], fabric, vendor, nccl["plugin"])
        if bad:
            problems.append(f"nccl: {bad} (NCCL_DEBUG=INFO logs: {nccl_dir})")
    return ControllerResult(phase=phase, ranks=recs, sweep=gpu_rows, transport=transport, nccl=nccl,
                            logs=[str(f) for f in logs])


def controllers(plan, got, problems: List[str]) -> Dict[str, ControllerResult]:
    """Per check (by its key): its ranks, sweep rows and transport, and ``nccl`` for the main
    step's GPU sweep; appends problems (prefixed with the key) for the other checks' ranks, failed
    sweeps, missed references and a NCCL transport that is not the site's fabric."""
    out: Dict[str, ControllerResult] = {}
    for i, check in enumerate(plan.checks):
        entry = _controller(plan, check, got, problems, main=i == 0)
        out[check.result_key] = entry
        if i == 0 and entry.skipped is None:
            nccl = _nccl(plan, check.phase, entry.ranks, problems)
            if nccl is not None:
                out["nccl"] = nccl
    return out


def reference_verdicts(plan, ctrl: Dict[str, ControllerResult], problems: List[str]) -> List[Dict[str, Any]]:
    """The site's published references for the job's node count (the list form of
    ``validation.references``), each judged by :func:`envtool.steps.validate.references.verdict`:
    a reference whose stack is not the environment's is "not comparable" (neither passed nor
    failed); a failed one appends a problem."""
    refs = [r for r in published_refs.published(plan.target.site) if r.nodes == plan.layout.nodes]
    if not refs:
        return []
    gpu = ctrl.get("nccl")
    facts = gpu.nccl if gpu is not None and gpu.nccl else {}
    in_use = (facts.get("plugin") or {}).get("in_use") if gpu is not None and gpu.logs else None
    env = published_refs.environment_stack(plan.target, nccl=facts.get("version"), plugin_in_use=in_use)
    out = []
    for ref in refs:
        entry = gpu if ref.controller in ("nccl", "*") else ctrl.get(ref.controller)
        v = published_refs.verdict(ref, env, entry.sweep if entry is not None and entry.sweep else [])
        if v["status"] == "failed":
            problems.append("reference " + published_refs.line(v))
        out.append(v)
    return out
