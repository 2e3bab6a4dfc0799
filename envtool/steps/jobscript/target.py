"""The environment a job runs in, resolved for a site (:mod:`envtool.steps.jobscript`): the site
file, the spec, the modules loaded and the variables exported."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from envtool.core.errors import SpecError, UsageError
from envtool.core.prefix import PrefixData
from envtool.scheduler import launcher as launcher_mod

if TYPE_CHECKING:
    from envtool.scheduler.launcher import Launcher
    from envtool.scheduler.stage import Stage
    from envtool.spec.model import Spec
    from envtool.spec.sites import SiteFile


@dataclass(frozen=True)
class Target:
    """The environment a job runs in, resolved for a site.

    Attributes:
        site: the :class:`envtool.spec.sites.SiteFile`.
        spec: the spec resolved for the site (:class:`envtool.spec.model.Spec`), or None when the
            environment names none and ``--spec`` was not given.
        prefix: the environment's prefix, or None (a module).
        module: ``NAME/VERSION`` of the environment's module, or None.
        modules: every module loaded, in order.
        env: variables exported, in order (later entries already merged over earlier ones).
        env_paths: search-path entries added after them, ``(VAR, "prepend"|"append", entry)`` in order
            (the site's, its ``batch.env``'s, the spec's).
        launcher: the site's :class:`envtool.scheduler.launcher.Launcher`.
        kind: ``venv`` or ``conda`` where ``prefix`` is not on this machine (a staged copy), else None.
        stage: the :class:`envtool.scheduler.stage.Stage` that puts ``prefix`` on each node, or None.
        cpu_only: why the environment (for a staged one, the pack's source on this machine) computes
            on CPUs only (:func:`envtool.checks.gpu.cpu_only_build`: ``torch 2.13.0+cpu``), else None.
    """

    site: SiteFile
    spec: Optional[Spec]
    prefix: Optional[Path]
    module: Optional[str]
    modules: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    launcher: Optional[Launcher] = None
    python: str = "python"
    notes: Tuple[str, ...] = field(default=())
    env_paths: Tuple[Tuple[str, str, str], ...] = ()
    kind: Optional[str] = None
    stage: Optional[Stage] = None
    cpu_only: Optional[str] = None


def spec_of_prefix(prefix: Path) -> Optional[str]:
    """The spec an environment was created from (``P/.envtool/create.json`` ``spec``), or None."""
    meta = Path(prefix) / ".envtool" / "create.json"
    try:
        return json.loads(meta.read_text()).get("spec") or None
    except (OSError, ValueError, AttributeError):
        return None


def _prefix_path(prefix: Optional[str], here: bool) -> Optional[Path]:
    """``--prefix`` as an absolute path (None without one); with ``here`` it must be an environment here."""
    if not prefix:
        return None
    pfx = Path(prefix).expanduser().absolute()
    if here and not PrefixData(pfx).python.exists():
        raise UsageError(f"--prefix {prefix}: not an environment (no bin/python)")
    return pfx


def _load_site(site: Optional[str], site_file: Optional[str], spec: Optional[str],
               spec_name: Optional[str]) -> Tuple[Any, Optional[str]]:
    """``(site file, spec name)``: ``site_file``, else ``site``, else the spec's own site, else
    ``local``; a recorded spec that is gone (not ``--spec``) is dropped."""
    from envtool.spec import catalog, sites

    if site_file:
        if not Path(site_file).is_file():
            raise SpecError(site_file, "(site file)", "an existing site file")
        return sites.load_site(Path(site_file)), spec_name
    if site is None and spec_name:
        try:
            site = catalog.load_spec(spec_name).site.name
        except SpecError:
            if spec:
                raise
            spec_name = None  # the recorded spec is gone: go on without it
    return sites.load_site(sites.find(site or "local")), spec_name


def _own_spec_for_mismatch(spec_name: str, sf, pfx: Optional[Path], platform_mismatch_ok: bool):
    """The environment's own spec when it is for another platform than the site's (with
    ``platform_mismatch_ok``), None when it is gone.

    Raises:
        UsageError: the platforms differ without ``platform_mismatch_ok`` (naming both).
    """
    from envtool.spec import catalog

    try:
        own = catalog.load_spec(spec_name)
    except SpecError:
        return None
    message = (f"the environment {pfx} was created from spec {spec_name}, which is for "
               f"{', '.join(own.platforms)}; site {sf.name} runs {', '.join(sf.platforms)}")
    if not platform_mismatch_ok:
        raise UsageError(f"{message}: its programs would not run on the site's nodes; give an "
                         "environment made for the site, or pass --platform-mismatch-ok to write "
                         "the script anyway") from None
    return own


def _resolve_spec(spec_name: Optional[str], spec: Optional[str], sf, pfx: Optional[Path],
                  platform_mismatch_ok: bool) -> Tuple[Optional["Spec"], Any, bool]:
    """``(spec resolved for the site or None, its launcher mapping, platform mismatch)``."""
    from envtool.spec import sites

    if not spec_name:
        return None, None, False
    try:
        res = sites.resolve_full(spec_name, site_file=sf.path)
    except SpecError as exc:
        if exc.field == "platforms" and not spec:
            own = _own_spec_for_mismatch(spec_name, sf, pfx, platform_mismatch_ok)
            return own, None, own is not None
        if spec:
            raise
        return None, None, False
    return res.spec, res.mapping, False


def _modules(resolved_spec: Optional["Spec"], mismatch: bool, sf, module: Optional[str]) -> Tuple[str, ...]:
    """The modules loaded: the spec's site's (the site's on a mismatch or without a spec), then ``module``."""
    modules: List[str] = list(resolved_spec.site.modules if resolved_spec is not None and not mismatch
                              else sf.modules)
    if module:
        if module.startswith("-") or not module.strip():
            raise UsageError(f"--module {module!r}: expected NAME/VERSION")
        modules.append(module)
    return tuple(modules)


def resolve_target(prefix: Optional[str] = None, module: Optional[str] = None, spec: Optional[str] = None,
                   site: Optional[str] = None, site_file: Optional[str] = None, here: bool = True, retired_ok: bool = False,
                   platform_mismatch_ok: bool = False) -> Target:
    """Find the site file, the spec and what the job loads and exports.

    Args:
        prefix: ``--prefix`` (an environment directory), or None.
        module: ``--module NAME[/VERSION]``, or None (one of the two is needed).
        spec: ``--spec``; default the spec recorded in the prefix.
        site: ``--site`` name; default the spec's own site, else ``local``.
        site_file: ``--site-file`` path (wins over ``site``).
        here: the prefix must be an environment on this machine (False: a packed one's source,
            which may be gone).
        retired_ok: ``--retired-ok``: a site whose file says ``retired`` is allowed.
        platform_mismatch_ok: ``--platform-mismatch-ok``: the environment's recorded spec may be for
            another platform than the site's nodes (its variables and start method are kept; the
            site's modules are loaded).
    Returns:
        a :class:`Target`.
    Raises:
        UsageError: neither or both of prefix/module; no such prefix; a retired site without
            ``retired_ok``; the environment's spec runs on none of the site's platforms without
            ``platform_mismatch_ok`` (exit 2, naming both).
        SpecError: a bad or missing site file or spec (exit 2).
    """
    from envtool.checks.gpu import cpu_only_build

    if bool(prefix) == bool(module):
        raise UsageError("give one of --prefix P or --module NAME/VERSION")
    pfx = _prefix_path(prefix, here)
    sf, spec_name = _load_site(site, site_file, spec, spec or (spec_of_prefix(pfx) if pfx else None))
    if sf.retired is not None and not retired_ok:
        raise UsageError(f"site {sf.name} is retired ({sf.retired.describe()}): a job script for it cannot run "
                         "there; pass --retired-ok to write one anyway (to read or reproduce older work)")
    resolved_spec, mapping, mismatch = _resolve_spec(spec_name, spec, sf, pfx, platform_mismatch_ok)
    spec_site = resolved_spec.site if resolved_spec is not None and not mismatch else None
    env, env_paths = job_env(sf, resolved_spec, spec_site.env if spec_site is not None else sf.env,
                             spec_site.env_paths if spec_site is not None else sf.env_paths)
    return Target(site=sf, spec=resolved_spec, prefix=pfx, module=module,
                  modules=_modules(resolved_spec, mismatch, sf, module),
                  env=env, env_paths=env_paths, launcher=launcher_mod.for_site(sf, mapping),
                  python=str(PrefixData(pfx).python) if pfx else "python",
                  cpu_only=cpu_only_build(pfx) if pfx is not None else None)


def job_env(sf, resolved_spec, site_env, site_env_paths):
    """What a job exports, in order: the site's (or the spec's own site's) variables, then the
    site file's ``batch.env``, then the spec's ``env`` and its DataLoader start method
    (``ENVTOOL_START_METHOD``); and the search-path entries in the same order.

    Args:
        sf: the :class:`~envtool.spec.sites.SiteFile`.
        resolved_spec: the resolved spec, or None.
        site_env: ``(VAR, value)`` pairs of the site; site_env_paths: its ``(VAR, how, entry)``.
    Returns:
        ``((VAR, value), ...)`` (later wins) and ``((VAR, "prepend"|"append", entry), ...)``.
    """
    env: Dict[str, str] = dict(site_env)
    env.update(sf.batch.env)
    if resolved_spec is not None:
        env.update(resolved_spec.env)
        if resolved_spec.expect.dataloader_start_method:
            env["ENVTOOL_START_METHOD"] = resolved_spec.expect.dataloader_start_method
    env_paths = tuple(site_env_paths) + sf.batch.env_paths + (resolved_spec.env_paths if resolved_spec is not None
                                                              else ())
    return tuple(env.items()), env_paths


