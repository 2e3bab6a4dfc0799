"""``clone``: copy a (read-only) conda environment, or layer on a module's Python, atomically.

The steps come from the engine's clone path (:meth:`envtool.engines.base.Engine.clone_steps`,
the same that ``create --clone`` plans; pieces in :mod:`envtool.engines.clone` and
:mod:`envtool.engines.clone_steps`); this module runs them through the same build-then-rename as ``create``
(:class:`envtool.steps.kernel.transaction.BuildTransaction`: lock, build beside the target, rename,
one clean-up path for failures and signals, stale build directories swept).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

from envtool.engines.clone import resolve_source, source_kind
from envtool.core.errors import EnvtoolError, Interrupted
from envtool.core.targets import check_outside_source
from envtool.spec.names import check_prefix

if TYPE_CHECKING:  # for annotations only
    from envtool.engines.base import CloneSettings, Engine
    from envtool.steps.kernel.runner import Runner
    from envtool.steps.kernel.transaction import BuildTransaction


def _write_record(build: Path, target: Path, src: Path, mode: str = "copy") -> None:
    """Write the clone's own record, ``.envtool/create.json`` (as ``create`` does), naming the final
    prefix and the source: what ``envtool list`` and ``envtool remove`` take as proof that envtool
    made it (a record copied from the source named the source's prefix and is replaced).

    ``mode`` (``layer`` when the clone stands on the source, else ``copy``) is kept as
    ``clone_mode``, and a source that ``envtool publish`` made names its module
    (``clone_of_module``, from its ``.envtool/publish.json``): what ``list`` and ``doctor`` need to
    say that a layer's base was retired (:func:`envtool.engines.clone_steps.layer_base`)."""
    import json
    import time

    from envtool.steps.lifecycle.remove import PUBLISH_RECORD, read_record

    pub = read_record(src, PUBLISH_RECORD) or {}
    module = pub.get("module") if isinstance(pub.get("module"), str) else None

    meta = build / ".envtool"
    if meta.is_symlink() or (meta.exists() and not meta.is_dir()):
        meta.unlink()
    meta.mkdir(exist_ok=True)
    (meta / "create.json").write_text(json.dumps({
        "spec": None, "clone_of": str(src), "clone_mode": mode, "clone_of_module": module, "prefix": str(target),
        "created": time.time(), "steps": [], "results": {}}, indent=2) + "\n")


@dataclass
class CloneResult:
    """What :func:`clone_env` did: the final prefix, the build log, step results and timings (seconds)."""

    prefix: Path
    source: Path
    log: Path
    results: Dict[str, Any] = field(default_factory=dict)
    timings: Dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"ok": True, "prefix": str(self.prefix), "source": str(self.source), "log": str(self.log),
                "results": self.results, "timings": self.timings}


def clone_env(source: str, prefix: Path, engine: str = "rattler", mode: str = "layer", force: bool = False,
              verify_content: bool = True, cache_dir: Optional[Path] = None, verbose: bool = False,
              quiet: bool = False, source_caches: Optional[Sequence[Path]] = None) -> CloneResult:
    """Clone ``source`` to ``prefix`` atomically (``envtool clone``).

    Args:
        source: env name, prefix, or ``""`` for ``$CONDA_PREFIX`` (:func:`resolve_source`).
        prefix: the target prefix.
        engine: a registered engine name (:mod:`envtool.engines.registry`): ``rattler`` (default), or
            ``conda``/``mamba``/``micromamba`` (the external tool's own ``--clone``).
        mode: for a venv-style source: ``layer`` or ``copy``.
        force: replace the environment at the target (once the clone is complete).
        verify_content: fingerprint the source by content (sha256) rather than by ``stat``.
        cache_dir: writable package cache (default ``<envtool cache>/pkgs``).
        verbose / quiet: progress detail.
        source_caches: read-only caches to take packages from (None: the source's caches;
            ``[]``: none, every package not in ``cache_dir`` is downloaded).
    Returns:
        a :class:`CloneResult`.
    Raises:
        UsageError: bad source or prefix (inside the source, resolved), the target exists without
            ``force``, or ``force`` would replace what is not an environment
            (:func:`envtool.core.targets.check_replaceable`) (exit 2).
        EnvtoolError: a step failed (``exc.log`` names the build log, ``exc.outcome`` what was left).
        Interrupted: SIGINT/SIGTERM/SIGHUP, after clean-up (exit 130).
    """
    from envtool.engines.base import CloneSettings
    from envtool.engines.registry import get_engine
    from envtool.steps.kernel.runner import new_log_path
    from envtool.steps.kernel.runner import Runner
    from envtool.steps.kernel.transaction import BuildTransaction

    check_prefix(str(prefix))
    chosen = get_engine(engine)
    how = CloneSettings(mode=mode, verify_content=verify_content, cache_dir=cache_dir,
                        source_caches=None if source_caches is None else tuple(Path(c) for c in source_caches))
    target = Path(os.path.abspath(prefix))
    src = resolve_source(source)
    check_outside_source(target, src)  # resolved paths: ALIAS/inner through a symlink to the source too
    log = new_log_path("clone-" + target.name)
    tx = BuildTransaction(target, force, log, source=src)
    kind = source_kind(src)
    runner = Runner(log_path=log, verbose=verbose, quiet=quiet)
    try:
        with tx, runner:
            _build_clone(tx, runner, chosen, source, src, kind, how)
        _register_clone(target)
        return CloneResult(prefix=target, source=src, log=log, results=_with_clone_view(runner.results),
                           timings=runner.timings)
    except (EnvtoolError, Interrupted) as exc:
        if exc.results is None:
            exc.results = _with_clone_view(runner.results)
        raise


def _build_clone(tx: "BuildTransaction", runner: "Runner", chosen: "Engine", source: str, src: Path,
                 kind: Optional[str], how: "CloneSettings") -> None:
    """Inside the open transaction ``tx``: run the engine's clone steps (``source`` as given, ``src``
    resolved, of :func:`source_kind` ``kind``) into ``tx.build``, relocate what names the build
    prefix (all but the rattler clone of a conda source, which writes the final prefix itself),
    write the clone's record and move the build into place (``tx.commit``).

    Raises:
        EnvtoolError: a step failed; Interrupted: a signal (``tx`` cleans up on the way out).
    """
    from envtool.core.plan import PlanOptions
    from envtool.steps.kernel.relocate import rewrite_prefix

    target, build = tx.target, tx.build
    steps = chosen.clone_steps(None, source, PlanOptions(prefix=target, build_prefix=build), how)
    runner.note(f"envtool clone {src} -> {target}; building in {build}")
    for p in tx.swept:
        runner.note(f"removed stale build directory {p}")
    for i, step in enumerate(steps, 1):
        runner.run_step(step, i, len(steps))
    if kind != "conda" or chosen.name != "rattler":
        # the rattler clone writes the final prefix itself (placeholders via py-rattler's
        # alternative target prefix, untracked files by copy_untracked); others name the build prefix
        reloc = rewrite_prefix(build, str(build), str(target))
        runner.note(f"relocated: {len(reloc.rewritten)} text files named the build prefix; "
                    f"{len(reloc.binaries)} binaries do")
    _write_record(build, target, src, mode="layer" if kind == "venv" and how.mode == "layer" else "copy")
    runner.note(f"moving {build} -> {target}")
    tx.commit()
    runner.note(f"clone ready at {target}")


def _register_clone(target: Path) -> None:
    """Record ``target`` in the user's registry (what ``envtool list`` shows); a registry that
    cannot be written is no failure."""
    try:
        from envtool.core import registry

        registry.record(target, spec="", kind="cloned")
    except OSError:
        pass


def _with_clone_view(results: Dict[str, Any]) -> Dict[str, Any]:
    """``results`` plus the ``clone`` entry that gathers the clone steps' results (``--json``)."""
    from envtool.engines.clone_steps import clone_view

    out = dict(results)
    out["clone"] = clone_view(results)
    return out
