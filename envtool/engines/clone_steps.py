"""The clone steps: copy a conda environment record by record (py-rattler), or layer a venv on a
venv-style source; the one clone path of ``envtool clone`` and ``envtool create --clone``
(:func:`clone_source_steps`). The pieces they run (source lookup, cache seeding, untracked files,
verification) are in :mod:`envtool.engines.clone`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from envtool.core.errors import EnvtoolError, StepFailed
from envtool.core.plan import PlanOptions, Step, StepContext
from envtool.engines.base import CloneSettings
from envtool.engines.layer import LAYER_PTH as _LAYER_PTH
from envtool.engines.rattler_api import install_records, package_cache, quote_path as _q, read_prefix_records
from envtool.core.prefix import PrefixData


@dataclass
class CloneRun:
    """What the clone steps of one plan hand each other, carried in their steps' data (one object
    per plan, never module state): the source's fingerprint taken before anything was copied,
    and its package records.

    Attributes:
        fingerprint: :func:`envtool.engines.clone.fingerprint` of the source, or None until taken.
        records: the source's ``rattler.PrefixRecord`` objects, or None until read.
    """

    fingerprint: Optional[Dict[str, Any]] = None
    records: Optional[list] = None


@dataclass(frozen=True)
class CloneData:
    """Payload of the conda clone steps (``clone-install``, ``clone-untracked``, ``clone-verify``), one
    object shared by the three.

    Attributes:
        source: the source prefix (only read).
        prefix: the prefix built into.
        final_prefix: where the clone will live (written into files).
        label: the source as the user named it (written into ``conda-meta/history``).
        content: fingerprint the source by content (sha256) rather than by ``stat``.
        run: what the steps hand each other (:class:`CloneRun`).
        cache_dir: the writable package cache.
        source_caches: read-only caches to copy from, or None for the source's own.
    """

    source: str
    prefix: str
    final_prefix: str
    label: str
    content: bool
    run: CloneRun
    cache_dir: str
    source_caches: Optional[Tuple[str, ...]]


@dataclass(frozen=True)
class LayerData:
    """Payload of ``clone-layer`` and ``clone-copy``: the source, the build prefix and the final prefix."""

    source: str
    prefix: str
    final_prefix: str


def clone_source_steps(source: str, options: PlanOptions, how: CloneSettings) -> List[Step]:
    """The one clone path (``envtool clone`` and ``envtool create --clone``): the steps that clone
    ``source`` into ``options.work_prefix``, to live at ``options.prefix``.

    A conda source (``conda-meta/``) is cloned record by record (:func:`clone_conda_steps`); a
    venv-style one (a module's Python) is layered or copied (:func:`clone_layer_step`,
    ``how.mode``). When planning (``options.preview``) for a site from elsewhere, an absolute
    source that is not on this machine is planned as a conda clone with a note.

    Raises:
        UsageError: the source cannot be found or is not an environment.
    """
    from envtool.core.errors import UsageError
    from envtool.engines import clone

    prefix = Path(options.work_prefix)
    try:
        src = clone.resolve_source(source)
    except UsageError as exc:
        if not (options.preview and source.startswith("/")):
            raise
        # plan for a site from elsewhere: the site's base env only exists on the site
        return clone_conda_steps(Path(source), prefix, options.prefix, source_label=source, notes=(
            f"{source} is not on this machine ({exc}); it is read when create runs on the site",))
    if clone.source_kind(src) == "venv":
        return [clone_layer_step(src, prefix, options.prefix, how.mode)]
    return clone_conda_steps(src, prefix, options.prefix, source_label=source or str(src),
                             verify_content=how.verify_content, cache_dir=how.cache_dir,
                             source_caches=how.source_caches)


def clone_conda_steps(source: Path, prefix: Path, final_prefix: Path, source_label: str = "",
                      verify_content: bool = True, cache_dir: Optional[Path] = None,
                      source_caches: Optional[Sequence[Path]] = None, notes: Sequence[str] = ()) -> List[Step]:
    """The steps that clone conda env ``source`` into ``prefix`` (which will live at ``final_prefix``).

    ``notes`` are added to the first step's (shown by ``plan``).

    Step ids: ``clone-install`` (records from caches, then URLs), ``clone-untracked`` (untracked
    files, pinned, history), ``clone-verify``. Each returns its result; :func:`clone_view` gathers them.
    """
    data = CloneData(source=str(source), prefix=str(prefix), final_prefix=str(final_prefix),
                     label=source_label or str(source), content=verify_content, run=CloneRun(),
                     cache_dir=str(cache_dir or package_cache()),
                     source_caches=None if source_caches is None else tuple(str(c) for c in source_caches))
    check = "sha256 of every file" if verify_content else "stat data incl. ctime of every file"
    return [
        Step(id="clone-install", title=f"Clone {source}: install its exact package records",
             commands=(("#", f"fingerprint {_q(source)} ({check})"),
                       ("#", f"read {_q(str(source) + '/conda-meta')}/*.json; copy extracted packages from existing "
                             f"caches (read only) into {_q(data.cache_dir)}"),
                       ("#", f"py-rattler install the same records (same builds and URLs) into {_q(prefix)}")),
             notes=("the source and its package caches are only read", *notes),
             action=_clone_install, data=data),
        Step(id="clone-untracked", title="Copy untracked files (pip-installed, user-added); carry pinned and history",
             commands=(("#", f"copy files of {_q(source)} no record tracks, {_q(source)} -> {_q(final_prefix)} in "
                             "text files"),
                       ("#", "copy conda-meta/pinned; conda-meta/history + a clone entry")),
             action=_clone_untracked, data=data),
        Step(id="clone-verify", title="Verify the clone (records, source unchanged, importlib.metadata view)",
             commands=(("#", "compare conda-meta records, the source fingerprint, and importlib.metadata of both"),),
             action=_clone_verify, data=data),
    ]


def _clone_install(step: Step, runner: StepContext) -> dict:
    from envtool.engines import clone

    d: CloneData = step.data
    src = Path(d.source)
    t0 = time.monotonic()
    run = d.run
    run.fingerprint = clone.fingerprint(src, content=d.content)
    runner.note(f"fingerprinted {len(run.fingerprint)} entries of {src} in {time.monotonic() - t0:.1f} s")
    try:
        records = read_prefix_records(src)
        caches = (clone.source_pkgs_dirs(src, records) if d.source_caches is None
                  else [Path(c) for c in d.source_caches])
        seed = clone.seed_cache(records, Path(d.cache_dir), caches)
        for stale in seed.stale_removed:
            runner.note(f"removed {stale}, the staging directory of an envtool process that no longer runs")
        runner.note(f"package cache: {len(seed.cached)} already cached, {len(seed.copied)} copied from "
                    f"{', '.join(map(str, caches)) or '-'}, {len(seed.missing)} to fetch from their URLs")
        runner.progress(f"      {len(records)} records: {len(seed.cached)} cached, {len(seed.copied)} from the "
                        f"source's caches, {len(seed.missing)} to download")
        install_records(records, Path(d.prefix), Path(d.cache_dir), target_prefix=Path(d.final_prefix),
                        platform=next((r.subdir for r in records if r.subdir != "noarch"), None),
                        progress=runner.progress)
    except EnvtoolError as exc:
        raise StepFailed(step.id, str(exc), runner.log_path) from None
    run.records = records
    return {"source": str(src), "records": len(records),
            "cache": {"cached": len(seed.cached), "copied": len(seed.copied),
                                         "fetched": seed.missing, "bytes_copied": seed.bytes_copied}}


def _clone_untracked(step: Step, runner: StepContext) -> dict:
    from envtool.engines import clone

    d: CloneData = step.data
    run = d.run
    records = run.records if run.records is not None else read_prefix_records(Path(d.source))
    report = clone.copy_untracked(Path(d.source), Path(d.prefix), Path(d.final_prefix),
                                  clone.tracked_paths(records))
    clone.carry_meta(Path(d.source), Path(d.prefix), d.label, Path(d.final_prefix), report)
    for b in report.binaries:
        runner.progress(f"      warning: {b} embeds the source prefix {d.source} (binary; not rewritten)")
    runner.note(f"untracked: {len(report.copied)} copied, {len(report.rewritten)} text files rewritten, "
                f"{len(report.binaries)} binaries embed the old prefix")
    return report.to_dict()


def _clone_verify(step: Step, runner: StepContext) -> dict:
    from envtool.engines import clone

    d: CloneData = step.data
    src, prefix = Path(d.source), Path(d.prefix)
    run = d.run
    report = clone.VerifyReport()
    report.records = clone.compare_records(run.records if run.records is not None else read_prefix_records(src),
                                           read_prefix_records(prefix))
    if run.fingerprint is not None:
        report.source_changed = clone.fingerprint_diff(run.fingerprint, clone.fingerprint(src, d.content))
    report.pip_view = clone.compare_pip_views(clone.pip_view(src), clone.pip_view(prefix))
    if not report.ok:
        lines = ([f"records differ: {x}" for x in report.records] + [f"source changed: {x}" for x in report.source_changed]
                 + [f"importlib.metadata differs: {x}" for x in report.pip_view])
        raise StepFailed(step.id, "the clone does not match its source:\n  " + "\n  ".join(lines), runner.log_path,
                         step_result=report.to_dict())
    return report.to_dict()


def clone_view(results: Dict[str, Any]) -> Dict[str, Any]:
    """The clone's steps' results as one ``clone`` entry (``source``, ``records``, ``cache``,
    ``mode``, ``untracked``, ``verify``; what ``envtool clone --json`` shows), or ``{}``.

    Args:
        results: step id → result, as the runner recorded them.
    """
    view: Dict[str, Any] = {}
    for sid in ("clone-install", "clone-layer", "clone-copy", "clone-external"):
        view.update(results.get(sid) or {})
    if "clone-untracked" in results:
        view["untracked"] = results["clone-untracked"]
    if "clone-verify" in results:
        view["verify"] = results["clone-verify"]
    return view


def clone_layer_step(source: Path, prefix: Path, final_prefix: Path, mode: str = "layer") -> Step:
    """Clone a venv-style source (a module's Python): a ``--system-site-packages`` layer or a full copy.

    Args:
        source: the source prefix (has ``bin/python``).
        prefix: where to build.
        final_prefix: where it will live.
        mode: ``layer`` (``python -m venv --system-site-packages``; the source stays in use) or
            ``copy`` (a full copy with the source prefix rewritten in text files).
    """
    py = str(PrefixData(Path(source)).find_python() or PrefixData(Path(source)).python)
    if mode == "layer":
        return Step(id="clone-layer", title=f"Layer a venv on {source} (--system-site-packages)",
                    commands=((py, "-m", "venv", "--system-site-packages", "--prompt", Path(final_prefix).name,
                               str(prefix)),
                              ("#", f"when {_q(source)} is itself a venv: a .pth file naming its site-packages")),
                    notes=("the source's packages stay visible through the layer; new packages go to the layer",),
                    action=_layer_action, data=LayerData(source=str(source), prefix=str(prefix), final_prefix=str(final_prefix)))
    return Step(id="clone-copy", title=f"Copy {source} and rewrite its prefix",
                commands=(("#", f"copy {_q(source)} -> {_q(prefix)}, {_q(source)} -> {_q(final_prefix)} in text "
                                "files"),),
                action=_copy_action, data=LayerData(source=str(source), prefix=str(prefix), final_prefix=str(final_prefix)))


def _layer_action(step: Step, runner: StepContext) -> dict:
    """Run ``venv --system-site-packages`` with the source's interpreter, then make the layer see
    what the source sees (:func:`envtool.engines.layer.layer_over`: for a venv source, a ``.pth``
    whose ``site.addsitedir`` names the site-packages the source's interpreter reports).

    ``venv`` run from a venv bases the new one on the *base* interpreter (PEP 405
    ``sys._base_executable``), so without it the source venv's own packages would not be visible.

    Raises:
        StepFailed: the source's interpreter cannot be asked, or the files cannot be written.
    """
    from envtool.engines.layer import layer_over, probe_site

    d: LayerData = step.data
    runner.run(step.commands[0])
    try:
        record = layer_over(probe_site(step.commands[0][0]), Path(d.prefix))
    except (EnvtoolError, OSError) as exc:
        raise StepFailed(step.id, f"cannot layer the venv over {d.source}: {exc}", runner.log_path) from None
    if record["pth"]:
        runner.note(f"{record['pth']} -> " + ", ".join(map(str, record["site_packages"])))
    return {"source": str(d.source), "mode": "layer", "base": record}


#: The ``.pth`` file a layer on a venv source writes into its own site-packages
#: (:data:`envtool.engines.layer.LAYER_PTH`). ``site.addsitedir`` of a directory that is gone finds
#: nothing there and raises nothing (https://docs.python.org/3/library/site.html), so a layer whose
#: source is removed still runs, without the source's packages: :func:`layer_base` tells.
LAYER_PTH = _LAYER_PTH


@dataclass(frozen=True)
class LayerBase:
    """What a layered clone stands on (:func:`layer_base`).

    Attributes:
        source: the source prefix the layer was made from (its record's ``clone_of``, else the
            parent of the site-packages the ``.pth`` names).
        site_packages: the source's site-packages the layer's ``.pth`` names, or None (a layer on
            a non-venv Python: the source's interpreter is the layer's base).
        module: ``NAME/VERSION`` when the source was a version ``envtool publish`` made (recorded
            at clone time), else None.
        present: whether the source is still there (its site-packages, else its prefix).
    """

    source: str
    site_packages: Optional[str]
    module: Optional[str]
    present: bool


def layer_base(prefix: Path) -> Optional[LayerBase]:
    """The base of ``prefix`` when it is a clone layered on another environment, else None.

    A layer is recognised by :data:`LAYER_PTH` in its site-packages (``envtool clone`` and
    ``create --clone`` of a venv source) or by a record (``.envtool/create.json``) with
    ``clone_mode: layer``; the record's ``clone_of`` and ``clone_of_module`` name the source.
    Nothing is run; unreadable files count as absent.
    """
    import json
    import os

    from envtool.core.prefix import PrefixData
    from envtool.engines.layer import pth_dirs

    rec: Dict[str, Any] = {}
    record = Path(prefix) / ".envtool" / "create.json"
    try:
        if not os.path.islink(record):  # a link is not a record envtool wrote
            with open(record, "rb") as fh:
                data = json.loads(fh.read(16 * 1024 * 1024).decode("utf-8"))
            rec = data if isinstance(data, dict) else {}
    except (OSError, ValueError, RecursionError):
        pass
    sp = PrefixData(Path(prefix)).site_packages
    named = None
    try:
        if sp is not None:
            named = next(iter(pth_dirs((sp / LAYER_PTH).read_text(errors="replace"))), None)
    except OSError:
        pass
    if named is None and rec.get("clone_mode") != "layer":
        return None
    source = rec.get("clone_of") if isinstance(rec.get("clone_of"), str) else None
    if source is None and named is not None:
        source = str(Path(named).parent.parent.parent)  # PREFIX/lib/pythonX.Y/site-packages
    if source is None:
        return None
    module = rec.get("clone_of_module") if isinstance(rec.get("clone_of_module"), str) else None
    present = os.path.isdir(named) if named is not None else os.path.isdir(source)
    return LayerBase(source=source, site_packages=named, module=module, present=present)


def _copy_action(step: Step, runner: StepContext) -> dict:
    from envtool.engines import clone

    d: LayerData = step.data
    report = clone.copy_untracked(Path(d.source), Path(d.prefix), Path(d.final_prefix), set())
    return {"source": d.source, "mode": "copy", "untracked": report.to_dict()}


