"""``envtool specs``: the catalog as a release matrix, one row per spec (sortable, filterable)."""
from __future__ import annotations

from envtool.cli.common import add_json, print_json


def register(sub) -> None:
    p = sub.add_parser("specs", help="list the spec catalog as a release matrix",
                       description="One row per spec: distribution and version, Python, TensorFlow, PyTorch, "
                                   "Horovod and its backend (NCCL, DDL, MPI), how Horovod is installed, CUDA, "
                                   "platforms and site. Abstract parents (abstract: true) are left out. Specs "
                                   "come from $ENVTOOL_SPEC_PATH, then the bundled ones.")
    p.add_argument("--distribution", metavar="NAME", help="only this distribution (open-ce, ibm-wml-ce, "
                                                          "alcf-polaris, nersc, site, local)")
    p.add_argument("--has", action="append", default=[], metavar="REQ",
                   help="only specs whose pin satisfies REQ, e.g. 'horovod>=0.21', 'torch<2', 'cuda>=11' "
                        "(repeatable; all must hold)")
    p.add_argument("--sort", default="version", metavar="COL",
                   help="sort by a column: name, distribution, version (default), python, tensorflow, pytorch, "
                        "horovod, backend, install, cuda, platforms, site")
    p.add_argument("--site", help="resolve every spec for this site (and list the site's variants, such as "
                                  "Summit's per-Python open-ce modules); specs the site cannot run are left out")
    p.add_argument("--site-file", help="as --site, with a site file")
    add_json(p)
    p.set_defaults(func=run)


def catalog_specs(site=None, site_file=None):
    """Every concrete spec of the catalog, resolved (for ``site`` when given, followed then by the
    site's variants: stack entries with ``spec:``, listed under their own names).

    Returns:
        a list of :class:`~envtool.spec.model.Spec`.
    Raises:
        SpecError: a spec fails to load (exit 2; a spec the site cannot run is skipped instead).
    """
    from pathlib import Path

    from envtool.core.errors import SpecError
    from envtool.spec import catalog, sites
    from envtool.spec.yamlload import load_yaml

    out = []
    for name, path in sorted(catalog.available().items()):
        if load_yaml(path).get("abstract") is True:
            continue
        if site or site_file:
            try:
                out.append(sites.resolve(str(path), site=site, site_file=site_file))
            except SpecError as exc:
                site_path = Path(site_file) if site_file else sites.find(site)
                if exc.field == "platforms" and Path(exc.path).resolve() == site_path.resolve():
                    continue
                raise
        else:
            out.append(catalog.load_spec(str(path)))
    if site or site_file:
        # the site's variants (stack entries with ``spec:``, e.g. Summit's open-ce/1.1.3-py36-0)
        sf = sites.load_site(Path(site_file) if site_file else sites.find(site))
        for variant in sf.variants():
            out.append(sites.resolve(variant.key, site=site, site_file=site_file))
    return out


def run(args) -> int:
    from envtool.spec import matrix

    rows = matrix.build(catalog_specs(args.site, args.site_file), distribution=args.distribution, has=args.has,
                        sort=args.sort)
    if args.json:
        print_json([r.to_dict() for r in rows])
    else:
        print(matrix.format_table(rows) if rows else "no spec matches")
    return 0
