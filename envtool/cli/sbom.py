"""``envtool sbom``: a CycloneDX SBOM of an environment (:mod:`envtool.sbom`).

``envtool sbom --prefix P [--format cyclonedx-json] [--output FILE] [--name NAME] [--json]``
prints the SBOM (CycloneDX 1.6 JSON) on stdout, or writes it to FILE and prints the path
(``--json``: ``{"ok", "error", "exit", "path", "components"}``; without ``--output`` the SBOM itself
goes under ``"sbom"``). An environment this user cannot fully read is refused (exit 2).
"""
from __future__ import annotations

from envtool.cli.common import add_json, name_arg, path_arg, print_json


def register(sub) -> None:
    p = sub.add_parser("sbom", help="write a CycloneDX SBOM of an environment",
                       description="A CycloneDX software bill of materials of the environment at --prefix: conda "
                                   "packages as pkg:conda purls with channel and hashes, pip distributions as "
                                   "pkg:pypi purls, Horovod with the HOROVOD_* variables and fix rules envtool "
                                   "built it with.")
    p.add_argument("--prefix", required=True, type=path_arg, help="the environment's prefix")
    p.add_argument("--format", default="cyclonedx-json", choices=("cyclonedx-json",),
                   help="output format (CycloneDX 1.6 JSON)")
    p.add_argument("--output", "-o", type=path_arg, metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--name", type=name_arg, help="the environment's name in the SBOM (default: the prefix's directory name)")
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import sys
    from pathlib import Path

    from envtool.core.errors import UsageError
    from envtool.sbom import build_bom, render, write_sbom

    if args.output:
        out = Path(args.output).absolute()
        if not out.parent.is_dir():
            raise UsageError(f"--output: {out.parent} is not a directory")
        write_sbom(Path(args.prefix), out, name=args.name)
        if args.json:
            import json

            data = json.loads(out.read_text())
            print_json({"path": str(out), "format": args.format, "components": len(data.get("components", []))})
        else:
            print(out)
        return 0
    text = render(build_bom(Path(args.prefix), name=args.name), args.format)
    if args.json:  # one object with ok/error/exit, the SBOM under "sbom"
        import json

        data = json.loads(text)
        print_json({"format": args.format, "components": len(data.get("components", [])), "sbom": data})
        return 0
    sys.stdout.write(text)
    return 0
