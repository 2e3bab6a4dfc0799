"""``publish`` as a plan of typed steps run by the one :class:`~envtool.steps.kernel.runner.Runner`
(:mod:`envtool.steps.publish`).

:func:`compose` decides every stack first (:func:`envtool.steps.publish.prepare.prepare`: targets,
modulefiles, the lock each installs, the plan ``create`` makes for it), so a refusal leaves
everything as it was; then the steps: make the trees; per stack ``build`` (``create`` with that
plan, composed, not duplicated), ``unshare-links``, ``sbom``, ``modulefile``, ``default``,
``permissions``, ``marker`` (last: its presence means every step before it is done), ``register``;
then ``refresh-spider``. ``publish --dry-run`` prints that plan; :func:`publish` runs it.
"""
from __future__ import annotations

import getpass
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from envtool.core.errors import UsageError
from envtool.core.plan import Step, StepContext
from envtool.modules import DEFAULT_FORMAT, ModuleContent
from envtool.spec.model import Spec
from envtool.steps.publish import tree
from envtool.steps.publish.model import Published, PublishResult
from envtool.steps.publish.prepare import Stack, prepare


@dataclass(frozen=True)
class Settings:
    """What the user asked for besides the specs (see :func:`publish` for each)."""

    root: Path
    modulefiles: Path
    group: Optional[str] = None
    gid: Optional[int] = None
    umask: int = 0o022
    default: bool = False
    force: bool = False
    fmt: str = DEFAULT_FORMAT
    extensions: str = "spec"
    verbose: bool = False
    quiet: bool = False

    @property
    def mod_umask(self) -> int:
        """The umask of modulefiles: only its group bits (Lmod's spider cache skips what others cannot read)."""
        return self.umask & 0o022


@dataclass(frozen=True)
class StackStep:
    """Payload of a per-stack step: the settings and the stack."""

    settings: Settings
    stack: Stack


@dataclass(frozen=True)
class PublishPlan:
    """The decided stacks and the steps that publish them (:func:`compose`).

    Attributes:
        settings: the options; stacks: one per spec; steps: in order.
        spider_caches: Lmod's system spider caches the last step refreshes (empty: none, no step).
    """

    settings: Settings
    stacks: Tuple[Stack, ...]
    steps: Tuple[Step, ...]
    spider_caches: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (``publish --dry-run --json``'s ``plan``)."""
        return {"root": str(self.settings.root), "modulefiles": str(self.settings.modulefiles),
                "stacks": {s.module: s.action for s in self.stacks}, "steps": [s.to_dict() for s in self.steps]}

    def format(self) -> str:
        """The plan for people: the trees, each stack's action, then the numbered steps and their commands."""
        from envtool.core.plan import format_steps

        head = [f"Plan for publish into {self.settings.root} (modulefiles {self.settings.modulefiles})"]
        head += [f"{s.module}: {s.action if s.action == 'unchanged' else 'would be ' + s.action}" for s in self.stacks]
        return "\n".join(head + format_steps(self.steps))


def check_request(specs: Sequence[Spec], lock: Optional[Path], fmt: str) -> None:
    """Refuse a spec named twice, ``--lock`` with several specs, an unknown format (exit 2)."""
    from envtool.modules.registry import get

    get(fmt)  # an unknown format: exit 2 before anything is touched
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise UsageError("publish: a spec is named twice: " + ", ".join(sorted({n for n in names if names.count(n) > 1})))
    if lock is not None and len(specs) != 1:
        raise UsageError(f"--lock: one lock installs one spec; got {len(specs)} specs (publish them one at a time, "
                         "or let each use its own lock)")


def _tree_step(s: Settings) -> List[Step]:
    missing = [(d, mask) for tree_dir, mask in ((s.root, s.umask), (s.modulefiles, s.mod_umask))
               for d in tree.missing_dirs(tree_dir)]
    if not missing:
        return []
    return [Step("make-trees", "Create the software and module trees", action=_make_trees, data=s,
                 commands=tuple(("mkdir", "-m", format(tree.published_mode(True, True, s.gid is not None, m, False),
                                                       "o"), str(d)) for d, m in missing)
                 + ((("chgrp", s.group, *(str(d) for d, _ in missing)),) if s.group else ()))]


def _build_commands(st: Stack) -> Tuple[Tuple[str, ...], ...]:
    """``create``'s steps for ``st``, each as a comment then its commands (as ``envtool plan`` shows them)."""
    assert st.create_plan is not None  # a stack that is built has its plan
    out: List[Tuple[str, ...]] = []
    for s in st.create_plan.steps:
        out.append(("#", f"create [{s.id}] {s.title}"))
        out += [tuple(c) for c in s.commands]
    return tuple(out)


def _stack_steps(s: Settings, st: Stack) -> List[Step]:
    data = StackStep(s, st)
    m = st.module
    mark = [Step(f"default:{m}", f"Make {m} the default of {st.spec.name}", action=_default, data=data,
                 commands=(("#", "default marker in", str(st.modulefile.parent)),))] if s.default else []
    if st.options is None:
        return mark
    lock = st.options.lock_reason
    return [
        Step(f"build:{m}", f"Build {m} at {st.target} through create's plan", commands=_build_commands(st),
             notes=((f"packages: {lock}",) if lock else ()) + ("built in a temporary sibling, moved into place "
                                                              "only when complete (envtool create)",),
             action=_build, data=data),
        Step(f"unshare-links:{m}", "Give hard-linked files private copies (their mode and group change next)",
             commands=(("#", "copy each file with more than one link under", str(st.target)),),
             action=_unshare, data=data),
        Step(f"sbom:{m}", f"Write the SBOM {st.sbom}", commands=(("#", "CycloneDX inventory of", str(st.target)),),
             action=_sbom, data=data),
        Step(f"modulefile:{m}", f"Write the modulefile {st.modulefile}", action=_modulefile, data=data,
             commands=(("#", f"{s.fmt} modulefile for", str(st.target), f"(extensions: {s.extensions})"),)),
        *mark,
        Step(f"permissions:{m}", "Make the environment read-only" + (f", group {s.group}, setgid directories"
                                                                      if s.group else ""),
             commands=(("#", "modes and group of", str(st.target), str(st.sbom), str(st.modulefile)),),
             action=_permissions, data=data),
        Step(f"marker:{m}", f"Write the publish record {st.target}/.envtool/publish.json",
             commands=(("#", "last: its presence means every step above is done"),), action=_marker, data=data),
        Step(f"register:{m}", f"Add {m} to the list of environments ('envtool list')", action=_register, data=data),
    ]


def compose(specs: Sequence[Spec], settings: Settings, clone_site_base: bool = False, lock: Optional[Path] = None,
            resolve: bool = False, installer: str = "") -> PublishPlan:
    """The plan that publishes ``specs`` (see the module docstring); touches nothing.

    Raises:
        UsageError: see :func:`publish` (exit 2).
    """
    from envtool.modules import spider

    check_request(specs, lock, settings.fmt)
    stacks = tuple(prepare(s, settings.root, settings.modulefiles, settings.fmt, settings.force, clone_site_base,
                           lock, resolve, installer) for s in specs)
    steps = _tree_step(settings)
    for st in stacks:
        steps += _stack_steps(settings, st)
    caches: Tuple[str, ...] = ()
    if any(s.action != "unchanged" for s in stacks) or settings.default:
        caches = tuple(d for d, _ in spider.cache_dirs())
    if caches:
        steps.append(Step("refresh-spider", "Refresh Lmod's system spider cache: " + ", ".join(caches),
                          commands=(("#", "update_lmod_system_cache_files for $MODULEPATH and",
                                          str(settings.modulefiles)),), action=_refresh_spider, data=settings))
    return PublishPlan(settings, stacks, tuple(steps), caches)


def _make_trees(step: Step, ctx: StepContext) -> None:
    s: Settings = step.data
    for top, mask, what in ((s.root, s.umask, "--root"), (s.modulefiles, s.mod_umask, "--modulefiles")):
        for d in tree.make_dirs(top, what):
            tree.set_mode(d, s.gid, mask, read_only=False)


def _build(step: Step, ctx: StepContext) -> Path:
    """``create`` for the stack (its own plan, log and clean-up); the log is the result."""
    from envtool.steps.create.workflow import create

    s, st = step.data.settings, step.data.stack
    for d in tree.make_dirs(st.target.parent, "--root"):
        tree.set_mode(d, s.gid, s.umask, read_only=False)
    existed = os.path.lexists(st.target)
    if existed:
        tree.make_writable(st.target)
    try:
        created = create(st.spec, st.options, force=existed, verbose=s.verbose, quiet=s.quiet)
    except BaseException:
        if st.target.exists():  # the old one stays, read-only again
            tree.set_tree(st.target, s.gid, s.umask, read_only=True)
        raise
    ctx.note(f"create log: {created.log}")
    return created.log


def _unshare(step: Step, ctx: StepContext) -> int:
    count = tree.unshare_links(step.data.stack.target)  # before any mode or group change
    ctx.note(f"{count} hard-linked file(s) given private copies")
    return count


def _sbom(step: Step, ctx: StepContext) -> None:
    from envtool.sbom import write_sbom

    st = step.data.stack
    write_sbom(st.target, st.sbom, name=st.spec.name, version=st.version)


@dataclass(frozen=True)
class ModuleWritten:
    """``modulefile``'s result: where it went and the module's full name."""

    path: Path
    full_name: str


def _modulefile(step: Step, ctx: StepContext) -> ModuleWritten:
    from envtool.modules import build_content, write_modulefile

    s, st = step.data.settings, step.data.stack
    content = build_content(st.target, spec=st.spec, name=st.spec.name, version=st.version, extensions=s.extensions)
    for d in tree.make_dirs(st.modulefile.parent, "--modulefiles"):
        tree.set_mode(d, s.gid, s.mod_umask, read_only=False)
    path = write_modulefile(content, s.modulefiles, s.fmt, default=False, force=s.force)
    return ModuleWritten(path, content.full_name)


def _default(step: Step, ctx: StepContext) -> Path:
    """Mark the stack's version the default, with the published group and mode."""
    from envtool.modules import mark_default

    s, st = step.data.settings, step.data.stack
    stub = ModuleContent(name=st.spec.name, version=st.version, prefix=str(st.target), kind="prefix")
    try:
        marker = mark_default(s.modulefiles, stub, s.fmt)
        tree.set_mode(marker, s.gid, s.mod_umask, read_only=False)
    except OSError as exc:
        raise UsageError(f"--default: cannot mark {st.module} the default in {s.modulefiles / st.spec.name}: "
                         f"{exc.strerror or exc}") from None
    return marker


def _permissions(step: Step, ctx: StepContext) -> None:
    s, st = step.data.settings, step.data.stack
    tree.set_tree(st.target, s.gid, s.umask, read_only=True)
    tree.set_mode(st.sbom, s.gid, s.umask, read_only=True)
    tree.set_mode(ctx.results[f"modulefile:{st.module}"].path, s.gid, s.mod_umask, read_only=True)


def _marker(step: Step, ctx: StepContext) -> None:
    s, st = step.data.settings, step.data.stack
    written: ModuleWritten = ctx.results[f"modulefile:{st.module}"]
    tree.write_marker(st.target, {
        "spec": st.spec.name, "spec_file": st.spec.path, "module": st.module,
        "prefix": str(st.target), "modulefiles": str(s.modulefiles), "modulefile": str(written.path),
        "format": s.fmt, "group": s.group, "published": time.time(), "by": getpass.getuser(), "sbom": str(st.sbom),
        "lock": str(st.options.from_lock) if st.options and st.options.from_lock else None,
        "status": st.spec.status.value}, s.gid, s.umask)
    ctx.progress(f"{st.module}: {st.action}; module {written.full_name} at {written.path}; SBOM {st.sbom}")


def _register(step: Step, ctx: StepContext) -> None:
    """What 'envtool list' shows; a registry that cannot be written is no failure (said in the log)."""
    from envtool.core import registry

    st = step.data.stack
    try:
        registry.record(st.target, st.spec.name, kind="published",
                        module=ctx.results[f"modulefile:{st.module}"].full_name)
    except OSError as exc:
        ctx.note(f"not in the list of environments: {exc}")


def _refresh_spider(step: Step, ctx: StepContext) -> List[str]:
    """Rebuild Lmod's system spider caches for ``$MODULEPATH`` plus the module tree
    (:mod:`envtool.modules.spider`). Returns the caches refreshed."""
    from envtool.modules import spider

    s: Settings = step.data
    caches = spider.cache_dirs()
    if not caches:
        return []
    paths = [p for p in os.environ.get("MODULEPATH", "").split(":") if p]
    if str(s.modulefiles) not in paths:
        paths.append(str(s.modulefiles))
    return spider.refresh(":".join(paths), caches)


def _lock_dict(st: Stack) -> Optional[Dict[str, object]]:
    if st.options is None:
        return None
    return {"file": str(st.options.from_lock) if st.options.from_lock else None, "reason": st.options.lock_reason}


def dry_run_result(plan: PublishPlan) -> PublishResult:
    """What :func:`publish` would do: the plan, every stack with the steps ``create`` would run and
    its Horovod look-ahead (:func:`envtool.steps.create.horovod_build.forecast`), and ``changes``."""
    from envtool.steps.create.horovod_build import forecast
    from envtool.steps.publish.changes import changes

    s = plan.settings
    result = PublishResult(dry_run=True, plan=plan, spider_caches=list(plan.spider_caches))
    result.changes = changes(plan.stacks, s.root, s.modulefiles, s.gid, s.umask, s.default, s.fmt)
    for st in plan.stacks:
        cp = st.create_plan
        result.stacks.append(Published(st.spec.name, st.module, st.target, st.modulefile, st.sbom, st.action,
                                       lock=_lock_dict(st), steps=[f"{x.id}: {x.title}" for x in cp.steps] if cp
                                       else [], horovod=forecast(cp) if cp else None))
    return result


def _created_steps(target: Path) -> List[str]:
    """The step ids ``create`` ran for ``target`` (from its ``.envtool/create.json``)."""
    import json

    try:
        data = json.loads((target / ".envtool" / "create.json").read_text())
        return [f"{s['id']}: {s.get('title', '')}" for s in data.get("steps", [])]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _stack_result(st: Stack, results: Dict[str, Any], timings: Dict[str, float]) -> Published:
    seconds = sum(v for k, v in timings.items() if k.endswith(":" + st.module))
    if st.options is None:
        return Published(st.spec.name, st.module, st.target, st.modulefile, st.sbom, "unchanged", seconds=seconds)
    written: ModuleWritten = results[f"modulefile:{st.module}"]
    return Published(st.spec.name, written.full_name, st.target, written.path, st.sbom, st.action,
                     log=results.get(f"build:{st.module}"), seconds=seconds, lock=_lock_dict(st),
                     steps=_created_steps(st.target))


def run_plan(plan: PublishPlan) -> PublishResult:
    """Run ``plan`` with the one runner (its own log under ``<cache>/logs``; each build's log is
    ``create``'s), under the plan's ``umask``.

    Raises:
        EnvtoolError: a step failed (``exc.log`` names the log); the tree holds only what was
            published before it.
    """
    from envtool.steps.kernel.runner import new_log_path
    from envtool.steps.kernel.runner import Runner

    s = plan.settings
    runner = Runner(log_path=new_log_path("publish"), verbose=s.verbose, quiet=s.quiet)
    for st in plan.stacks:
        if st.action == "unchanged":
            runner.progress(f"{st.module}: already published at {st.target} (unchanged; --force rebuilds it)")
    old_umask = os.umask(s.umask)
    try:
        with runner:
            runner.note(f"envtool publish {', '.join(st.module for st in plan.stacks)} into {s.root}")
            runner.run_steps(plan.steps)
    finally:
        os.umask(old_umask)
    return PublishResult(stacks=[_stack_result(st, runner.results, runner.timings) for st in plan.stacks],
                         spider_caches=list(runner.results.get("refresh-spider", [])), log=runner.log_path,
                         timings=dict(runner.timings))


def publish(specs: List[Spec], root: Path, modulefiles: Path, group: Optional[str] = None, default: bool = False,
            force: bool = False, fmt: str = DEFAULT_FORMAT, extensions: str = "spec", umask: int = 0o022,
            clone_site_base: bool = False, lock: Optional[Path] = None, resolve: bool = False,
            installer: str = "", dry_run: bool = False, verbose: bool = False, quiet: bool = False) -> PublishResult:
    """Publish each of ``specs`` (see :mod:`envtool.steps.publish`): :func:`compose`, then
    :func:`run_plan` (or, with ``dry_run``, :func:`dry_run_result`).

    Args:
        specs: resolved specs (for ``--site`` when given).
        root: the software tree; environments go to ``ROOT/NAME/VERSION``.
        modulefiles: the module tree users ``module use``.
        group: group name or gid that owns everything published, or None (the user's).
        default: mark each published version the default of its name.
        force: rebuild and replace stacks that are already published.
        fmt: a registered modulefile format (:mod:`envtool.modules.registry`: ``lua`` for Lmod,
            ``tcl`` for Environment Modules).
        extensions: ``--extensions`` of the modulefile (``all``, ``spec``, ``none``).
        umask: bits taken away from everyone's permissions on what is created (``0o022``:
            world-readable; ``0o027``: the group only), as EasyBuild's ``--umask``.
        clone_site_base: clone the site's base environment (``site.base_env``) instead of
            solving, for specs that name one.
        lock: ``--lock FILE``: install this lock (one spec only), or None: each spec's own lock.
        resolve: ``--resolve``: solve afresh, ignoring any lock.
        installer: ``--installer`` (``uv``, ``pip`` or ``""``), as for ``create``.
        dry_run: decide and report (``PublishResult.changes`` and ``plan``), change nothing.
        verbose, quiet: as for ``create`` (progress: one line per step on stderr).
    Returns:
        a :class:`PublishResult`.
    Raises:
        UsageError: bad group, a target that exists but was not published by envtool,
            unwritable trees, a lock that cannot install a spec (exit 2).
        EnvtoolError: a build failed (the tree holds only what was published before it).
    """
    settings = Settings(Path(os.path.abspath(root)), Path(os.path.abspath(modulefiles)), group, tree.group_id(group),
                        umask, default, force, fmt, extensions, verbose, quiet)
    plan = compose(specs, settings, clone_site_base, lock, resolve, installer)
    return dry_run_result(plan) if dry_run else run_plan(plan)
