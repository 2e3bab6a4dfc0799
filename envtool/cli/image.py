"""``envtool image --prefix PREFIX|SPEC --output DIR [--site S|--site-file F] [--format dir,squashfs,oci] [--compile-horovod] [--dry-run] [--json]``:
a container image of an environment, built from its lockfile (:mod:`envtool.steps.image`).

Prints each form's path and size, the build time and the ``libmpi`` Horovod links inside the image;
``--json``: ``{"ok", "error", "exit", "output", "forms", "sizes", "seconds", "libmpi", "log", ...}``.
``--dry-run`` prints the plan (each step's title and shell-quoted commands) and changes nothing;
with ``--json``: ``{"ok", "error", "exit", "dry_run", "output", "plan": {…, "steps": [...]}}``.
"""
from __future__ import annotations

from envtool.cli.common import add_dry_run, add_environment_argument, add_json, path_arg, print_json


def register(sub) -> None:
    p = sub.add_parser("image", help="build a container image (directory, squashfs, OCI) of an environment from its lock",
                       description="Build a container image of an environment from the environment's lockfile (the "
                                   "same hashes as create): a Debian root file system made with mmdebstrap (or the "
                                   "site file's container.base), the environment at /opt/env, the Horovod wheel "
                                   "envtool built for it when that wheel's MPI has the ABI the site's "
                                   "container.mpi_abi names (else Horovod compiled inside the image against "
                                   "that MPI, with the environment's HOROVOD_* variables), and the SBOM at "
                                   "/opt/env/share/envtool/sbom.cdx.json. Forms: dir (ch-run DIR/rootfs), squashfs "
                                   "(DIR/image.sqfs) and oci (DIR/oci, an OCI image layout, tag env). Runs as root. "
                                   "See docs/guides/containers.md.")
    add_environment_argument(p, "the environment", spec_ok=True)
    p.add_argument("--output", "-o", required=True, type=path_arg, metavar="DIR",
                   help="the directory to create (must not exist)")
    p.add_argument("--site", help="a bundled site whose container section to use")
    p.add_argument("--site-file", type=path_arg, help="a site file whose container section to use (wins over --site)")
    p.add_argument("--retired-ok", action="store_true",
                   help="build for a site whose file says it is decommissioned (retired)")
    p.add_argument("--format", default="dir,squashfs,oci", metavar="FORMS",
                   help="comma-separated forms: dir, squashfs, oci (default all three)")
    p.add_argument("--compile-horovod", action="store_true",
                   help="compile Horovod inside the image (against the image's MPI of the site's ABI) even when the "
                        "environment's wheel could be reused; it is compiled anyway when that wheel's MPI is of "
                        "another ABI than the site's container.mpi_abi")
    add_dry_run(p, "built: the checks and the plan's steps with their commands")
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from envtool.steps import image

    request = _request(args)
    if args.dry_run:
        return _dry_run(args, request)
    result = image.build(request, verbose=args.verbose, quiet=args.quiet or args.json)
    if args.json:
        print_json(result.to_dict())
        return 0
    print(result.output)
    for form, path in result.forms.items():
        print(f"  {form:8} {path}  {result.sizes[form] / 1e6:.1f} MB")
    print(f"  from {result.lock}, base {result.base}, MPI ABI {result.mpi_abi}"
          + (f" (Horovod links {result.libmpi})" if result.libmpi else ""))
    hc = result.horovod_compiled
    if hc is not None:
        print(f"  Horovod compiled in the image: {hc.wheel} (SHA-256 {hc.sha256[:12]}…) against {hc.mpi}, "
              f"{hc.toolchain}; from {hc.sdist} (SHA-256 {hc.sdist_sha256[:12]}…)")
    print(f"  SBOM {image.SBOM_PATH} ({result.components} components), built in {result.seconds:.0f} s")
    print(f"  build log: {result.log}")
    return 0


def _request(args):
    """The :class:`~envtool.steps.image.request.ImageRequest` of the command line.

    Raises:
        UsageError: a retired site without ``--retired-ok``, a site without a container section (exit 2).
        SpecError: a site file that does not validate (exit 2).
    """
    from pathlib import Path

    from envtool.cli.common import environment_arg, prefix_given
    from envtool.core.errors import UsageError
    from envtool.spec import sites
    from envtool.steps.image import ImageRequest

    site = None
    if args.site_file:
        site = sites.load_site(Path(args.site_file))
    elif args.site:
        site = sites.load_site(sites.find(args.site))
    container = None
    if site is not None:  # a named site must say how it runs images (its MPI ABI, its base)
        from envtool.steps.jobscript.container_run import container_of

        if site.retired is not None and not args.retired_ok:
            raise UsageError(f"site {site.name}: {site.retired.describe()}; an image for it needs --retired-ok")
        container = container_of(site)
    return ImageRequest(prefix=environment_arg(prefix_given(args)), output=Path(args.output),
                        formats=tuple(f.strip() for f in args.format.split(",") if f.strip()), container=container,
                        site_caches=tuple(site.build_caches) if site else (),
                        cache_group=site.build_cache_group if site else None, compile_horovod=args.compile_horovod)


def _dry_run(args, request) -> int:
    """``image --dry-run``: the checks and the plan the build would run; nothing is made or changed."""
    from envtool.steps.image import dry_run_plan, format_plan

    plan = dry_run_plan(request)
    if args.json:
        print_json({"dry_run": True, "output": str(plan.job.inputs.output), "plan": plan.to_dict()})
        return 0
    print(format_plan(plan))
    print(f"dry run: would build the image at {plan.job.inputs.output}; nothing was changed")
    return 0
