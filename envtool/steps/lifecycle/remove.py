"""The life cycle of the environments envtool made: find them (``envtool list``) and remove one
(``envtool remove``).

What counts as "made by envtool" is the environment's own record, ``PREFIX/.envtool/create.json``
(written by :mod:`envtool.steps.create.workflow` as the last step before the environment is moved into
place), whose ``prefix`` names the very directory. The user's registry
(:mod:`envtool.core.registry`) only says where to look; environments from before the registry
existed are found under ``./envs/`` (the default prefix) too.

Removal is all or nothing: the prefix is first renamed aside, beside itself
(``.NAME.envtool-old-PID``, one ``rename(2)`` on the same filesystem), so from that instant the
environment is gone; then the aside copy is deleted. "Removed" is said only once nothing is left:
an aside copy that cannot be deleted (a directory inside it the user may not write, a file of
another user's in it) is reported with its path and the shell command that finishes it (exit 1,
a partial removal). If the deletion is interrupted (``kill -9``), what is left is only the aside
directory: the next ``remove`` of the same prefix finds it (even though the prefix itself is gone)
and finishes it, as it does the leftovers of an interrupted ``create`` (``.NAME.envtool-build-PID``,
``.NAME.envtool-old-PID``, ``.NAME.envtool-tmp-PID``). Only directories with envtool's names, owned
by the user running envtool, whose PID no longer runs and that envtool's records prove its own are
touched (:func:`envtool.steps.kernel.aside.leftovers`, the same test ``create``'s sweep applies). The user's
registry must be writable before anything is deleted (:func:`_check_registry`), so exit 2 always
means nothing was touched. A prefix being built or replaced by another envtool is waited for
through the same lock file ``create`` takes (:class:`envtool.steps.kernel.transaction.PrefixLock`).
"""
from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple, TypedDict

from envtool.core.errors import EnvtoolError, UsageError, echo
# the one proof of what is envtool's, shared with create's sweep; named here too (their home before)
from envtool.steps.kernel.aside import (ASIDE_STEMS, CREATE_RECORD, Leftovers, aside_pid,  # noqa: F401
                                        leftovers, proven, read_record, same_place)

#: The marker of a published environment (see :mod:`envtool.steps.publish`).
PUBLISH_RECORD = ".envtool/publish.json"
_same_place = same_place


def _text(value: object) -> Optional[str]:
    """A record's field when it is a string (what envtool writes there), else None."""
    return value if isinstance(value, str) else None


def _epoch(value: object) -> Optional[float]:
    """A record's ``created`` when it is a number of seconds, else None."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class EnvironmentStatus(TypedDict, total=False):
    """What :func:`status_of` found (``status`` always; the others where envtool's record is)."""

    status: str
    spec: Optional[str]
    created: Optional[float]
    module: Optional[str]


class EnvironmentRow(TypedDict):
    """One environment of :func:`list_environments` (see there)."""

    prefix: str
    spec: Optional[str]
    created: Optional[float]
    status: str
    module: Optional[str]
    registered: bool
    size: Optional[int]


class Removal(TypedDict):
    """What :func:`remove_environment` did (see there)."""

    prefix: str
    spec: Optional[str]
    size: int
    removed: bool
    dry_run: bool
    swept: List[str]
    leftovers: List[str]
    left: List[str]
    finish: Optional[str]
    problems: List[str]
    kept: List[str]
    forgot: bool


def status_of(prefix: Path) -> EnvironmentStatus:
    """What is at ``prefix`` now, for ``envtool list``.

    Returns:
        ``{"status": ..., "spec", "created", "module"}``; ``status`` is ``ok`` (envtool's record
        names this prefix), ``published`` (also published as a module), ``missing`` (nothing
        there), ``not envtool's`` (something else is there now: no record, or one that names
        another prefix), or ``broken: base retired (NAME/VERSION)`` / ``broken: base missing (PATH)``
        (a clone layered on an environment that is gone: its packages went with it;
        :func:`envtool.engines.clone_steps.layer_base`).
    """
    prefix = Path(prefix)
    if not os.path.lexists(prefix):
        return {"status": "missing"}
    rec = read_record(prefix)
    if rec is None or not _same_place(rec.get("prefix"), prefix) or os.path.islink(prefix):
        return {"status": "not envtool's"}
    pub = read_record(prefix, PUBLISH_RECORD)
    spec = _text(rec.get("spec")) or (f"clone of {rec['clone_of']}" if isinstance(rec.get("clone_of"), str)
                                       else None)
    from envtool.engines.clone_steps import layer_base

    base = layer_base(prefix)
    status = "published" if pub else "ok"
    if base is not None and not base.present:
        status = f"broken: base retired ({base.module})" if base.module else f"broken: base missing ({base.source})"
    return {"status": status, "spec": spec, "created": _epoch(rec.get("created")),
            "module": _text(pub.get("module")) if pub else None}


def list_environments(sizes: bool = True, extra_dirs: Optional[List[Path]] = None) -> List[EnvironmentRow]:
    """The environments envtool made, as far as the registry and ``./envs/`` tell.

    Args:
        sizes: measure each present environment (:func:`envtool.core.sizes.tree_size`; bytes,
            hard links counted once per environment).
        extra_dirs: directories whose subdirectories are looked at too (default ``./envs``).
    Returns:
        one mapping per prefix: ``prefix``, ``spec``, ``created`` (epoch seconds or None),
        ``status`` (see :func:`status_of`), ``module``, ``size`` (bytes, or None), ``registered``.
    """
    from envtool.core.sizes import tree_size

    found, registered = _registered()
    for top in extra_dirs if extra_dirs is not None else [Path.cwd() / "envs"]:
        for path in _made_here(top):
            found.setdefault(path, {})
    out: List[EnvironmentRow] = []
    for prefix, known in found.items():
        now = status_of(Path(prefix))
        row: EnvironmentRow = {"prefix": prefix, "spec": now.get("spec") or known.get("spec"),
                               "created": now.get("created") or known.get("created"), "status": now["status"],
                               "module": now.get("module") or known.get("module"),
                               "registered": prefix in registered, "size": None}
        if sizes and now["status"] in ("ok", "published"):
            row["size"] = tree_size(Path(prefix))
        out.append(row)
    return sorted(out, key=lambda r: (r["created"] or 0, r["prefix"]))


def _registered() -> Tuple[Dict[str, EnvironmentStatus], Set[str]]:
    """The registry's environments: what it says of each (absolute prefix -> ``spec``, ``created``,
    ``module``), and the set of those prefixes."""
    from envtool.core import registry

    found: Dict[str, EnvironmentStatus] = {}   # prefix -> what the registry says of it
    registered = set()
    for entry in registry.entries():
        registered.add(os.path.abspath(str(entry["prefix"])))
        found[os.path.abspath(str(entry["prefix"]))] = {"spec": _text(entry.get("spec")),
                                                        "created": _epoch(entry.get("created")),
                                                        "module": _text(entry.get("module"))}
    return found, registered


def _made_here(top: Path) -> List[str]:
    """The absolute paths of ``top``'s subdirectories (not hidden, not symbolic links) whose
    envtool record names them, in name order; none when ``top`` cannot be read."""
    try:
        children = sorted(os.scandir(top), key=lambda e: e.name)
    except OSError:
        return []
    made = []
    for child in children:
        if child.name.startswith(".") or not child.is_dir(follow_symlinks=False):
            continue
        rec = read_record(Path(child.path))
        if rec is not None and _same_place(rec.get("prefix"), Path(child.path)):
            made.append(os.path.abspath(child.path))
    return made


def check_removable(prefix: Path) -> Dict[str, object]:
    """Refuse to remove ``prefix`` unless envtool's own record proves envtool made it there.

    Args:
        prefix: the path given (``envtool remove PREFIX``).
    Returns:
        the environment's ``create.json`` mapping.
    Raises:
        UsageError: exit 2, nothing touched, naming the path and why: missing; a symbolic link; not
            a directory; the current or home directory or one of their ancestors; an envtool cache
            (or inside or around one); no ``.envtool/create.json``, or one naming another prefix
            (copied or moved: not this one); a published module (``envtool retire`` removes those).
    """
    shown = echo(str(prefix))
    _check_directory(prefix, shown)
    why = _protected(prefix)
    if why:
        raise UsageError(f"PREFIX {shown} is {why}; envtool removes only an environment it made, so nothing was "
                         "touched")
    return _check_records(prefix, shown)


def _check_directory(prefix: Path, shown: str) -> None:
    """Refuse a ``prefix`` that is missing, a symbolic link, or not a directory.

    Raises:
        UsageError: naming ``shown`` (the path as given, made safe to print) and which of these it is.
    """
    if not os.path.lexists(prefix):
        raise UsageError(f"PREFIX {shown}: no such environment (nothing is there)")
    if os.path.islink(prefix):
        raise UsageError(f"PREFIX {shown} is a symbolic link (to {echo(os.readlink(prefix))}); envtool removes "
                         "only an environment directory itself, never through a link: give the real path")
    if not os.path.isdir(prefix):
        raise UsageError(f"PREFIX {shown} is not a directory, so not an environment envtool made")


def _protected(prefix: Path) -> Optional[str]:
    """Why ``prefix`` (resolved) must never be removed, or None: it is the current or home
    directory or an ancestor of one, or an envtool cache (:func:`envtool.core.targets.protected_roots`),
    inside one or around one."""
    from envtool.core.targets import _real, _within, protected_roots

    real = _real(prefix)
    try:
        cwd: Optional[str] = os.path.realpath(os.getcwd())
    except OSError:
        cwd = None
    home = _real("~")
    if cwd and _within(cwd, real):
        return "the current directory" if cwd == real else f"an ancestor of the current directory {cwd}"
    if home and home != "/" and _within(home, real):
        return "your home directory" if home == real else f"an ancestor of your home directory {home}"
    for root, what in protected_roots():
        if _within(real, root) or _within(root, real):
            return f"{what} ({root}), inside it or around it"
    return None


def _check_records(prefix: Path, shown: str) -> dict:
    """``prefix``'s ``create.json`` mapping, once it names ``prefix`` and no publish record is there.

    Raises:
        UsageError: no readable record, one naming another prefix, or a published module.
    """
    rec = read_record(Path(prefix))
    if rec is None:
        raise UsageError(f"PREFIX {shown} has no readable {CREATE_RECORD}: it is not an environment envtool made "
                         "(or its record is gone), so envtool will not delete it; nothing was touched")
    if not _same_place(rec.get("prefix"), Path(prefix)):
        raise UsageError(f"PREFIX {shown}: its {CREATE_RECORD} says envtool made it at {echo(str(rec.get('prefix')))}"
                         ", not here (copied or moved), so envtool will not delete it; nothing was touched")
    pub = read_record(Path(prefix), PUBLISH_RECORD)
    if pub is not None:
        module = pub.get("module") or "?"
        raise UsageError(f"PREFIX {shown} is the published module {echo(str(module))} (its modulefile would point "
                         f"at nothing): remove it with 'envtool retire {module} --root ROOT'; nothing was touched")
    return rec


_aside_pid = aside_pid


def _keep(result: "Removal", paths: List[Path]) -> None:
    """Report the aside-named directories ``paths`` that envtool cannot prove its own: left alone,
    each with the command (quoted for pasting) that deletes it once the user has checked it."""
    for path in paths:
        result["kept"].append(str(path))
        result["problems"].append(f"{path} has envtool's name for a leftover but nothing proves envtool made it "
                                  f"(no envtool record naming {result['prefix']}), so it was left alone; "
                                  f"check it, then delete it yourself: rm -rf -- {shlex.quote(str(path))}")


def _delete_tree(path: Path) -> Optional[str]:
    """Delete the directory ``path`` (symbolic links inside removed, never followed).

    Returns:
        None when nothing is left, else why not: the first failure, ``"PATH: reason"``.
    """
    import shutil
    import sys

    from envtool.core.errors import condition_message

    failures: List[str] = []

    def failed(func, where, exc) -> None:
        if isinstance(exc, tuple):  # onerror hands over sys.exc_info()
            exc = exc[1]
        if isinstance(exc, FileNotFoundError):
            return
        failures.append(condition_message(exc) or f"{echo(str(where))}: {exc}")

    def rmtree(where: Path) -> None:
        if sys.version_info >= (3, 12):
            shutil.rmtree(where, onexc=failed)
        else:
            shutil.rmtree(where, onerror=failed)

    record = Path(path) / ".envtool"
    if os.path.isdir(record) and not os.path.islink(record):
        # envtool's record goes last, create.json the very last file: a copy that cannot be deleted
        # whole (or whose deletion is cut short) keeps the proof that it is envtool's
        _delete_children(Path(path), ".envtool", rmtree, failed)
        if not failures:
            _delete_children(record, "create.json", rmtree, failed)
    if not failures:
        rmtree(path)
    if not os.path.lexists(path):
        return None
    return failures[0] if failures else f"{echo(str(path))}: still there"


def _delete_children(directory: Path, last: str, rmtree: Callable[[Path], None],
                     failed: Callable[[object, object, OSError], None]) -> None:
    """Delete what ``directory`` holds except the entry named ``last`` (directories with ``rmtree``,
    anything else unlinked; symbolic links never followed); each failure goes to ``failed``."""
    try:
        children = [Path(e.path) for e in os.scandir(directory) if e.name != last]
    except OSError:
        children = []
    for child in children:
        if os.path.isdir(child) and not os.path.islink(child):
            rmtree(child)
            continue
        try:
            os.unlink(child)
        except FileNotFoundError:
            pass
        except OSError as exc:
            failed(os.unlink, child, exc)


def _hollow(prefix: Path, path: Path) -> bool:
    """Whether the aside copy ``path`` of ``prefix`` holds nothing: it is empty, or holds only an
    empty ``.envtool`` directory (what a deletion cut short just after envtool's record went
    leaves). Such a copy needs no proof to be deleted: :func:`_delete_hollow` removes only empty
    directories (``rmdir(2)``), so no data can go with it. Never for a PID of 0 or 1."""
    if aside_pid(prefix, path)[1] <= 1:
        return False
    try:
        names = os.listdir(path)
        if names == [".envtool"]:
            record = path / ".envtool"
            return not os.path.islink(record) and os.path.isdir(record) and not os.listdir(record)
    except OSError:
        return False
    return names == []


def _delete_hollow(path: Path) -> Optional[str]:
    """Delete the hollow aside copy ``path`` (:func:`_hollow`) with ``rmdir(2)`` only.

    Returns:
        None when it is gone, else why not (``"PATH: reason"``; something was put in it since).
    """
    from envtool.core.errors import condition_message

    for where in (path / ".envtool", path):
        try:
            os.rmdir(where)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return condition_message(exc) or f"{echo(str(where))}: {exc.strerror or exc}"
    return None


def _leftovers(prefix: Path) -> Leftovers:
    """:func:`leftovers` of ``prefix``, where an unproven copy of this user's that holds nothing
    (:func:`_hollow`: a deletion cut short after the record went) counts among ``mine``: it is
    finished (with ``rmdir(2)`` only), not reported as someone's data."""
    found = leftovers(prefix)
    hollow = [p for p in found.unproven if _hollow(prefix, p)]
    if not hollow:
        return found
    return Leftovers(sorted(found.mine + hollow), [p for p in found.unproven if p not in hollow], found.others,
                     found.live)


def finish_command(path: Path) -> str:
    """The shell command (quoted for pasting) that deletes an aside copy envtool could not."""
    quoted = shlex.quote(str(path))
    return f"chmod -R u+w -- {quoted} && rm -rf -- {quoted}"


def _check_registry(prefix: Path) -> Optional[Path]:
    """The registry record of ``prefix`` when there is one; the state directory must pass envtool's
    rule for paths and the record's directory must be writable, both checked before anything is
    deleted (the same checks :func:`envtool.core.registry.forget` makes after the deletion).

    Raises:
        UsageError: the record is there but the state directory fails the rule (another user's
            link or directory on the way, group or others may write it:
            :func:`envtool.core.registry.checked_dir`) or its directory is read-only (a read-only
            state directory or file system), so forgetting it after the deletion would fail:
            nothing was touched.
    """
    from envtool.core import registry

    record = registry.record_path(prefix)
    if not os.path.lexists(record):
        return None
    try:
        registry.checked_dir()
    except UsageError as exc:
        raise UsageError(f"{exc}; removing {echo(str(prefix))} would leave its registry record ({echo(str(record))}) "
                         "behind, so nothing was touched") from None
    if not os.access(record.parent, os.W_OK | os.X_OK):
        raise UsageError(f"envtool's registry {echo(str(record.parent))} is not writable, so removing {echo(str(prefix))} "
                         f"would leave its record ({echo(str(record))}) behind: make that directory writable "
                         "(or set XDG_STATE_HOME) and run remove again; nothing was touched")
    return record


def _finish(prefix: Path, paths: List[Path], result: Removal, say: Callable[[str], None]) -> None:
    """Delete the aside copies ``paths``; each deleted one goes to ``swept``, each left (with why
    and how to finish it) to ``left``, ``problems`` and ``finish``."""
    from envtool.core import procs

    for path in paths:
        procs.kill_marked(str(path))  # a dead create's children may still write there
        say(f"deleting {path}, left by an envtool process that no longer runs")
        why = _delete_tree(path) if proven(prefix, path) or not _hollow(prefix, path) else _delete_hollow(path)
        if why is None:
            result["swept"].append(str(path))
        else:
            _left(result, path, why)


def _left(result: Removal, path: Path, why: str) -> None:
    """Record that ``path`` could not be deleted (``why``) and the command that finishes it."""
    command = finish_command(path)
    result["left"].append(str(path))
    result["problems"].append(f"{path} is still there ({why}); to finish: {command}")
    result["finish"] = command if result["finish"] is None else f"{result['finish']} && {command}"


def remove_environment(prefix: Path, dry_run: bool = False,
                       say: Optional[Callable[[str], None]] = None) -> Removal:
    """Remove an environment envtool made, or finish an interrupted removal (see the module docstring).

    Args:
        prefix: the environment (as given).
        dry_run: check and measure only; nothing is changed (``leftovers`` lists the aside copies
            that would be deleted).
        say: a callable taking one line for people (each phase that can take a while: measuring,
            deleting; the lock wait; swept leftovers), or None.
    Returns:
        ``{"prefix", "spec", "size" (bytes), "removed", "dry_run", "swept", "leftovers", "left",
        "finish", "problems"}``: ``removed`` is True only when the environment's directory is gone
        and nothing of it is left; ``leftovers`` the aside copies of interrupted runs found (their
        paths); ``swept`` those deleted; ``left`` what could not be deleted (an aside copy, the
        registry record), with ``problems`` (one line each: the path, why, the command) and
        ``finish`` (one shell command, quoted for pasting, that finishes it, or None). A non-empty
        ``left`` is a partial removal (``envtool remove`` exits 1). ``kept``: directories with
        envtool's aside names that nothing proves envtool's (left alone, see :func:`leftovers`).
        ``forgot``: nothing was there but the registry's record of ``prefix`` (an environment
        gone already, e.g. a removal cut short by a signal), now deleted.
    Raises:
        UsageError: :func:`check_removable` refuses it, and no aside copy of this user's is beside
            the missing prefix (exit 2, nothing touched); the registry is not writable
            (:func:`_check_registry`); the lock is held too long; the rename fails (a condition such
            as permission, naming the path).
    """
    from envtool.core.sizes import tree_size
    from envtool.steps.kernel.transaction import PrefixLock

    say = say or (lambda line: None)
    prefix = Path(os.path.abspath(prefix))
    result: Removal = {"prefix": str(prefix), "spec": None, "size": 0, "removed": False, "dry_run": dry_run,
                       "swept": [], "leftovers": [], "left": [], "finish": None, "problems": [], "kept": [], "forgot": False}
    if not os.path.lexists(prefix):
        return _finish_interrupted(prefix, result, say)
    rec = check_removable(prefix)
    record = _check_registry(prefix)
    say(f"measuring {prefix}")
    result["size"] = tree_size(prefix)
    result["spec"] = _text(rec.get("spec"))
    found = _leftovers(prefix)
    result["leftovers"] = [str(p) for p in found.mine]
    if dry_run:
        _keep(result, found.unproven)
        return result
    lock = PrefixLock(prefix)
    lock.acquire(say)
    try:
        _remove_locked(prefix, result, say)
    finally:
        lock.release()
    return result


def _remove_locked(prefix: Path, result: Removal, say: Callable[[str], None]) -> None:
    """:func:`remove_environment`'s work once the prefix's lock is held: check again, rename the
    environment aside (the step that can refuse, so exit 2 means nothing was touched), sweep dead
    runs' copies, delete the aside copy, then forget the registry record; fills ``result``."""
    from envtool.core.sizes import human

    check_removable(prefix)  # again: another envtool may have replaced it while we waited
    record = _check_registry(prefix)
    found = _leftovers(prefix)
    result["leftovers"] = [str(p) for p in found.mine]
    aside = prefix.parent / f".{prefix.name}.envtool-old-{os.getpid()}"
    _rename_aside(prefix, aside, _clear_own_aside(prefix, aside), result)
    _keep(result, found.unproven)
    _finish(prefix, found.mine, result, say)
    say(f"deleting {prefix} ({human(result['size'])}; no longer visible there)")
    why: Optional[str] = "interrupted"
    try:
        why = _delete_tree(aside)
    finally:  # interrupted or not, the environment is gone: the aside copy goes too, then its record
        if why is not None and os.path.lexists(aside):
            why = _delete_tree(aside)
        if why is None and record is not None:  # no record, nothing to forget (and no state directory to judge)
            _forget(prefix, record, result)
    if why is not None:
        _left(result, aside, why)
    result["removed"] = why is None


def _rename_aside(prefix: Path, aside: Path, earlier: bool, result: Removal) -> None:
    """Rename ``prefix`` to ``aside`` (``earlier``: an earlier run's copy there was just deleted).

    Raises:
        UsageError: the rename fails and nothing was touched (exit 2).
        EnvtoolError: the rename fails after the earlier copy was deleted (not exit 2).
    """
    from envtool.core.errors import condition_message
    from envtool.steps.kernel.transaction import rename_noreplace

    try:
        rename_noreplace(prefix, aside)
    except OSError as exc:
        cannot = f"cannot remove {prefix}: " + (condition_message(exc) or exc.strerror or str(exc))
        if earlier:
            raise EnvtoolError(f"{cannot}; the environment was not touched, but {aside} (a copy of it an "
                               "earlier envtool left) was deleted") from None
        raise UsageError(cannot + "; nothing was touched") from None
    if earlier:
        result["swept"].append(str(aside) + " (an earlier run's)")


def _clear_own_aside(prefix: Path, aside: Path) -> bool:
    """Make room for this process's aside name ``aside`` of ``prefix``: a directory there (an
    earlier process's with this PID) is deleted only when it is the user's own and envtool's record
    proves it a copy of ``prefix`` (:func:`proven`).

    Returns:
        True when such a copy was deleted, False when nothing was there.
    Raises:
        UsageError: something else is there (exit 2, nothing touched; what is there is named).
        EnvtoolError: the copy cannot be deleted whole (exit 1: part of it went; the environment
            itself was not touched).
    """
    if not os.path.lexists(aside):
        return False
    try:
        st = os.lstat(aside)
    except OSError:
        st = None
    if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or not proven(prefix, aside):
        raise UsageError(f"cannot remove {echo(str(prefix))}: {echo(str(aside))}, where envtool renames it first, is "
                         "taken by something nothing proves envtool made; check it and move it away "
                         f"(mv -- {shlex.quote(str(aside))} SOMEWHERE), then run remove again; nothing was touched")
    why = _delete_tree(aside)
    if why is not None:
        raise EnvtoolError(f"cannot remove {echo(str(prefix))}: an earlier envtool's copy of it, {echo(str(aside))}, is "
                         f"in the way and cannot be deleted ({why}); to finish it: {finish_command(aside)}; then "
                         "run remove again (the environment itself was not touched)")
    return True


def _registry_record(prefix: Path) -> Path:
    """Where the user's registry records ``prefix`` (:func:`envtool.core.registry.record_path`)."""
    from envtool.core import registry

    return registry.record_path(prefix)


def _forget(prefix: Path, record: Optional[Path], result: Removal) -> None:
    """Delete ``prefix``'s registry record (checked writable before); a failure now is part of what
    is left (the environment is already gone)."""
    from envtool.core import registry
    from envtool.core.errors import condition_message

    try:
        registry.forget(prefix)
    except OSError as exc:
        path = record or registry.record_path(prefix)
        command = f"rm -rf -- {shlex.quote(str(path))}"
        result["left"].append(str(path))
        result["problems"].append(f"the registry record {path} is still there ("
                                  + (condition_message(exc) or exc.strerror or str(exc))
                                  + f"): 'envtool list' shows the environment as missing; to finish: {command}")
        result["finish"] = command if result["finish"] is None else f"{result['finish']} && {command}"


def _nothing_here(prefix: Path, found) -> None:
    """Refuse ``remove`` of a missing prefix with no copy of this user's beside it, naming the
    copies left alone (``found``: :func:`leftovers`' split: another user's, or a live PID's).

    Raises:
        UsageError: always (exit 2, nothing touched).
    """
    note = ""
    if found.others:
        note = ("; left alone (another user's, or not a directory): "
                + ", ".join(echo(str(p)) for p in found.others))
    for path in found.live:  # another envtool at work, or a PID another process has now
        pid = _aside_pid(prefix, path)[1]
        note += (f"; {echo(str(path))} is left alone: a process with its PID {pid} is alive (another envtool "
                 "at work on it, or the PID was reused); once that process is not envtool's, run remove again "
                 "(or check it and delete it yourself)")
    if found.live and not found.others:
        raise UsageError(f"PREFIX {echo(str(prefix))}: no such environment, only a copy of another envtool "
                         f"run{note}; nothing was touched")
    raise UsageError(f"PREFIX {echo(str(prefix))}: no such environment (nothing is there){note}")


def _finish_interrupted(prefix: Path, result: Removal, say: Callable[[str], None]) -> Removal:
    """``remove`` of a prefix that is gone: finish the aside copies an interrupted ``remove`` or
    ``create`` left beside it (see :func:`leftovers`), or refuse as :func:`check_removable` does.

    Raises:
        UsageError: nothing of this user's is left beside it (exit 2, nothing touched; aside copies
            of another user's are named, never touched).
    """
    found = _leftovers(prefix)
    mine = found.mine
    if not mine and found.unproven:  # the user's own data under a look-alike name: said, never deleted
        _keep(result, found.unproven)
        return result
    if not mine and not found.live and not found.others and os.path.lexists(_registry_record(prefix)):
        record = _check_registry(prefix)  # only a record of an environment already gone: forget it
        if not result["dry_run"]:
            _forget(prefix, record, result)
        result["forgot"] = not result["left"]
        return result
    if not mine:
        _nothing_here(prefix, found)
    record = _check_registry(prefix)
    _measure_copies(prefix, mine, result, say)
    if result["dry_run"]:
        _keep(result, found.unproven)
        return result
    _finish_locked(prefix, record, result, say)
    return result


def _measure_copies(prefix: Path, mine, result: Removal, say: Callable[[str], None]) -> None:
    """Set ``result``'s ``spec`` (the first copy's record), ``size`` (bytes, hard links once) and
    ``leftovers`` from the aside copies ``mine`` of the missing ``prefix``."""
    from envtool.core.sizes import tree_size

    for path in mine:
        rec = read_record(path)
        if rec is not None and result["spec"] is None:
            result["spec"] = _text(rec.get("spec"))
    say(f"measuring {len(mine)} aside cop{'y' if len(mine) == 1 else 'ies'} of {prefix}")
    seen: set = set()
    result["size"] = sum(tree_size(p, seen) for p in mine)
    result["leftovers"] = [str(p) for p in mine]


def _finish_locked(prefix: Path, record, result: Removal, say: Callable[[str], None]) -> None:
    """Under the prefix's lock: delete this user's proven aside copies beside the missing
    ``prefix`` (found again), then forget its registry ``record`` (or None); fills ``result``.

    Raises:
        UsageError: the prefix appeared while envtool waited for the lock (exit 2, nothing touched).
    """
    from envtool.steps.kernel.transaction import PrefixLock

    lock = PrefixLock(prefix)
    lock.acquire(say)
    try:
        if os.path.lexists(prefix):  # another envtool made it again while we waited: leave it be
            raise UsageError(f"PREFIX {echo(str(prefix))} appeared while envtool waited for its lock; run remove "
                             "again; nothing was touched")
        found = _leftovers(prefix)
        _keep(result, found.unproven)
        _finish(prefix, found.mine, result, say)
        if record is not None:
            _forget(prefix, record, result)
    finally:
        lock.release()
