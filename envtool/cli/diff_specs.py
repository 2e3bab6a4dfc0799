"""``envtool diff-specs A B``: what changes between two stacks (e.g. Open-CE 1.1.3 -> 1.2)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

from envtool.cli.common import name_arg, add_json, load_spec, path_arg, print_json

if TYPE_CHECKING:  # annotations only: 'envtool --help' need not import the spec model
    from envtool.spec.model import Pin, Spec


def register(sub: Any) -> None:
    p = sub.add_parser("diff-specs", help="show what changes between two specs",
                       description="Compare two resolved specs: distribution, Python, CUDA, platforms, channels, "
                                   "conda and pip packages (matched by package name), the Horovod section and its "
                                   "HOROVOD_* build variables, expectations, site and environment.")
    p.add_argument("a", type=name_arg, help="the first spec (name or file)")
    p.add_argument("b", type=name_arg, help="the second spec (name or file)")
    p.add_argument("--site", help="resolve both specs for this site")
    p.add_argument("--site-file", type=path_arg, help="resolve both specs with this site file")
    add_json(p)
    p.set_defaults(func=run)


def _package_name(pin: Pin) -> str:
    """The package name a loaded pin names (conda's normalized name, or PEP 503 normalized for
    pip: :attr:`~envtool.spec.model.Pin.name`), else its text."""
    return pin.name or pin.value


def flatten(spec: Spec) -> Dict[str, Optional[str]]:
    """The comparable facts of a spec as ``field -> display string`` (packages keyed by name).

    Args:
        spec: a resolved :class:`~envtool.spec.model.Spec`.
    Returns:
        an ordered mapping; absent facts are left out.
    """
    from envtool.horovod.flags import build_env

    out: Dict[str, Optional[str]] = {
        "distribution": f"{spec.distribution.name} {spec.distribution.version or ''}".strip(),
        "engine": spec.engine,
        "platforms": ", ".join(spec.platforms),
        "python": spec.python.value if spec.python else None,
        "cuda": spec.cuda.value if spec.cuda else None,
        "channels": ", ".join(spec.channels) or None,
    }
    for kind in ("conda", "pip"):
        for pin in getattr(spec.packages, kind):
            out[f"packages.{kind}.{_package_name(pin)}"] = pin.value
    h = spec.horovod
    out.update({"horovod.version": h.version.value if h.version else None, "horovod.install": h.install,
                "horovod.source": h.source})
    if h.install != "none":
        for k, v in build_env(spec):
            out[f"horovod.build_env.{k}"] = v
    cb = spec.expect.check_build
    out["expect.check_build"] = None if cb is None else "; ".join(
        ", ".join(x) or "-" for x in (cb.frameworks, cb.controllers, cb.tensor_operations))
    out["expect.dataloader_start_method"] = spec.expect.dataloader_start_method
    s = spec.site
    out.update({"site.name": s.name, "site.modules": " ".join(s.modules) or None, "site.base_env": s.base_env,
                "site.launcher": s.launcher, "site.scheduler": s.scheduler, "site.gpus_per_node": str(s.gpus_per_node)})
    from envtool.spec.model import env_path_text

    for k, v in list(s.env) + list(env_path_text(s.env_paths).items()):
        out[f"site.env.{k}"] = v
    for k, v in list(spec.env) + list(env_path_text(spec.env_paths).items()):
        out[f"env.{k}"] = v
    return {k: v for k, v in out.items() if v is not None}


def diff(a: Spec, b: Spec) -> List[Dict[str, Any]]:
    """Changes from spec ``a`` to spec ``b``: ``[{field, change: changed|added|removed, a, b}, …]``
    in ``a``'s field order, then fields only ``b`` has."""
    fa, fb = flatten(a), flatten(b)
    out = []
    for key in list(fa) + [k for k in fb if k not in fa]:
        va, vb = fa.get(key), fb.get(key)
        if va == vb:
            continue
        change = "changed" if va is not None and vb is not None else ("added" if va is None else "removed")
        out.append({"field": key, "change": change, "a": va, "b": vb})
    return out


def format_text(a: Spec, b: Spec, changes: List[Dict[str, Any]]) -> str:
    """One line per change: ``  field: old -> new``, ``+ field: new``, ``- field: old``."""
    lines = [f"{a.name} -> {b.name}: {len(changes)} change(s)"]
    for c in changes:
        if c["change"] == "changed":
            lines.append(f"  {c['field']}: {c['a']} -> {c['b']}")
        elif c["change"] == "added":
            lines.append(f"+ {c['field']}: {c['b']}")
        else:
            lines.append(f"- {c['field']}: {c['a']}")
    return "\n".join(lines)


def run(args: Any) -> int:
    a = load_spec(args.a, args.site, args.site_file)
    b = load_spec(args.b, args.site, args.site_file)
    changes = diff(a, b)
    if args.json:
        print_json({"a": a.name, "b": b.name, "a_file": a.path, "b_file": b.path, "changes": changes})
    else:
        print(format_text(a, b, changes))
    return 0
