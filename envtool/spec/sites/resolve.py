"""Resolving a spec for a site: the spec's ``extends`` chain, the site's stack entry (its
``overrides`` merged over the spec) and the site section replaced by the site's (see the package
docstring)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envtool.core.errors import SpecError
from envtool.core.inputs import check_input
from envtool.spec import catalog, load, rules
from envtool.spec import model as m
from envtool.spec.sites.files import SiteFile, StackMapping, find, load_site
from envtool.spec.yamlload import LineDict


def _merge_env(*parts: Tuple[Tuple[str, str], ...]) -> Tuple[Tuple[str, str], ...]:
    out: Dict[str, str] = {}
    for part in parts:
        for k, v in part:
            out.pop(k, None)
            out[k] = v
    return tuple(out.items())


@dataclass(frozen=True)
class Resolved:
    """A spec resolved for a site, with what was used to resolve it (for ``show``).

    Attributes:
        spec: the resolved spec.
        site: the site file.
        mapping: the stack entry applied, or None (site defaults only).
        spec_site: the spec's own site section before the overlay.
    """

    spec: m.Spec
    site: SiteFile
    mapping: Optional[StackMapping]
    spec_site: m.Site


def resolve_full(name: str, site: Optional[str] = None, site_file: Optional[str] = None) -> Resolved:
    """Load spec ``name`` and overlay the site (see the module docstring).

    Args:
        name: spec name or path, or the name of a site variant of the site file.
        site: site name (bundled or in ``$ENVTOOL_SITE_PATH``), or None.
        site_file: a site file path (wins over ``site``), or None.
    Returns:
        :class:`Resolved`.
    Raises:
        SpecError: the spec, the site file or the combination does not validate (no shared
            platform; a rule broken after the overrides), or the spec is abstract.
    """
    sf = _site_file(site, site_file)
    variant = _variant(name, sf)
    spath = catalog.find(variant.spec if variant is not None and variant.spec else name)
    raw = load.resolve_raw(spath, catalog.find)
    if raw.get("abstract") is True:
        raise SpecError(spath, "abstract", "a concrete spec (this one is only a parent for 'extends')",
                        line=raw.line_of("abstract"))
    spec_name = variant.key if variant is not None else str(raw.get("name") or spath.stem)
    mapping = variant if variant is not None else sf.mapping_for(spec_name)
    raw = _overlay_raw(raw, sf, mapping)
    spec = load.build_spec(str(spath), raw, name=spec_name)
    shared = tuple(p for p in spec.platforms if p in sf.platforms)
    if not shared:
        raise SpecError(sf.path, "platforms", f"a platform of spec {spec_name!r} ({', '.join(spec.platforms)})",
                        got=list(sf.platforms), hint=f"site {sf.name} cannot run {spec_name}")
    own_site = spec.site
    spec = dataclasses.replace(spec, site=_site_for(sf, mapping, own_site), platforms=shared)
    rules.check(spec, raw)
    return Resolved(spec=spec, site=sf, mapping=mapping, spec_site=own_site)


def _site_file(site: Optional[str], site_file: Optional[str]) -> SiteFile:
    """The site file of ``--site-file`` (wins) or ``--site`` (default ``local``), loaded.

    Raises:
        SpecError: no such site or file; the file does not validate.
        UsageError: ``--site-file`` is not a regular file (a FIFO, a device).
    """
    site_path = Path(site_file) if site_file else find(site or "local")
    if site_file:
        check_input(site_path, "--site-file")  # a FIFO or a device: exit 2 at once
    if site_file and not site_path.is_file():
        raise SpecError(site_file, "(site file)", "an existing site file")
    return load_site(site_path)


def _variant(name: str, sf: SiteFile) -> Optional[StackMapping]:
    """The site variant called ``name`` (a stack entry with ``spec:``) when ``name`` is no spec.

    Raises:
        SpecError: the variant's ``spec`` names no known spec.
    """
    if "/" in name or name.endswith((".yaml", ".yml")) or name in catalog.available():
        return None
    variant = next((s for s in sf.variants() if s.key == name), None)
    if variant is not None and (variant.spec is None or variant.spec not in catalog.available()):
        raise SpecError(sf.path, f"stacks.{variant.key}.spec", "the name of a known spec", got=variant.spec,
                        line=variant.line, hint="see 'envtool specs'")
    return variant


def _overlay_raw(raw: Any, sf: SiteFile, mapping: Optional[StackMapping]) -> Any:
    """The spec mapping with the site's ``sources`` added and the stack entry's ``overrides`` merged."""
    if sf.sources:
        own = raw.get("sources")
        if own is None or isinstance(own, dict):
            merged = LineDict(dict(sf.sources))
            merged.update(own or {})
            raw["sources"] = merged
    if mapping is not None and mapping.overrides:
        raw = load.merge(raw, mapping.overrides)
    return raw


def _site_modules(sf: SiteFile, mapping: Optional[StackMapping], own_site: m.Site) -> Tuple[str, ...]:
    """The site's modules, then the stack entry's (or, without an entry, the spec's own for this site)."""
    modules: List[str] = list(sf.modules)
    if mapping is not None:
        modules += [x for x in mapping.modules if x not in modules]
    elif own_site.name == sf.name:
        modules += [x for x in own_site.modules if x not in modules]
    return tuple(modules)


def _site_for(sf: SiteFile, mapping: Optional[StackMapping], own_site: m.Site) -> m.Site:
    """The spec's site section at ``sf``: the site's, the stack entry's and (when the spec names this
    site) the spec's own, in that order of precedence for each field."""
    same = own_site.name == sf.name
    entry = mapping if mapping is not None else StackMapping(key="")
    base_env = entry.base_env or (own_site.base_env if same else None)
    launcher = entry.launcher or sf.launcher or (own_site.launcher if same else None)
    return m.Site(name=sf.name, modules=_site_modules(sf, mapping, own_site), base_env=base_env, launcher=launcher,
                  scheduler=sf.scheduler, gpus_per_node=sf.gpus_per_node,
                  env=_merge_env(own_site.env if same else (), sf.env, entry.env),
                  build_caches=sf.build_caches, build_modules=sf.build_modules,
                  build_cache_group=sf.build_cache_group,
                  # the libraries the spec records are that site's modules'; another site's are unknown
                  libraries=own_site.libraries if same else (),
                  env_paths=(own_site.env_paths if same else ()) + sf.env_paths + entry.env_paths,
                  gpu=sf.gpu)


def resolve(name: str, site: Optional[str] = None, site_file: Optional[str] = None) -> m.Spec:
    """Spec ``name`` resolved for ``site`` / ``site_file`` (see :func:`resolve_full`).

    Returns:
        the resolved :class:`~envtool.spec.model.Spec`.
    Raises:
        SpecError: exit status 2.
    """
    return resolve_full(name, site=site, site_file=site_file).spec
