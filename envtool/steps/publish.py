"""``publish``: build stacks into a shared tree for a site's users, with modulefiles and SBOMs.

For each spec, :func:`publish` builds the environment at ``ROOT/NAME/VERSION`` through
:func:`envtool.steps.create.create` with the plan ``create`` makes (so every guarantee of
``create`` holds: built in a temporary sibling, validated, moved into place only when complete;
the spec's lock installed exactly and the prefix compared with it, :mod:`envtool.steps.from_lock`),
cloning the site's base environment when the spec is resolved for a site that has one. Then it
writes, in order:

* ``ROOT/NAME/VERSION.cdx.json``: the environment's CycloneDX SBOM (:mod:`envtool.sbom`);
* ``ROOT/NAME/VERSION/.envtool/publish.json``: what was published, when, by whom;
* the modulefile ``MODULES/NAME/VERSION[.lua]`` (:mod:`envtool.modules`) and, with
  ``default``, the default marker;

and leaves the tree the way EasyBuild's ``--group``, ``--umask`` and
``--read-only-installdir`` leave an installation (EasyBuild docs, "Configuration options":
``group``, ``umask``, ``read-only-installdir``): every file and directory group-owned by
``group``, directories setgid (new entries inherit the group), everything group-readable
(others per ``umask``), and the environment itself read-only for everyone, owner included.
The ``ROOT/NAME`` and module directories stay writable by their owner, for the next version.
Modulefiles are readable by everyone whatever the ``umask`` (only the group's bits of it apply to
them): Lmod's system spider cache leaves out modulefiles that others cannot read (seen with
Debian's Lmod 8.6.19 ``update_lmod_system_cache_files``), and a modulefile holds no more than
paths; a restricted stack is protected by its environment's permissions.

Group, setgid and modes go only on what the call creates (directories it makes, the environment,
its SBOM, modulefile and default marker): a ``--root``, module tree or ``NAME`` directory that
was there before keeps its own, so a later, stricter ``umask`` never takes earlier stacks away
from their users.

A stack whose ``publish.json`` is already there is left alone (``unchanged``) unless
``force``: then it is rebuilt and replaces the old one only once complete. When the site uses
Lmod's system spider cache (:mod:`envtool.modules.spider`), it is rebuilt at the end.
``dry_run`` reports all of this and changes nothing. :func:`retire` removes a published version
(environment, SBOM, modulefile), proven by its ``publish.json``.
"""
from __future__ import annotations

import getpass
import json
import os
import stat
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional

from envtool.core.errors import UsageError
from envtool.spec.model import Spec
from envtool.core.plan import PlanOptions
from envtool.core.targets import check_replaceable
from envtool.modules import DEFAULT_FORMAT, ModuleContent

#: The marker of a published environment, inside it.
MARKER = ".envtool/publish.json"


@dataclass
class Published:
    """What :func:`publish` did with one spec.

    Attributes:
        spec: spec name.
        module: ``NAME/VERSION``.
        prefix: the environment.
        modulefile: the modulefile path.
        sbom: the SBOM path.
        action: ``published`` (new), ``replaced`` (``force``) or ``unchanged``.
        log: the build log, or None when nothing was built.
        seconds: wall time of this spec (seconds).
        lock: ``{"file": lock or None, "reason": …}``: where the packages came from (None when
            nothing was built).
        steps: ``"id: title"`` of each step ``create`` ran (or, for a dry run, would run).
        horovod: a dry run's look-ahead at the Horovod build: from a wheel cache or compiled
            (:func:`envtool.steps.horovod_build.forecast`), or None (no build, or not a dry run).
    """

    spec: str
    module: str
    prefix: Path
    modulefile: Path
    sbom: Path
    action: str
    log: Optional[Path] = None
    seconds: float = 0.0
    lock: Optional[Dict[str, object]] = None
    steps: List[str] = field(default_factory=list)
    horovod: Optional[Dict[str, object]] = None

    def to_dict(self) -> Dict[str, object]:
        """JSON-ready form."""
        return {"spec": self.spec, "module": self.module, "prefix": str(self.prefix),
                "modulefile": str(self.modulefile), "sbom": str(self.sbom), "action": self.action,
                "log": str(self.log) if self.log else None, "seconds": round(self.seconds, 1),
                "lock": self.lock, "steps": self.steps, "horovod": self.horovod}


@dataclass
class PublishResult:
    """Every spec's :class:`Published`, and the spider caches refreshed.

    Attributes:
        stacks: one per spec.
        spider_caches: Lmod spider caches refreshed (a dry run: that would be).
        dry_run: nothing was changed; ``changes`` says what would be.
        changes: for a dry run, ``{"path", "change" (create, replace, write, keep), "kind",
            "mode" (``ls -l`` form), "group", "note"}`` per path publish would touch or leave alone.
    """

    stacks: List[Published] = field(default_factory=list)
    spider_caches: List[str] = field(default_factory=list)
    dry_run: bool = False
    changes: List[Dict[str, object]] = field(default_factory=list)

    def to_dict(self) -> Dict[str, object]:
        """JSON-ready form."""
        data: Dict[str, object] = {"ok": True, "stacks": [s.to_dict() for s in self.stacks],
                                   "spider_caches": self.spider_caches, "dry_run": self.dry_run}
        if self.dry_run:
            data["changes"] = self.changes
        return data


def group_id(group: Optional[str]) -> Optional[int]:
    """The gid of ``group`` (a name or a number), or None.

    Raises:
        UsageError: no such group.
    """
    if group is None:
        return None
    import grp

    try:
        return grp.getgrgid(int(group)).gr_gid if group.isdigit() else grp.getgrnam(group).gr_gid
    except (KeyError, ValueError):
        raise UsageError(f"--group: no group {group!r} on this machine") from None


def module_version(spec: Spec, now: Optional[float] = None) -> str:
    """The version a stack is published under: the spec's ``distribution.version``, else the
    day (UTC, ``YYYY.MM.DD``)."""
    from envtool.modules.content import NAME_RE

    version = spec.distribution.version or time.strftime("%Y.%m.%d", time.gmtime(now))
    if not NAME_RE.match(version) or version == "default":
        raise UsageError(f"{spec.path}: distribution.version {version!r} cannot be a module version "
                         "(letters, digits and . _ + -)")
    return version


def _walk(top: Path):
    """``top`` and everything under it, deepest first (no symlink followed)."""
    for dirpath, dirnames, filenames in os.walk(top, topdown=False):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            yield Path(dirpath) / name
        yield Path(dirpath)


def published_mode(is_dir: bool, executable: bool, grouped: bool, umask: int, read_only: bool) -> int:
    """The permission bits :func:`set_mode` gives a directory or file (no I/O).

    Args:
        is_dir: a directory (else a regular file).
        executable: a file its owner can execute (ignored for directories).
        grouped: a group is given (directories get setgid, so new entries inherit the group).
        umask: bits taken from everyone.
        read_only: no write bit, not even for the owner.
    Returns:
        the mode (``stat.S_IMODE`` form, setgid included).
    """
    mode = 0o444 | (0o111 if is_dir or executable else 0)
    mode &= ~umask
    mode |= 0o400 | (0o100 if is_dir else 0)
    if not read_only:
        mode |= 0o200
    if is_dir and grouped:
        mode |= stat.S_ISGID
    return mode


def set_mode(path: Path, gid: Optional[int], umask: int, read_only: bool) -> None:
    """Give ``path`` (not following a symlink) the published ownership and mode.

    Directories: ``r-x`` for owner and group (``rwx`` for the owner when not ``read_only``),
    others per ``umask``, setgid when ``gid`` is given. Files: ``r--`` (``r-x`` when the owner
    could execute it) for everyone, minus ``umask``, plus ``w`` for the owner when not
    ``read_only``. Symlinks: only the group changes. Callers apply it only to what publish
    itself created (never to a directory that was there before).
    """
    st = os.lstat(path)
    if gid is not None and st.st_gid != gid:
        os.chown(path, -1, gid, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        return
    os.chmod(path, published_mode(stat.S_ISDIR(st.st_mode), bool(st.st_mode & stat.S_IXUSR), gid is not None,
                                  umask, read_only))


def missing_dirs(path: Path) -> List[Path]:
    """The directories :func:`make_dirs` would create for ``path``: ``path`` and its missing
    ancestors, outermost first (empty when ``path`` exists)."""
    missing: List[Path] = []
    p = Path(path)
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    return missing[::-1]


def make_dirs(path: Path, what: str) -> List[Path]:
    """Create ``path`` and its missing ancestors, one by one.

    Args:
        path: the directory.
        what: the option it came from, for messages (``--root``).
    Returns:
        the directories created here, outermost first: the only ones publish may give its
        group and modes (a directory that was there before keeps its own).
    Raises:
        UsageError: a component cannot be created, or ``path`` exists and is not a directory (exit 2).
    """
    created: List[Path] = []
    for d in missing_dirs(path):
        try:
            d.mkdir()
        except FileExistsError:
            continue  # made meanwhile by someone else: not ours
        except OSError as exc:
            raise UsageError(f"{what}: cannot create {d}: {exc.strerror or exc}") from None
        created.append(d)
    if not Path(path).is_dir():
        raise UsageError(f"{what}: {path} exists and is not a directory")
    return created


def unshare_links(top: Path) -> int:
    """Give every regular file under ``top`` that has more than one hard link a private copy.

    Installers link files from their caches (py-rattler from its package cache, uv from its
    wheel cache, envtool's kept bytecode): a published tree's mode and group changes
    (:func:`set_tree`) would otherwise reach those caches and every environment sharing the
    inode. Each such file is copied beside itself (``shutil.copy2``: data, mode, times) and
    renamed over the link, so the tree's content is unchanged.

    Returns:
        the number of files copied.
    Raises:
        OSError: a file could not be copied or renamed (the partial copy is removed).
    """
    import shutil

    count = 0
    for path in _walk(top):
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
            continue
        tmp = path.with_name(f".{path.name}.envtool-unshare-{os.getpid()}")
        try:
            shutil.copy2(path, tmp, follow_symlinks=False)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        count += 1
    return count


def set_tree(top: Path, gid: Optional[int], umask: int, read_only: bool) -> None:
    """:func:`set_mode` on ``top`` and everything under it."""
    for path in _walk(top):
        set_mode(path, gid, umask, read_only)


def make_writable(top: Path) -> None:
    """Give the owner write permission on ``top``'s tree again (before ``force`` replaces it)."""
    for path in _walk(top):
        st = os.lstat(path)
        if not stat.S_ISLNK(st.st_mode):
            os.chmod(path, stat.S_IMODE(st.st_mode) | stat.S_IWUSR)


def _write_marker(target: Path, data: Dict[str, object], gid: Optional[int], umask: int) -> None:
    """Write ``target/.envtool/publish.json`` into the read-only tree (its directory is made
    writable for the owner for the moment it takes)."""
    meta = target / ".envtool"
    os.chmod(meta, stat.S_IMODE(os.stat(meta).st_mode) | stat.S_IWUSR)
    try:
        (meta / "publish.json").write_text(json.dumps(data, indent=2) + "\n")
        set_mode(meta / "publish.json", gid, umask, read_only=True)
    finally:
        set_mode(meta, gid, umask, read_only=True)


@dataclass
class _Stack:
    """One spec's publication, decided before anything is touched (:func:`_prepare`)."""

    spec: Spec
    version: str
    target: Path
    sbom: Path
    modulefile: Path
    action: str
    #: how ``create`` builds it; None when ``action`` is ``unchanged`` (nothing is built)
    options: Optional[PlanOptions]

    @property
    def module(self) -> str:
        return f"{self.spec.name}/{self.version}"


def _prepare(spec: Spec, root: Path, modulefiles: Path, fmt: str, force: bool, clone_site_base: bool,
             lock: Optional[Path], resolve: bool, installer: str) -> _Stack:
    """Decide what publishing ``spec`` does, touching nothing: the target, whether it is new,
    replaced or already published, and the packages: the spec's lock exactly, as ``create``
    decides (:func:`envtool.steps.from_lock.choose`), unless ``resolve`` or a site clone.

    Raises:
        UsageError: a target or modulefile that publish did not make (without ``force``), a
            symlinked target, with ``force`` a target that is not an environment
            (:func:`envtool.core.targets.check_replaceable`), a lock that cannot install the spec
            here (exit 2).
    """
    from envtool.modules import modulefile_path
    from envtool.steps.from_lock import choose

    version = module_version(spec)
    target = root / spec.name / version
    if os.path.islink(target):
        raise UsageError(f"{target} is a symbolic link, not a published environment; publish never replaces "
                         "or follows one (move it away)")
    published = (target / MARKER).is_file() and not (target / MARKER).is_symlink()
    if os.path.lexists(target) and not published and not force:
        raise UsageError(f"{target} exists but was not published by envtool (no {MARKER}: another "
                         "tool's, or a publish that was interrupted); move it away, or pass --force to "
                         "rebuild and replace it")
    if os.path.lexists(target) and force:
        check_replaceable(target, option="publish target")  # --force replaces only an environment
    stub = ModuleContent(name=spec.name, version=version, prefix=str(target), kind="prefix")
    modulefile = modulefile_path(modulefiles, stub, fmt)
    if not os.path.lexists(target) and os.path.lexists(modulefile) and not force:
        raise UsageError(f"{modulefile} exists but {target} does not: a modulefile publish did not write; move "
                         "it away, or pass --force to replace it")
    from envtool.modules import other_format, other_format_message

    found = other_format(modulefiles, stub, fmt)
    if found is not None and not force:
        other, other_writer = found
        raise UsageError(f"{other_format_message(other, other_writer, f'{spec.name}/{version}')}: publish with "
                         f"--format {other_writer.name}, or pass --force to replace it")
    sbom = root / spec.name / f"{version}.cdx.json"
    if published and not force:
        return _Stack(spec, version, target, sbom, modulefile, "unchanged", None)
    clone = bool(clone_site_base and spec.site.base_env)
    if clone and lock is not None:
        raise UsageError(f"--lock: spec {spec.name} is cloned from site {spec.site.name}'s base environment "
                         f"({spec.site.base_env}), which no lock describes; publish it without --site, or "
                         "without --lock")
    choice = choose(spec, explicit=Path(lock) if lock else None, resolve=resolve, clone=clone)
    options = PlanOptions(prefix=target, clone="" if clone else None, from_lock=choice.path,
                          lock_reason=choice.reason, cpu_count=os.cpu_count() or 2, site=spec.site.name,
                          installer=installer,
                          link_files=False)  # its files' mode and group change: no shared inodes
    return _Stack(spec, version, target, sbom, modulefile, "replaced" if os.path.lexists(target) else "published",
                  options)


def _lock_dict(options: Optional[PlanOptions]) -> Optional[Dict[str, object]]:
    if options is None:
        return None
    return {"file": str(options.from_lock) if options.from_lock else None, "reason": options.lock_reason}


def _group_name(gid: Optional[int]) -> Optional[str]:
    if gid is None:
        return None
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _dry_run(stacks: List[_Stack], root: Path, modulefiles: Path, gid: Optional[int], umask: int,
             mod_umask: int, default: bool, fmt: str) -> PublishResult:
    """What :func:`publish` would do, as a :class:`PublishResult` with ``changes`` (nothing is touched)."""
    from envtool.steps.horovod_build import forecast
    from envtool.steps.planner import make_plan

    group = _group_name(gid)
    changes: List[Dict[str, object]] = []
    seen = set()

    def change(path: Path, what: str, kind: str, mode: Optional[int] = None, note: str = "") -> None:
        if (str(path), what) in seen:
            return
        seen.add((str(path), what))
        item: Dict[str, object] = {"path": str(path), "change": what, "kind": kind}
        if mode is not None:
            item["mode"] = stat.filemode(mode | (stat.S_IFDIR if kind.endswith("directory") else stat.S_IFREG))
            item["group"] = group or "(the user's)"
        if note:
            item["note"] = note
        changes.append(item)

    def dirs(path: Path, mask: int) -> None:
        if os.path.isdir(path):
            st = os.stat(path)
            change(path, "keep", "directory", note=f"exists ({stat.filemode(st.st_mode)}, group "
                                                   f"{_group_name(st.st_gid)}): its mode and group are left alone")
            return
        for d in missing_dirs(path):
            change(d, "create", "directory", published_mode(True, True, gid is not None, mask, False))

    dirs(root, umask)
    dirs(modulefiles, mod_umask)
    result = PublishResult(dry_run=True)
    for st in stacks:
        steps: List[str] = []
        horovod = None
        if st.options is not None:   # None: unchanged, nothing is built
            dirs(st.target.parent, umask)
            ro_dir = stat.filemode(stat.S_IFDIR | published_mode(True, True, gid is not None, umask, True))
            ro_file = stat.filemode(stat.S_IFREG | published_mode(False, False, gid is not None, umask, True))
            change(st.target, "replace" if st.action == "replaced" else "create", "environment",
                   note=f"built by create in a temporary sibling, then read-only: directories {ro_dir}, files "
                        f"{ro_file} (executables +x), group {group or '(the user' + chr(39) + 's)'}")
            change(st.sbom, "write", "SBOM", published_mode(False, False, gid is not None, umask, True))
            dirs(st.modulefile.parent, mod_umask)
            change(st.modulefile, "write", "modulefile",
                   published_mode(False, False, gid is not None, mod_umask, True))
            assert st.options is not None  # _prepare gives every stack it builds its options
            plan = make_plan(st.spec, replace(st.options, preview=True))
            steps = [f"{s.id}: {s.title}" for s in plan.steps]
            horovod = forecast(plan)
        if default:
            from envtool.modules.registry import get

            marker = st.modulefile.parent / get(fmt).default_marker
            change(marker, "write", "default marker",
                   note=f"makes {st.module} the default of {st.spec.name}")
        result.stacks.append(Published(st.spec.name, st.module, st.target, st.modulefile, st.sbom,
                                       st.action, lock=_lock_dict(st.options), steps=steps, horovod=horovod))
    result.changes = changes
    if any(s.action != "unchanged" for s in stacks) or default:
        from envtool.modules import spider

        result.spider_caches = [d for d, _ in spider.cache_dirs()]
    return result


def _refresh_spider(modulefiles: Path, say: Callable[[str], None]) -> List[str]:
    """Rebuild Lmod's system spider caches, when the site uses them, for ``$MODULEPATH`` plus
    ``modulefiles`` (:mod:`envtool.modules.spider`). Returns the caches refreshed."""
    from envtool.modules import spider

    caches = spider.cache_dirs()
    if not caches:
        return []
    paths = [p for p in os.environ.get("MODULEPATH", "").split(":") if p]
    if str(modulefiles) not in paths:
        paths.append(str(modulefiles))
    say("refreshing Lmod's spider cache " + ", ".join(str(c) for c in caches))
    refreshed = spider.refresh(":".join(paths), caches)
    say("refreshed Lmod's spider cache: " + ", ".join(refreshed))
    return refreshed


def publish(specs: List[Spec], root: Path, modulefiles: Path, group: Optional[str] = None, default: bool = False,
            force: bool = False, fmt: str = DEFAULT_FORMAT, extensions: str = "spec", umask: int = 0o022,
            clone_site_base: bool = False, lock: Optional[Path] = None, resolve: bool = False,
            installer: str = "", dry_run: bool = False, verbose: bool = False, quiet: bool = False,
            progress: Optional[Callable[[str], None]] = None) -> PublishResult:
    """Publish each of ``specs`` (see the module docstring).

    Every stack is decided first (:func:`_prepare`: targets, modulefiles, the lock each
    installs), so a refusal leaves everything as it was. Packages come from the spec's lock,
    exactly as ``create`` installs it (the same plan: ``install-locked-*`` then ``verify-lock``,
    which compares the prefix with the lock), unless ``resolve``. Group, setgid and modes are
    given only to what this call creates (directories it makes, the environment, its SBOM and
    modulefile, the default marker); a ``--root`` or module directory that was there before
    keeps its own.

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
        dry_run: decide and report (``PublishResult.changes``), change nothing.
        verbose, quiet: as for ``create``.
        progress: called with one line per stack (default: print unless ``quiet``).
    Returns:
        a :class:`PublishResult`.
    Raises:
        UsageError: bad group, a target that exists but was not published by envtool,
            unwritable trees, a lock that cannot install a spec (exit 2).
        EnvtoolError: a build failed (the tree holds only what was published before it).
    """
    from envtool.modules import build_content, write_modulefile
    from envtool.modules.registry import get
    from envtool.steps.create import create

    say = progress or ((lambda line: None) if quiet else (lambda line: print(line, flush=True)))
    gid = group_id(group)
    get(fmt)  # an unknown format: exit 2 before anything is touched
    root = Path(os.path.abspath(root))
    modulefiles = Path(os.path.abspath(modulefiles))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise UsageError("publish: a spec is named twice: " + ", ".join(sorted({n for n in names if names.count(n) > 1})))
    if lock is not None and len(specs) != 1:
        raise UsageError(f"--lock: one lock installs one spec; got {len(specs)} specs (publish them one at a time, "
                         "or let each use its own lock)")
    mod_umask = umask & 0o022
    stacks = [_prepare(s, root, modulefiles, fmt, force, clone_site_base, lock, resolve, installer) for s in specs]
    if dry_run:
        return _dry_run(stacks, root, modulefiles, gid, umask, mod_umask, default, fmt)
    for tree, mask, what in ((root, umask, "--root"), (modulefiles, mod_umask, "--modulefiles")):
        for d in make_dirs(tree, what):
            set_mode(d, gid, mask, read_only=False)
    result = PublishResult()
    old_umask = os.umask(umask)
    try:
        for st in stacks:
            spec, version, target, sbom = st.spec, st.version, st.target, st.sbom
            start = time.monotonic()
            if st.options is None:   # unchanged
                if default:
                    _mark_default(st, modulefiles, fmt, gid, mod_umask)
                say(f"{st.module}: already published at {target} (unchanged; --force rebuilds it)")
                result.stacks.append(Published(spec.name, st.module, target, st.modulefile, sbom,
                                               "unchanged", seconds=time.monotonic() - start))
                continue
            options = st.options
            assert options is not None  # _prepare gives every stack it builds its options
            for d in make_dirs(target.parent, "--root"):
                set_mode(d, gid, umask, read_only=False)
            say(f"{st.module}: building {target}; packages: {options.lock_reason}")
            existed = os.path.lexists(target)
            if existed:
                make_writable(target)
            try:
                created = create(spec, options, force=existed, verbose=verbose, quiet=quiet)
            except BaseException:
                if target.exists():
                    set_tree(target, gid, umask, read_only=True)
                raise
            from envtool.sbom import write_sbom

            steps = _created_steps(target)
            unshared = unshare_links(target)  # before any mode or group change
            if unshared and verbose:
                say(f"{st.module}: {unshared} hard-linked file(s) given private copies")
            write_sbom(target, sbom, name=spec.name, version=version)
            content = build_content(target, spec=spec, name=spec.name, version=version, extensions=extensions)
            for d in make_dirs(st.modulefile.parent, "--modulefiles"):
                set_mode(d, gid, mod_umask, read_only=False)
            path = write_modulefile(content, modulefiles, fmt, default=False, force=force)
            if default:
                _mark_default(st, modulefiles, fmt, gid, mod_umask)
            set_tree(target, gid, umask, read_only=True)
            set_mode(sbom, gid, umask, read_only=True)
            set_mode(path, gid, mod_umask, read_only=True)
            # The marker comes last, so that its presence means every step above is done (after an
            # interrupted publish the next one refuses the unmarked target until --force).
            _write_marker(target, {
                "spec": spec.name, "spec_file": spec.path, "module": st.module,
                "prefix": str(target), "modulefiles": str(modulefiles), "modulefile": str(path), "format": fmt,
                "group": group, "published": time.time(), "by": getpass.getuser(), "sbom": str(sbom),
                "lock": str(options.from_lock) if options.from_lock else None,
                "status": spec.status.value}, gid, umask)
            say(f"{st.module}: {st.action}; module {content.full_name} at {path}; SBOM {sbom}")
            try:  # what 'envtool list' shows; a registry that cannot be written is no failure
                from envtool.core import registry

                registry.record(target, spec.name, kind="published", module=content.full_name)
            except OSError:
                pass
            result.stacks.append(Published(spec.name, content.full_name, target, path, sbom, st.action,
                                           log=created.log, seconds=time.monotonic() - start,
                                           lock=_lock_dict(st.options), steps=steps))
    finally:
        os.umask(old_umask)
    if any(s.action != "unchanged" for s in result.stacks) or default:
        result.spider_caches = _refresh_spider(modulefiles, say)
    return result


def _created_steps(target: Path) -> List[str]:
    """The step ids ``create`` ran for ``target`` (from its ``.envtool/create.json``)."""
    try:
        data = json.loads((target / ".envtool" / "create.json").read_text())
        return [f"{s['id']}: {s.get('title', '')}" for s in data.get("steps", [])]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _mark_default(st: _Stack, modulefiles: Path, fmt: str, gid: Optional[int], mod_umask: int) -> None:
    """Mark ``st``'s version the default and give the marker the published group and mode."""
    from envtool.modules import mark_default

    stub = ModuleContent(name=st.spec.name, version=st.version, prefix=str(st.target), kind="prefix")
    try:
        marker = mark_default(modulefiles, stub, fmt)
        set_mode(marker, gid, mod_umask, read_only=False)
    except OSError as exc:
        raise UsageError(f"--default: cannot mark {st.module} the default in {modulefiles / st.spec.name}: "
                         f"{exc.strerror or exc}") from None


#: What a retire renames a path to while it removes it: ``.<name>.envtool-retire-<pid>`` beside it
#: (hidden: Lmod and Environment Modules skip dot-files that are not ``.version``/``.modulerc``).
RETIRE_TAG = ".envtool-retire-"


@dataclass
class RetireResult:
    """What :func:`retire` removed (or, for a dry run, would remove).

    Attributes:
        module: ``NAME/VERSION``.
        removed: the paths removed (environment, SBOM, modulefile, default marker).
        default: the default marker that named this version (``--force-default``), or None.
        dry_run: nothing was changed.
        spider_caches: Lmod spider caches refreshed.
    """

    module: str
    removed: List[str] = field(default_factory=list)
    default: Optional[str] = None
    dry_run: bool = False
    spider_caches: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, object]:
        """JSON-ready form."""
        return {"ok": True, "module": self.module, "removed": self.removed, "default": self.default,
                "dry_run": self.dry_run, "spider_caches": self.spider_caches}


def default_markers(modulefiles: Path, name: str, version: str) -> List[Path]:
    """The default markers in ``modulefiles/name`` that make ``version`` the default of ``name``, of
    every registered format (:func:`envtool.modules.default_markers`: Lmod's ``default`` symlink,
    Tcl's ``.version`` file — what :func:`envtool.modules.mark_default` writes).

    Returns:
        the markers naming ``version`` (empty: it is not the marked default).
    """
    from envtool.modules import default_markers as markers

    return markers(modulefiles, name, version)


def _read_marker(target: Path) -> Dict[str, object]:
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


def _sweep_retired(*dirs: Path) -> List[Path]:
    """Remove what an interrupted retire left (``.X.envtool-retire-PID`` whose process is gone)."""

    swept = []
    for d in dirs:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if not (e.name.startswith(".") and RETIRE_TAG in e.name):
                continue
            pid = e.name.rsplit(RETIRE_TAG, 1)[1]
            if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
                continue
            try:
                _remove(Path(e.path))
            except OSError as exc:
                print(f"envtool: warning: cannot remove {e.path} (left by an interrupted retire): "
                      f"{exc.strerror or exc}", file=sys.stderr)
                continue
            swept.append(Path(e.path))
    return swept


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


def _retire_targets(name: str, version: str, root: Path, modulefiles: Optional[Path], force_default: bool):
    """What :func:`retire` removes, in order, after checking that publish made each of them.

    Returns:
        ``(paths, default markers, modulefiles tree)``.
    Raises:
        UsageError: see :func:`retire`.
    """
    from envtool.modules import modulefile_path

    target = root / name / version
    data = _read_marker(target)
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
    from envtool.modules.registry import DEFAULT_FORMAT, names

    recorded_format = data.get("format")
    fmt = recorded_format if isinstance(recorded_format, str) and recorded_format in names() else DEFAULT_FORMAT
    stub = ModuleContent(name=name, version=version, prefix=str(target), kind="prefix")
    modulefile = modulefile_path(modulefiles, stub, fmt)
    # the order of renaming: what users see first (default marker, modulefile), the environment
    # last; a SIGKILL between two renames leaves a marked environment the next retire finishes
    doomed: List[Path] = []
    if os.path.lexists(modulefile):
        if modulefile.is_symlink() or not modulefile.is_file():
            raise UsageError(f"{modulefile}: not a modulefile publish wrote (a link or not a file); nothing removed")
        try:
            text = modulefile.read_text(encoding="utf-8", errors="replace")[:1 << 20]
        except OSError as exc:
            raise UsageError(f"{modulefile}: cannot read: {exc.strerror or exc}") from None
        if str(target) not in text:
            raise UsageError(f"{modulefile} does not name {target}: not the modulefile publish wrote for it; "
                             "nothing removed")
        doomed.append(modulefile)
    sbom = root / name / f"{version}.cdx.json"
    if data.get("sbom") == str(sbom) and sbom.is_file() and not sbom.is_symlink():
        doomed.append(sbom)
    doomed.append(target)
    defaults = default_markers(modulefiles, name, version)
    if defaults:
        if not force_default:
            raise UsageError(f"{name}/{version} is the default of {name} ({defaults[0]}); make another version the "
                             f"default first (envtool publish … --default), or pass --force-default to retire it "
                             "and remove the default marker; nothing removed")
        doomed[:0] = defaults
    return doomed, defaults, modulefiles


def retire(module: str, root: Path, modulefiles: Optional[Path] = None, force_default: bool = False,
           dry_run: bool = False, quiet: bool = False,
           progress: Optional[Callable[[str], None]] = None) -> RetireResult:
    """Retire a published version: remove ``ROOT/NAME/VERSION``, its SBOM and its modulefile.

    Only what publish made goes: the environment must hold the ``publish.json`` marker publish
    wrote last (:func:`_write_marker`) naming this module and prefix; the modulefile and SBOM
    removed are the ones that marker records, and the modulefile must name the prefix. A version
    that is the module's marked default (:func:`default_markers`) is refused unless
    ``force_default`` (the marker then goes too). Every path is first renamed aside
    (``.X.envtool-retire-PID`` beside it) with SIGINT/SIGTERM/SIGHUP held back, so an
    interruption leaves either the whole version or none of it visible; the renamed copies are
    then deleted (a later ``retire`` removes any left by a killed one). Lmod's system spider
    cache is refreshed afterwards, as after publish.

    Args:
        module: ``NAME/VERSION``.
        root: the ``--root`` it was published to.
        modulefiles: the ``--modulefiles`` tree, or None: the one the marker records.
        force_default: retire it even while it is the default.
        dry_run: check and report, remove nothing.
        quiet: no progress lines.
        progress: called with each line for people (default: print unless ``quiet``).
    Returns:
        a :class:`RetireResult`.
    Raises:
        UsageError: a bad NAME/VERSION, nothing published there, a target or modulefile publish
            did not make, a marker for another module or tree, the default without
            ``force_default``, a path that cannot be renamed (exit 2; nothing was changed).
    """
    from envtool.modules import parse_module_name

    say = progress or ((lambda line: None) if quiet else (lambda line: print(line, flush=True)))
    try:
        name, version = parse_module_name(module)
    except UsageError:
        raise UsageError(f"retire: expected NAME/VERSION (letters, digits and . _ + -), got {module!r}") from None
    root = Path(os.path.abspath(root))
    target = root / name / version
    result = RetireResult(f"{name}/{version}", dry_run=dry_run)
    doomed, defaults, modulefiles = _retire_targets(name, version, root, modulefiles, force_default)
    result.default = str(defaults[0]) if defaults else None
    if dry_run:
        result.removed = [str(p) for p in doomed]
        for p in doomed:
            say(f"would remove {p}")
        return result
    import signal

    from envtool.core.errors import Interrupted
    from envtool.steps.transaction import PrefixLock

    def interrupted(signum, frame):
        raise Interrupted(signum)

    # SIGINT/SIGTERM/SIGHUP become Interrupted (exit 130) from here on, so the lock is released
    handlers = {sig: signal.signal(sig, interrupted) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
                if signal.getsignal(sig) != signal.SIG_IGN}
    try:
        lock = PrefixLock(target)  # one envtool at a time on a prefix: a publish --force of it, another retire
        lock.acquire(lambda line: print(f"envtool: {line}", file=sys.stderr, flush=True))
        try:  # checked again: another envtool may have changed it while we waited
            doomed, defaults, modulefiles = _retire_targets(name, version, root, modulefiles, force_default)
            result.default = str(defaults[0]) if defaults else None
            _retire_paths(result, name, version, root, modulefiles, doomed, say)
        finally:
            lock.release()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    return result


def _retire_paths(result: RetireResult, name: str, version: str, root: Path, modulefiles: Path,
                  doomed: List[Path], say: Callable[[str], None]) -> None:
    """Rename ``doomed`` aside (signals held back), then delete them (see :func:`retire`; the
    caller turns signals into :class:`~envtool.core.errors.Interrupted`)."""
    import signal

    result.removed = [str(p) for p in doomed]
    for p in _sweep_retired(root / name, modulefiles / name):
        say(f"removed {p} (left by an interrupted retire)")
    aside = [(p, p.with_name(f".{p.name}{RETIRE_TAG}{os.getpid()}")) for p in doomed]
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
        done: List = []
        try:
            for src, dst in aside:
                try:
                    os.rename(src, dst)
                except OSError as exc:
                    for s, d in reversed(done):
                        os.rename(d, s)
                    raise UsageError(f"cannot retire {name}/{version}: renaming {src}: {exc.strerror or exc}; "
                                     "nothing removed") from None
                done.append((src, dst))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a signal held back is raised here
        for src, dst in aside:
            say(f"deleting {src} (no longer visible there)")
            try:
                _remove(dst)
            except OSError as exc:
                raise UsageError(f"{name}/{version} is retired (no longer visible), but {dst} could not be deleted: "
                                 f"{exc.strerror or exc}; the next retire removes it") from None
            say(f"removed {src}")
    except KeyboardInterrupt as exc:
        left = [str(d) for _, d in aside if os.path.lexists(d)]
        if left and hasattr(exc, "outcome"):
            exc.outcome = (f"{name}/{version} is retired (no longer visible); the next retire removes what is "
                           "left: " + ", ".join(left))
        raise
    if any(p.parent == modulefiles / name for p in doomed):
        result.spider_caches = _refresh_spider(modulefiles, say)
