"""``retire``: remove a version ``publish`` made, as a plan of typed steps run by the one
:class:`~envtool.steps.kernel.runner.Runner` (:mod:`envtool.steps.publish`).

:func:`compose` checks that publish made each path (its ``publish.json`` names this module and
prefix; the modulefile names the prefix; the default only with ``force_default``) and plans:
``sweep`` (what an interrupted retire left), ``hide`` (every path renamed aside,
``.X.envtool-retire-PID`` beside it, with SIGINT/SIGTERM/SIGHUP held back, so an interruption
leaves the whole version or none of it visible), ``delete``, ``refresh-spider``.
``retire --dry-run`` prints that plan; :func:`retire` runs it under the prefix's lock, after
checking again.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envtool.core.errors import UsageError
from envtool.core.plan import Step, StepContext
from envtool.modules import ModuleContent
from envtool.steps.publish.model import MARKER, RETIRE_TAG, RetireResult
from envtool.steps.publish.tree import make_writable


def default_markers(modulefiles: Path, name: str, version: str) -> List[Path]:
    """The default markers in ``modulefiles/name`` that make ``version`` the default of ``name``, of
    every registered format (:func:`envtool.modules.default_markers`: Lmod's ``default`` symlink,
    Tcl's ``.version`` file — what :func:`envtool.modules.mark_default` writes).

    Returns:
        the markers naming ``version`` (empty: it is not the marked default).
    """
    from envtool.modules import default_markers as markers

    return markers(modulefiles, name, version)


def read_marker(target: Path) -> Dict[str, object]:
    """The ``publish.json`` of ``target``, checked to be a regular file publish wrote.

    Raises:
        UsageError: no marker (not published by envtool), a symlink on the way, an unreadable
            or malformed marker (exit 2).
    """
    meta, marker = target / ".envtool", target / MARKER
    for p in (target, meta, marker):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            if p == target:
                raise UsageError(f"{target}: no such published version") from None
            raise UsageError(f"{target} was not published by envtool (no {MARKER}); retire removes only what "
                             "publish made") from None
        except OSError as exc:
            raise UsageError(f"{p}: cannot read: {exc.strerror or exc}") from None
        if stat.S_ISLNK(st.st_mode):
            raise UsageError(f"{p} is a symbolic link: not something publish made; left alone")
        want = stat.S_ISREG if p == marker else stat.S_ISDIR
        if not want(st.st_mode):
            raise UsageError(f"{p}: expected a {'file' if p == marker else 'directory'} publish made")
    try:
        with open(marker, "rb") as fh:
            data = json.loads(fh.read(1 << 20).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{marker}: not a publish record envtool can read ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{marker}: expected a JSON object (a publish record)")
    return data


def stale_retired(*dirs: Path) -> List[Path]:
    """What interrupted retires left in ``dirs`` (``.X.envtool-retire-PID`` whose process is gone)."""
    found = []
    for d in dirs:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if not (e.name.startswith(".") and RETIRE_TAG in e.name):
                continue
            pid = e.name.rsplit(RETIRE_TAG, 1)[1]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                found.append(Path(e.path))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _remove(path: Path) -> None:
    """Delete ``path`` (a file, a symlink, or a read-only tree publish made)."""
    import shutil

    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
        return
    make_writable(path)
    shutil.rmtree(path)




def _check_record(name: str, version: str, target: Path, modulefiles: Optional[Path]) -> Tuple[Dict[str, object], Path]:
    """The publish record of ``target`` and the module tree it names, checked against the request."""
    data = read_marker(target)
    if data.get("module") != f"{name}/{version}" or data.get("prefix") != str(target):
        raise UsageError(f"{target / MARKER}: records module {data.get('module')!r} at {data.get('prefix')!r}, "
                         f"not {name}/{version} at {target}; left alone")
    recorded = data.get("modulefiles")
    if modulefiles is None:
        if not isinstance(recorded, str):
            raise UsageError(f"{target / MARKER} records no module tree; pass --modulefiles")
        modulefiles = Path(recorded)
    modulefiles = Path(os.path.abspath(modulefiles))
    if isinstance(recorded, str) and recorded != str(modulefiles):
        raise UsageError(f"--modulefiles: {name}/{version} was published with its modulefile under {recorded}, "
                         f"not {modulefiles}")
    return data, modulefiles


def _own_modulefile(data: Dict[str, object], name: str, version: str, target: Path, modulefiles: Path) -> List[Path]:
    """The modulefile publish wrote for ``target`` (``[]`` when it is gone).

    Raises:
        UsageError: a link, not a file, unreadable, or one that does not name ``target``.
    """
    from envtool.modules import modulefile_path
    from envtool.modules.registry import DEFAULT_FORMAT, names

    recorded_format = data.get("format")
    fmt = recorded_format if isinstance(recorded_format, str) and recorded_format in names() else DEFAULT_FORMAT
    stub = ModuleContent(name=name, version=version, prefix=str(target), kind="prefix")
    modulefile = modulefile_path(modulefiles, stub, fmt)
    if not os.path.lexists(modulefile):
        return []
    if modulefile.is_symlink() or not modulefile.is_file():
        raise UsageError(f"{modulefile}: not a modulefile publish wrote (a link or not a file); nothing removed")
    try:
        text = modulefile.read_text(encoding="utf-8", errors="replace")[:1 << 20]
    except OSError as exc:
        raise UsageError(f"{modulefile}: cannot read: {exc.strerror or exc}") from None
    if str(target) not in text:
        raise UsageError(f"{modulefile} does not name {target}: not the modulefile publish wrote for it; "
                         "nothing removed")
    return [modulefile]


@dataclass(frozen=True)
class RetireTargets:
    """What a retire removes, checked (:func:`retire_targets`).

    Attributes:
        name, version: the module; root: the ``--root``; modulefiles: the module tree.
        doomed: the paths, in the order they are renamed aside: what users see first (default
            marker, modulefile), the environment last (a SIGKILL between two renames leaves a marked
            environment the next retire finishes).
        defaults: the default markers naming this version (removed with ``force_default``).
    """

    name: str
    version: str
    root: Path
    modulefiles: Path
    doomed: Tuple[Path, ...]
    defaults: Tuple[Path, ...]

    @property
    def target(self) -> Path:
        """``ROOT/NAME/VERSION``."""
        return self.root / self.name / self.version

    def aside(self) -> List[Tuple[Path, Path]]:
        """``(path, hidden name it is renamed to)`` for each of :attr:`doomed`."""
        return [(p, p.with_name(f".{p.name}{RETIRE_TAG}{os.getpid()}")) for p in self.doomed]


def retire_targets(name: str, version: str, root: Path, modulefiles: Optional[Path],
                   force_default: bool) -> RetireTargets:
    """What :func:`retire` removes, in order, after checking that publish made each of them.

    Raises:
        UsageError: see :func:`retire`.
    """
    target = root / name / version
    data, modulefiles = _check_record(name, version, target, modulefiles)
    doomed = _own_modulefile(data, name, version, target, modulefiles)
    sbom = root / name / f"{version}.cdx.json"
    if data.get("sbom") == str(sbom) and sbom.is_file() and not sbom.is_symlink():
        doomed.append(sbom)
    doomed.append(target)
    defaults = default_markers(modulefiles, name, version)
    if defaults and not force_default:
        raise UsageError(f"{name}/{version} is the default of {name} ({defaults[0]}); make another version the "
                         f"default first (envtool publish … --default), or pass --force-default to retire it "
                         "and remove the default marker; nothing removed")
    return RetireTargets(name, version, root, modulefiles, tuple(defaults + doomed), tuple(defaults))


@dataclass(frozen=True)
class RetirePlan:
    """The checked targets and the steps that retire them (:func:`compose`)."""

    targets: RetireTargets
    steps: Tuple[Step, ...]

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (``retire --dry-run --json``'s ``plan``)."""
        return {"module": f"{self.targets.name}/{self.targets.version}",
                "steps": [s.to_dict() for s in self.steps]}

    def format(self) -> str:
        """The plan for people: the numbered steps with their commands."""
        from envtool.core.plan import format_steps

        t = self.targets
        return "\n".join([f"Plan for retire {t.name}/{t.version} from {t.root} (modulefiles {t.modulefiles})"]
                         + format_steps(self.steps))


def parse_module(module: str) -> Tuple[str, str]:
    """``(NAME, VERSION)`` of ``module``.

    Raises:
        UsageError: not ``NAME/VERSION`` (letters, digits and . _ + -).
    """
    from envtool.modules import parse_module_name

    try:
        return parse_module_name(module)
    except UsageError:
        raise UsageError(f"retire: expected NAME/VERSION (letters, digits and . _ + -), got {module!r}") from None


def compose(module: str, root: Path, modulefiles: Optional[Path] = None, force_default: bool = False,
            caches: Optional[List[str]] = None) -> RetirePlan:
    """The plan that retires ``module`` (see the module docstring); touches nothing.

    Args:
        module, root, modulefiles, force_default: as :func:`retire`.
        caches: Lmod's system spider caches, when already asked (None: ask Lmod,
            :func:`envtool.modules.spider.cache_dirs`).
    Raises:
        UsageError: see :func:`retire`.
    """
    from envtool.modules import spider

    name, version = parse_module(module)
    t = retire_targets(name, version, Path(os.path.abspath(root)), modulefiles, force_default)
    stale = stale_retired(t.root / name, t.modulefiles / name)
    steps: List[Step] = []
    if stale:
        steps.append(Step("sweep", "Remove what interrupted retires left", action=_sweep, data=tuple(stale),
                          commands=tuple(("rm", "-rf", str(p)) for p in stale)))
    aside = t.aside()
    steps.append(Step("hide", f"Rename {name}/{version}'s paths aside, all or none (signals held back)",
                      commands=tuple(("mv", str(s), str(d)) for s, d in aside), action=_hide, data=t))
    steps.append(Step("delete", "Delete what was renamed aside (no longer visible)",
                      commands=tuple(("rm", "-rf", str(d)) for _, d in aside), action=_delete, data=t))
    if not any(p.parent == t.modulefiles / name for p in t.doomed):
        caches = []
    elif caches is None:
        caches = [d for d, _ in spider.cache_dirs()]
    if caches:
        steps.append(Step("refresh-spider", "Refresh Lmod's system spider cache: " + ", ".join(caches),
                          commands=(("#", "update_lmod_system_cache_files for $MODULEPATH and", str(t.modulefiles)),),
                          action=_refresh, data=SpiderRefresh(t.modulefiles, tuple(caches))))
    return RetirePlan(t, tuple(steps))


def _sweep(step: Step, ctx: StepContext) -> List[str]:
    swept = []
    for p in step.data:
        try:
            _remove(p)
        except OSError as exc:
            print(f"envtool: warning: cannot remove {p} (left by an interrupted retire): {exc.strerror or exc}",
                  file=sys.stderr)
            continue
        ctx.note(f"removed {p} (left by an interrupted retire)")
        swept.append(str(p))
    return swept


def _hide(step: Step, ctx: StepContext) -> None:
    """Rename every path aside with SIGINT/SIGTERM/SIGHUP held back (one held back is raised when
    they are let through again); a failed rename puts back those already renamed."""
    import signal

    t: RetireTargets = step.data
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    done: List[Tuple[Path, Path]] = []
    try:
        for src, dst in t.aside():
            try:
                os.rename(src, dst)
            except OSError as exc:
                for s, d in reversed(done):
                    os.rename(d, s)
                raise UsageError(f"cannot retire {t.name}/{t.version}: renaming {src}: {exc.strerror or exc}; "
                                 "nothing removed") from None
            done.append((src, dst))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _delete(step: Step, ctx: StepContext) -> None:
    t: RetireTargets = step.data
    for src, dst in t.aside():
        ctx.note(f"deleting {src} (no longer visible there)")
        try:
            _remove(dst)
        except OSError as exc:
            raise UsageError(f"{t.name}/{t.version} is retired (no longer visible), but {dst} could not be deleted: "
                             f"{exc.strerror or exc}; the next retire removes it") from None
        ctx.note(f"removed {src}")


@dataclass(frozen=True)
class SpiderRefresh:
    """Payload of ``refresh-spider``: the module tree and Lmod's system spider caches (directories)."""

    modulefiles: Path
    caches: Tuple[str, ...]


def _refresh(step: Step, ctx: StepContext) -> List[str]:
    from envtool.modules import spider

    data: SpiderRefresh = step.data
    caches = spider.cache_dirs()
    paths = [p for p in os.environ.get("MODULEPATH", "").split(":") if p]
    if str(data.modulefiles) not in paths:
        paths.append(str(data.modulefiles))
    return spider.refresh(":".join(paths), caches) if caches else []


def _run_locked(plan: RetirePlan, runner, force_default: bool) -> RetirePlan:
    """Under the prefix's lock: check again (another envtool may have changed it while we waited),
    then run the plan; an interrupt names what the next retire removes."""
    from envtool.steps.kernel.transaction import PrefixLock

    t = plan.targets
    lock = PrefixLock(t.target)  # one envtool at a time on a prefix: a publish --force of it, another retire
    lock.acquire(lambda line: print(f"envtool: {line}", file=sys.stderr, flush=True))
    try:
        caches = [c for s in plan.steps if s.id == "refresh-spider" for c in s.data.caches]
        plan = compose(f"{t.name}/{t.version}", t.root, t.modulefiles, force_default, caches)
        try:
            runner.run_steps(plan.steps)
        except KeyboardInterrupt as exc:
            left = [str(d) for _, d in plan.targets.aside() if os.path.lexists(d)]
            if left and hasattr(exc, "outcome"):
                exc.outcome = (f"{t.name}/{t.version} is retired (no longer visible); the next retire removes what "
                               "is left: " + ", ".join(left))
            raise
    finally:
        lock.release()
    return plan


def retire(module: str, root: Path, modulefiles: Optional[Path] = None, force_default: bool = False,
           dry_run: bool = False, verbose: bool = False, quiet: bool = False) -> RetireResult:
    """Retire a published version: remove ``ROOT/NAME/VERSION``, its SBOM and its modulefile.

    Only what publish made goes: the environment must hold the ``publish.json`` marker publish
    wrote last, naming this module and prefix; the modulefile and SBOM removed are the ones that
    marker records, and the modulefile must name the prefix. A version that is the module's marked
    default (:func:`default_markers`) is refused unless ``force_default`` (the marker then goes too).
    The plan is :func:`compose`'s, run by the one runner with SIGINT/SIGTERM/SIGHUP turned into
    :class:`~envtool.core.errors.Interrupted` (exit 130) and the prefix locked; a later ``retire``
    removes what a killed one left aside. Lmod's system spider cache is refreshed afterwards.

    Args:
        module: ``NAME/VERSION``.
        root: the ``--root`` it was published to.
        modulefiles: the ``--modulefiles`` tree, or None: the one the marker records.
        force_default: retire it even while it is the default.
        dry_run: check and report (with the plan), remove nothing.
        verbose: echo detail; quiet: no progress lines.
    Returns:
        a :class:`RetireResult`.
    Raises:
        UsageError: a bad NAME/VERSION, nothing published there, a target or modulefile publish
            did not make, a marker for another module or tree, the default without
            ``force_default``, a path that cannot be renamed (exit 2; nothing was changed).
    """
    plan = compose(module, root, modulefiles, force_default)
    t = plan.targets
    result = RetireResult(f"{t.name}/{t.version}", removed=[str(p) for p in t.doomed], dry_run=dry_run,
                          default=str(t.defaults[0]) if t.defaults else None)
    if dry_run:
        result.plan = plan
        return result
    import signal

    from envtool.core.errors import Interrupted
    from envtool.steps.kernel.runner import new_log_path
    from envtool.steps.kernel.runner import Runner

    def interrupted(signum, frame):
        raise Interrupted(signum)

    handlers = {sig: signal.signal(sig, interrupted) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
                if signal.getsignal(sig) != signal.SIG_IGN}
    runner = Runner(log_path=new_log_path(f"retire-{t.name}-{t.version}"), verbose=verbose, quiet=quiet)
    try:
        with runner:
            plan = _run_locked(plan, runner, force_default)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    t = plan.targets
    result.removed, result.default = [str(p) for p in t.doomed], str(t.defaults[0]) if t.defaults else None
    result.spider_caches, result.log = list(runner.results.get("refresh-spider", [])), runner.log_path
    return result
