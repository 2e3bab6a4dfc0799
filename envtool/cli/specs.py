"""``envtool specs``: the catalog as a release matrix, one row per spec (sortable, filterable)."""
from __future__ import annotations

from envtool.cli.common import add_json, path_arg, print_json


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
    p.add_argument("--site-file", type=path_arg, help="as --site, with a site file")
    add_json(p)
    p.set_defaults(func=run)


def catalog_specs(site=None, site_file=None, errors=None):
    """Every concrete spec of the catalog, resolved (for ``site`` when given, followed then by the
    site's variants: stack entries with ``spec:``, listed under their own names).

    Args:
        site / site_file: resolve for this site (a spec the site cannot run is skipped).
        errors: a list: a spec file that fails to load is left out and its ``SpecError``
            appended here; None: the first such error is raised.
    Returns:
        a list of :class:`~envtool.spec.model.Spec`.
    Raises:
        SpecError: a spec fails to load and ``errors`` is None (exit 2); the site file itself is bad.
    """
    from pathlib import Path

    from envtool.core.errors import SpecError
    from envtool.spec import catalog
    from envtool.spec.yamlload import load_yaml

    out = []
    site_path = None
    if site or site_file:
        from envtool.spec import sites  # lazy: only with a site

        site_path = Path(site_file) if site_file else sites.find(site)
    site_file_ = sites.load_site(site_path) if site_path is not None else None
    for name, path in sorted(catalog.available().items()):
        try:
            if load_yaml(path).get("abstract") is True:
                continue
            if site_file_ is not None and site_file_.stacks and site_file_.mapping_for(name) is None:
                continue  # a site that lists its stacks offers those only
            if site_path is not None:
                try:
                    out.append(sites.resolve(str(path), site=site, site_file=site_file))
                except SpecError as exc:
                    if exc.field == "platforms" and Path(exc.path).resolve() == site_path.resolve():
                        continue
                    raise
            else:
                out.append(catalog.load_spec(str(path)))
        except SpecError as exc:
            if errors is None or (site_path is not None and Path(exc.path).resolve() == site_path.resolve()):
                raise
            errors.append(exc)
    if site_file_ is not None:
        # the site's variants (stack entries with ``spec:``, e.g. Summit's open-ce/1.1.3-py36-0)
        for variant in site_file_.variants():
            out.append(sites.resolve(variant.key, site=site, site_file=site_file))
    return out


def _retired_sites(names, site=None, site_file=None):
    """Site name -> a line saying it is retired (``decommissioned 2024-11-15 (source: URL)``), or None,
    for every name in ``names`` (the SITE column) and the ``--site``/``--site-file`` given."""
    from envtool.spec import sites

    out = {}
    for name in set(names):
        r = sites.retirement(name)
        out[name] = r.describe() if r is not None else None
    if site_file:
        try:
            sf = sites.load_site(__import__("pathlib").Path(site_file))
            out[sf.name] = sf.retired.describe() if sf.retired else None
        except Exception:  # reported by catalog_specs already
            pass
    return out


def run(args) -> int:
    import sys

    from envtool.spec.table import COLUMNS, Row

    errors: list = []
    rows, retired = _matrix(args, errors)
    if args.json:
        from envtool.spec.matrix_cache import rows_for_json

        print_json({"specs": rows_for_json(rows, retired)})
    elif not rows:
        print("no spec matches")
    else:
        from envtool.spec.table import fit_columns, format_table

        table = [Row(**r) for r in rows]
        width = _table_width()
        columns = fit_columns(table, width)
        print(format_table(table, columns))
        left_out = [c for c in COLUMNS if c not in columns]
        if left_out:
            from envtool.core.term import fit

            print(fit(f"({len(left_out)} columns left out to fit {width}: {', '.join(left_out)}; "
                      "--json shows all)", width), file=sys.stderr)
        for name, text in sorted(retired.items()):
            if text:
                note = f"note: site {name} is retired: {text}"
                if width:  # prose wraps at word boundaries to the table's width (URLs stay whole)
                    import textwrap

                    note = textwrap.fill(note, width, subsequent_indent="  ", break_long_words=False,
                                         break_on_hyphens=False)
                print(note)
    for exc in errors:  # the rest is listed; each bad file is named, and the exit status says so
        print(f"envtool: error: skipped a spec file that does not load: {exc}", file=sys.stderr)
    return 2 if errors else 0


def _matrix(args, errors):
    """``(rows as {column: str} in table order, site name -> retirement line or None)`` for ``args``.

    The whole catalog with no filter and the default sort is remembered between runs
    (:mod:`envtool.spec.matrix_cache`: its inputs unchanged, it is printed as it was, without
    reading a spec); anything else, or a catalog with a bad file, is read each time. A spec file
    that does not load is appended to ``errors`` (SpecError).
    """
    from dataclasses import fields

    from envtool.spec import matrix_cache, search
    from envtool.spec.table import Row

    plain = not (args.site or args.site_file or args.has or args.distribution) and args.sort == "version"
    key = None
    if plain:
        try:
            key = matrix_cache.inputs_key(search.available(), search.available("sites", "ENVTOOL_SITE_PATH"))
        except OSError:  # a file that cannot be read: the catalog read below names it
            key = None
        got = matrix_cache.read(key, [f.name for f in fields(Row)]) if key is not None else None
        if got is not None:
            return got
    from envtool.spec import matrix

    rows = matrix.build(catalog_specs(args.site, args.site_file, errors=errors), distribution=args.distribution,
                        has=args.has, sort=args.sort)
    if not (args.site or args.site_file):
        rows = _with_mapped_sites(rows, errors)
    retired = _retired_sites([n for r in rows for n in r.site.split(",")], args.site, args.site_file)
    out = [r.to_dict() for r in rows]
    if key is not None and not errors:
        matrix_cache.write(key, out, retired)
    return out, retired


def _table_width():
    """Columns the table may use (:func:`envtool.core.term.table_width`)."""
    from envtool.core import term

    return term.table_width()


def _with_mapped_sites(rows, errors):
    """``rows`` with the SITE of each spec that names no site of its own (``local``) replaced by
    the sites whose site files map it in ``stacks`` (exact key or glob), comma-separated; a spec
    no site maps stays ``local``. A site file that does not load is reported in ``errors``."""
    from dataclasses import replace

    from envtool.core.errors import SpecError
    from envtool.spec import sites

    loaded = []
    for name, path in sorted(sites.available().items()):
        try:
            loaded.append((name, sites.load_site(path)))
        except SpecError as exc:
            errors.append(exc)
    out = []
    for r in rows:
        if r.site == "local":
            mapped = [name for name, sf in loaded if name != "local" and sf.mapping_for(r.name) is not None]
            if mapped:
                r = replace(r, site=",".join(mapped))
        out.append(r)
    return out
