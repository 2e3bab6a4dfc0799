"""Check 7, environment hygiene: ``user-site``, ``read-only``, ``site-modules``, ``lock-drift``.

* ``user-site``: packages in the user site (``~/.local/lib/pythonX.Y/site-packages`` or
  ``$PYTHONUSERBASE/…``, as the env's own interpreter computes it) that the env also holds.
  In a conda env or any non-venv prefix ``site.main()`` adds the user site *before* the
  prefix's site-packages (CPython Lib/site.py@3.11: ``addusersitepackages`` runs before
  ``addsitepackages``), so they win: a failure. A venv adds its own site-packages first and
  disables the user site unless it includes system site packages; there the copies are a
  latent hazard (a warning). The judgement reads the env's real ``sys.path`` order.
* ``read-only``: the prefix cannot be written (shared site env): install nothing into it,
  clone it (``envtool create SPEC --clone PREFIX``).
* ``site-modules``: modules the spec/site needs that ``LOADEDMODULES`` does not list.
* ``lock-drift``: the prefix against ``--lock`` (``envtool.lock``).
* ``clone-base``: a clone layered on another environment (``envtool clone`` of a venv, e.g. a
  published version) whose base is gone (``envtool retire``): Python skips a ``.pth`` line naming
  a missing directory without a word, so the base's packages silently vanish from the clone.
"""
from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path
from typing import Dict, Set

from envtool.checks.registry import check, finding

_SKIP = {"__pycache__", "_distutils_hack", "distutils-precedence.pth"}


def top_level_names(site_dir: Path) -> Set[str]:
    """Importable top-level names in ``site_dir`` (packages, modules, extension modules)."""
    out: Set[str] = set()
    try:
        entries = list(Path(site_dir).iterdir())
    except OSError:
        return out
    for p in entries:
        name = p.name
        if name in _SKIP or name.endswith((".dist-info", ".egg-info", ".pth", ".data")) or name.startswith("."):
            continue
        if p.is_dir():
            if name.isidentifier():
                out.add(name)
        elif name.endswith(".py"):
            out.add(name[:-3])
        elif name.endswith((".so", ".pyd")):
            out.add(name.split(".")[0])
    return out


def distributions(site_dir: Path) -> Dict[str, str]:
    """``{canonical name: version}`` of the distributions in ``site_dir``."""
    from importlib import metadata

    from packaging.utils import canonicalize_name

    out = {}
    for dist in metadata.distributions(path=[str(site_dir)]):
        name = (dist.metadata["Name"] or "").strip()
        if name:
            out[str(canonicalize_name(name))] = dist.version
    return out


@check("user-site", "User-site packages shadowing the env's", needs=("info",), order=70,
       fix="export PYTHONNOUSERSITE=1 (or remove the user-site copies)")
def run_user_site(ctx):
    from envtool.checks.common import installed_pip
    from envtool.core.prefix import PrefixData

    info = ctx.probe("info")
    if info.error:
        return finding("user-site", "skipped", f"no answer from the environment's interpreter: {info.error}")
    user_site = info.data.get("user_site")
    enabled = bool(info.data.get("enable_user_site"))
    if not user_site or not Path(user_site).is_dir():
        return finding("user-site", "ok", f"no user site directory ({user_site})", user_site=user_site,
                       enabled=enabled)
    env_sp = PrefixData(Path(ctx.prefix)).site_packages
    user_dists = distributions(Path(user_site))
    env_dists = installed_pip(Path(ctx.prefix))
    clash_dists = sorted(set(user_dists) & set(env_dists))
    clash_mods = sorted(top_level_names(Path(user_site)) & (top_level_names(env_sp) if env_sp else set()))
    sys_path = info.data.get("sys_path") or []
    before = enabled and user_site in sys_path and (
        env_sp is None or str(env_sp) not in sys_path or sys_path.index(user_site) < sys_path.index(str(env_sp)))
    items = [f"{n} {user_dists[n]} in {user_site} vs {env_dists[n]} in the env" for n in clash_dists]
    items += [f"module {m}: {user_site}/{m} vs {env_sp}/{m}" for m in clash_mods
              if not any(m.replace("_", "-") == d or m == d.replace("-", "_") for d in clash_dists)]
    details = {"user_site": user_site, "enabled": enabled, "shadowing_distributions": clash_dists,
               "shadowing_modules": clash_mods, "user_distributions": user_dists}
    if not items:
        visible = f"; {len(user_dists)} package(s) there are importable" if enabled and user_dists else ""
        return finding("user-site", "ok", f"nothing in {user_site} shadows the env{visible}", **details)
    names = ", ".join(clash_dists or clash_mods)
    if before:
        return finding("user-site", "fail", f"user-site packages shadow the env's: {names} (imported from {user_site})",
                       "export PYTHONNOUSERSITE=1 before running (and in the env's modulefile), or remove them: "
                       + f"rm -r {shlex.quote(user_site)}/<package>", items=items, **details)
    return finding("user-site", "warn", f"{user_site} holds {names}, which would shadow the env's; inactive here "
                   "(this interpreter disables the user site)",
                   "remove them or export PYTHONNOUSERSITE=1 so that a conda env or python -m site run cannot pick "
                   "them up", items=items, **details)


def is_read_only(path: Path) -> str:
    """Why ``path`` cannot be written ('' when it can): a read-only mount, no write permission
    for this user, or (as root, where permissions do not stop writes) no write bit at all."""
    try:
        st = os.stat(path)
        vfs = os.statvfs(path)
    except OSError as exc:
        return f"cannot stat {path}: {exc.strerror}"
    if vfs.f_flag & os.ST_RDONLY:
        return f"{path} is on a read-only mount"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            return f"{path} has no write permission bits (mode {stat.filemode(st.st_mode)})"
        return ""
    if not os.access(path, os.W_OK):
        return f"{path} is not writable by this user (mode {stat.filemode(st.st_mode)})"
    return ""


@check("read-only", "Environment writable", order=71, fix="clone it: envtool create SPEC --clone PREFIX")
def run_read_only(ctx):
    from envtool.core.prefix import PrefixData

    targets = [Path(ctx.prefix)]
    sp = PrefixData(Path(ctx.prefix)).site_packages
    if sp is not None:
        targets.append(sp)
    reasons = [r for r in (is_read_only(t) for t in targets) if r]
    if not reasons:
        return finding("read-only", "ok", f"{ctx.prefix} is writable")
    name = ctx.spec.name if ctx.spec is not None else "SPEC"
    target = "~/envs/" + shlex.quote(Path(ctx.prefix).name)  # ~ stays unquoted so that the shell expands it
    return finding("read-only", "warn", f"the environment is read-only: {reasons[0]}",
                   f"clone it to a prefix you own: envtool create {shlex.quote(name)} --clone {shlex.quote(str(ctx.prefix))} "
                   f"--prefix {target}", items=reasons)


def _loaded(module: str, loaded) -> bool:
    for entry in loaded:
        if entry == module or ("/" not in module and entry.split("/")[0] == module):
            return True
    return False


@check("site-modules", "Site modules loaded", order=72, fix="module load the site's modules")
def run_site_modules(ctx):
    site = ctx.site
    if site is None:
        return finding("site-modules", "skipped", "no --spec or --site: no site modules to check")
    needed = tuple(getattr(site, "modules", ()) or ())
    if not needed:
        return finding("site-modules", "ok", f"site {site.name!r} needs no modules", site=site.name)
    loaded = [m for m in ctx.environ.get("LOADEDMODULES", "").split(":") if m]
    missing = [m for m in needed if not _loaded(m, loaded)]
    details = {"site": site.name, "needed": list(needed), "loaded": loaded, "missing": missing}
    if missing:
        return finding("site-modules", "fail", f"site {site.name!r} needs modules that are not loaded: "
                       + ", ".join(missing), "module load " + shlex.join(needed), **details)
    return finding("site-modules", "ok", "loaded: " + ", ".join(needed), **details)


def _published_siblings(source: Path):
    """Other versions ``envtool publish`` made beside ``source`` (``ROOT/NAME/*`` with the publish
    marker), oldest to newest by version (``packaging.version``; names that are no version last)."""
    from packaging.version import InvalidVersion, Version

    def key(p: Path):
        try:
            return (0, Version(p.name), "")
        except InvalidVersion:
            return (1, Version("0"), p.name)
    try:
        found = [p for p in Path(source).parent.iterdir()
                 if p != Path(source) and (p / ".envtool" / "publish.json").is_file()]
    except OSError:
        return []
    return sorted(found, key=key)


@check("clone-base", "The environment a clone is layered on is still there", order=5,
       fix="re-clone from an environment that exists: envtool clone SOURCE --prefix PREFIX --force")
def clone_base(ctx):
    """``fail`` when ``ctx.prefix`` is a layered clone whose base is gone (the fix names a published
    version beside it, when there is one), ``ok`` when the base is there, else ``skipped``."""
    from envtool.engines.clone_steps import layer_base

    base = layer_base(Path(ctx.prefix))
    if base is None:
        return finding("clone-base", "skipped", "not a clone layered on another environment")
    what = f"{base.module} ({base.source})" if base.module else base.source
    if base.present:
        return finding("clone-base", "ok", f"layered on {what}, which is there", source=base.source,
                       module=base.module)
    prefix = shlex.quote(str(ctx.prefix))
    others = _published_siblings(Path(base.source))
    gone = "was retired" if base.module else "is gone"
    if others:
        redo = f"re-clone from a version still published: envtool clone {shlex.quote(str(others[-1]))} --prefix {prefix} --force"
        if len(others) > 1:
            redo += f" (published beside it: {', '.join(p.name for p in others)})"
    else:
        redo = (f"no other version is published beside it: clone or create another environment, then "
                f"envtool clone SOURCE --prefix {prefix} --force")
    from envtool.core.prefix import PrefixData

    sp = PrefixData(Path(ctx.prefix)).site_packages
    keep = (f"; packages you installed into the clone are not carried over: list them first with "
            f"{shlex.quote(str(Path(ctx.prefix) / 'bin' / 'python'))} -m pip list --path {shlex.quote(str(sp))}"
            if sp else "")
    return finding("clone-base", "fail", f"base {what} {gone}: this clone is layered on it, so the packages "
                   "it provided (Horovod, the framework) are missing here", redo + keep, source=base.source, module=base.module,
                   items=[f"{base.site_packages or base.source} no longer exists"])


@check("lock-drift", "Drift against the lockfile (--lock)", order=73,
       fix="recreate from the lock: envtool create SPEC --from-lock LOCK --force")
def run_lock_drift(ctx):
    if ctx.lock is None:
        return finding("lock-drift", "skipped", "no --lock given")
    from envtool.checks import lockdrift

    return lockdrift.check(ctx)
