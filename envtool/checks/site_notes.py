"""Check ``site-warnings``: what the site file says users of this stack must know there.

A site file's stack entry may carry a ``warning`` (``sites/bede.yaml``: WML-CE was archived by
IBM and WML-CE 1.7 may not work on RHEL 8, Bede's documentation, ``N8-CIR-Bede/documentation@338157492d38:software/applications/wmlce.rst#L18``). When
doctor knows both the spec and the site, it reports that warning with the entry's source.
"""
from __future__ import annotations

from envtool.checks.registry import check, finding

ID = "site-warnings"


@check(ID, "What the site file warns about this stack", order=95,
       fix="read the site file's warning; use the stack it recommends")
def run(ctx):
    from envtool.core.errors import SpecError
    from envtool.spec import provenance, sites

    spec, site = ctx.spec, ctx.site
    site_name = getattr(site, "name", None)
    if spec is None or not site_name:
        return finding(ID, "skipped", "give --spec (and --site) to see what the site file says about the stack")
    try:
        sf = sites.load_site(sites.find(site_name))
    except SpecError:
        return finding(ID, "skipped", f"site {site_name!r} has no site file here")
    mapping = sf.mapping_for(spec.name)
    if mapping is None or not mapping.warning:
        return finding(ID, "ok", f"site {sf.name} has no warning for {spec.name}", site=sf.name)
    text = dict(sf.sources).get(mapping.source or "")
    ref = provenance.parse(text) if text else None
    where = ref.where() if ref else None
    return finding(ID, "warn", f"{sf.name}, stack {mapping.key}: {mapping.warning}",
                   "pick another spec for this site (see the site file's note)", site=sf.name,
                   stack=mapping.key, source=mapping.source, where=where)
