"""``publish``: build stacks into a shared tree for a site's users, with modulefiles and SBOMs.

For each spec, :func:`publish` builds the environment at ``ROOT/NAME/VERSION`` through
:func:`envtool.steps.create.create` (so every guarantee of ``create`` holds: built in a
temporary sibling, validated, moved into place only when complete), cloning the site's base
environment when the spec is resolved for a site that has one. Then it writes, in order:

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

A stack whose ``publish.json`` is already there is left alone (``unchanged``) unless
``force``: then it is rebuilt and replaces the old one only once complete. When the site uses
Lmod's system spider cache (:mod:`envtool.modules.spider`), it is rebuilt at the end.
"""
from __future__ import annotations

import getpass
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from envtool.core.errors import UsageError
from envtool.spec.model import Spec
from envtool.core.plan import PlanOptions

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
    """

    spec: str
    module: str
    prefix: Path
    modulefile: Path
    sbom: Path
    action: str
    log: Optional[Path] = None
    seconds: float = 0.0

    def to_dict(self) -> Dict[str, object]:
        """JSON-ready form."""
        return {"spec": self.spec, "module": self.module, "prefix": str(self.prefix),
                "modulefile": str(self.modulefile), "sbom": str(self.sbom), "action": self.action,
                "log": str(self.log) if self.log else None, "seconds": round(self.seconds, 1)}


@dataclass
class PublishResult:
    """Every spec's :class:`Published`, and the spider caches refreshed."""

    stacks: List[Published] = field(default_factory=list)
    spider_caches: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, object]:
        """JSON-ready form."""
        return {"stacks": [s.to_dict() for s in self.stacks], "spider_caches": self.spider_caches}


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
    from envtool.modules.base import NAME_RE

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


def set_mode(path: Path, gid: Optional[int], umask: int, read_only: bool) -> None:
    """Give ``path`` (not following a symlink) the published ownership and mode.

    Directories: ``r-x`` for owner and group (``rwx`` for the owner when not ``read_only``),
    others per ``umask``, setgid when ``gid`` is given. Files: ``r--`` (``r-x`` when the owner
    could execute it) for everyone, minus ``umask``, plus ``w`` for the owner when not
    ``read_only``. Symlinks: only the group changes.
    """
    st = os.lstat(path)
    if gid is not None and st.st_gid != gid:
        os.chown(path, -1, gid, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        return
    is_dir = stat.S_ISDIR(st.st_mode)
    mode = 0o444 | (0o111 if is_dir or st.st_mode & stat.S_IXUSR else 0)
    mode &= ~umask
    mode |= 0o400 | (0o100 if is_dir else 0)
    if not read_only:
        mode |= 0o200
    if is_dir and gid is not None:
        mode |= stat.S_ISGID
    os.chmod(path, mode)


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


def publish(specs: List[Spec], root: Path, modulefiles: Path, group: Optional[str] = None, default: bool = False,
            force: bool = False, fmt: str = "lua", extensions: str = "spec", umask: int = 0o022,
            clone_site_base: bool = False, verbose: bool = False, quiet: bool = False,
            progress: Optional[Callable[[str], None]] = None) -> PublishResult:
    """Publish each of ``specs`` (see the module docstring).

    Args:
        specs: resolved specs (for ``--site`` when given).
        root: the software tree; environments go to ``ROOT/NAME/VERSION``.
        modulefiles: the module tree users ``module use``.
        group: group name or gid that owns everything published, or None (the user's).
        default: mark each published version the default of its name.
        force: rebuild and replace stacks that are already published.
        fmt: ``lua`` (Lmod) or ``tcl`` (Environment Modules).
        extensions: ``--extensions`` of the modulefile (``all``, ``spec``, ``none``).
        umask: bits taken away from everyone's permissions (``0o022``: world-readable;
            ``0o027``: the group only), as EasyBuild's ``--umask``.
        clone_site_base: clone the site's base environment (``site.base_env``) instead of
            solving, for specs that name one.
        verbose, quiet: as for ``create``.
        progress: called with one line per stack (default: print unless ``quiet``).
    Returns:
        a :class:`PublishResult`.
    Raises:
        UsageError: bad group, a target that exists but was not published by envtool,
            unwritable trees (exit 2).
        EnvtoolError: a build failed (the tree holds only what was published before it).
    """
    from envtool.modules import (ModuleContent, build_content, mark_default, modulefile_path, renderer,
                                 write_modulefile)
    from envtool.steps.create import create

    say = progress or ((lambda line: None) if quiet else (lambda line: print(line, flush=True)))
    gid = group_id(group)
    renderer(fmt)
    root = Path(os.path.abspath(root))
    modulefiles = Path(os.path.abspath(modulefiles))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise UsageError("publish: a spec is named twice: " + ", ".join(sorted({n for n in names if names.count(n) > 1})))
    mod_umask = umask & 0o022
    for tree, mask in ((root, umask), (modulefiles, mod_umask)):
        try:
            tree.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create {tree}: {exc.strerror or exc}") from None
        set_mode(tree, gid, mask, read_only=False)
    result = PublishResult()
    old_umask = os.umask(umask)
    try:
        for spec in specs:
            start = time.monotonic()
            version = module_version(spec)
            target = root / spec.name / version
            sbom = root / spec.name / f"{version}.cdx.json"
            marker = target / MARKER
            published = marker.is_file()
            if target.exists() and not published and not force:
                raise UsageError(f"{target} exists but was not published by envtool (no {MARKER}: another "
                                 "tool's, or a publish that was interrupted); move it away, or pass --force to "
                                 "rebuild and replace it")
            name_dir = root / spec.name
            name_dir.mkdir(exist_ok=True)
            set_mode(name_dir, gid, umask, read_only=False)
            if published and not force:
                stub = ModuleContent(name=spec.name, version=version, prefix=str(target), kind="prefix")
                content_path = modulefile_path(modulefiles, stub, fmt)
                if default:
                    mark_default(modulefiles, stub, fmt)
                say(f"{spec.name}/{version}: already published at {target} (unchanged; --force rebuilds it)")
                result.stacks.append(Published(spec.name, f"{spec.name}/{version}", target, content_path, sbom,
                                               "unchanged", seconds=time.monotonic() - start))
                continue
            say(f"{spec.name}/{version}: building {target}")
            existed = target.exists()
            if existed:
                make_writable(target)
            options = PlanOptions(prefix=target, clone="" if clone_site_base and spec.site.base_env else None,
                                  cpu_count=os.cpu_count() or 2, site=spec.site.name,
                                  link_files=False)  # its files' mode and group change: no shared inodes
            try:
                created = create(spec, options, force=existed, verbose=verbose, quiet=quiet)
            except BaseException:
                if target.exists():
                    set_tree(target, gid, umask, read_only=True)
                raise
            from envtool.sbom import write_sbom

            unshared = unshare_links(target)  # before any mode or group change
            if unshared and verbose:
                say(f"{spec.name}/{version}: {unshared} hard-linked file(s) given private copies")
            write_sbom(target, sbom, name=spec.name, version=version)
            content = build_content(target, spec=spec, name=spec.name, version=version, extensions=extensions)
            path = write_modulefile(content, modulefiles, fmt, default=default)
            set_tree(target, gid, umask, read_only=True)
            set_mode(sbom, gid, umask, read_only=True)
            set_mode(path.parent, gid, mod_umask, read_only=False)
            set_mode(path, gid, mod_umask, read_only=True)
            # The marker comes last, so that its presence means every step above is done (after an
            # interrupted publish the next one refuses the unmarked target until --force).
            _write_marker(target, {
                "spec": spec.name, "spec_file": spec.path, "module": f"{spec.name}/{version}",
                "prefix": str(target), "modulefiles": str(modulefiles), "format": fmt, "group": group,
                "published": time.time(), "by": getpass.getuser(), "sbom": str(sbom),
                "status": spec.status.value}, gid, umask)
            action = "replaced" if existed else "published"
            say(f"{spec.name}/{version}: {action}; module {content.full_name} at {path}; SBOM {sbom}")
            result.stacks.append(Published(spec.name, content.full_name, target, path, sbom, action,
                                           log=created.log, seconds=time.monotonic() - start))
        for p in modulefiles.rglob("*"):
            if p.is_dir() and not p.is_symlink():
                set_mode(p, gid, mod_umask, read_only=False)
    finally:
        os.umask(old_umask)
    if any(s.action != "unchanged" for s in result.stacks) or default:
        from envtool.modules import spider

        caches = spider.cache_dirs()
        if caches:
            paths = [p for p in os.environ.get("MODULEPATH", "").split(":") if p]
            if str(modulefiles) not in paths:
                paths.append(str(modulefiles))
            result.spider_caches = spider.refresh(":".join(paths), caches)
            say("refreshed Lmod's spider cache: " + ", ".join(result.spider_caches))
    return result

