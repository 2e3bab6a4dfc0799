"""``envtool show SPEC [--site S]``: the fully resolved spec, with the provenance of every pin."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envtool.cli.common import add_json, name_arg, path_arg, print_json


def register(sub) -> None:
    p = sub.add_parser("show", help="show a spec fully resolved (extends merged, site applied) with provenance",
                       description="Print the resolved spec: every pin with its provenance mark (V verified in a "
                                   "primary source, V2 secondary, I inferred), its source and the file that set "
                                   "it; the Horovod build variables; the site's modules, base env and launcher.")
    p.add_argument("spec", type=name_arg, help="spec name (see 'envtool specs') or path to a spec file")
    p.add_argument("--site", help="resolve for this site (bundled: summit, perlmutter, polaris, bede, local)")
    p.add_argument("--site-file", type=path_arg, help="resolve with this site file")
    p.add_argument("--sources", action="store_true",
                   help="list only the pins, each with its mark and where it can be read (repository file at a "
                        "tag with line, URL, or seed line), then the site mapping's source")
    add_json(p)
    p.set_defaults(func=run)


def _chain(path: Path) -> List[Tuple[str, Any]]:
    """``[(file, raw mapping), …]`` from the spec file to its root parent."""
    from envtool.spec import catalog
    from envtool.spec.load import parent_path
    from envtool.spec.yamlload import load_yaml

    out: List[Tuple[str, Any]] = []
    seen = set()
    current: Optional[Path] = path
    while current is not None and str(current) not in seen:
        seen.add(str(current))
        raw = load_yaml(current)
        out.append((str(current), raw))
        parent = raw.get("extends")
        current = parent_path(current, parent, raw.line_of("extends"), catalog.find) if parent else None
    return out


def _env_word(key: str, value: Any) -> str:
    """A value of ``env`` for the text listing: the value, or ``/x/bin:$PATH`` for a prepend/append."""
    if isinstance(value, dict):
        return ":".join(list(value.get("prepend", [])) + [f"${key}"] + list(value.get("append", [])))
    return str(value)


def _defined_in(chain, field: str, overrides=None, site_path: Optional[str] = None) -> Optional[str]:
    """The file that sets ``field`` (``python``, ``packages.conda``, ``horovod.version``): the site
    file when its stack overrides set it, else the nearest file of the ``extends`` chain."""
    parts = field.split("[")[0].split(".")

    def has(mapping) -> bool:
        for part in parts:
            if not isinstance(mapping, dict) or part not in mapping:
                return False
            mapping = mapping[part]
        return True

    if overrides is not None and has(overrides):
        return site_path
    for file, raw in chain:
        if has(raw):
            return file
    return None


def describe(name: str, site: Optional[str] = None, site_file: Optional[str] = None) -> Dict[str, Any]:
    """The resolved spec as a JSON-ready mapping with provenance (what ``show --json`` prints).

    Raises:
        SpecError: exit 2.
    """
    from envtool.horovod.flags import build_env
    from envtool.spec.model import env_path_edits
    from envtool.spec import catalog, channels, provenance, sites
    from envtool.spec.model import MARKS

    resolved = None
    if site or site_file:
        resolved = sites.resolve_full(name, site=site, site_file=site_file)
        spec = resolved.spec
    else:
        spec = catalog.load_spec(name)
    chain = _chain(Path(spec.path)) if spec.path else []
    overrides = resolved.mapping.overrides if resolved and resolved.mapping else None
    site_path = resolved.site.path if resolved else None
    sources = dict(spec.sources)
    def where(sid: Optional[str]) -> Dict[str, Any]:
        text = sources.get(sid or "")
        ref = provenance.parse(text) if text else None
        return {"source_ref": text, "source_kind": ref.kind if ref else None,
                "where": ref.where() if ref else None}

    pins = []
    for field, pin in spec.pins():
        pins.append({"field": field, "value": pin.value, "mark": pin.mark,
                     "mark_meaning": MARKS.get(pin.mark or "", "no mark"), "source": pin.source,
                     **where(pin.source), "note": pin.note, "index": pin.index,
                     "defined_in": _defined_in(chain, field, overrides, site_path)})
    h = spec.horovod
    horovod = {"version": h.version.value if h.version else None, "install": h.install, "source": h.source,
               "frameworks": list(h.frameworks), "controllers": list(h.controllers),
               "gpu_operations": h.gpu_operations, "gpu_ops": dict(h.gpu_ops), "cpu_operations": h.cpu_operations,
               "nccl_link": h.nccl_link, "cuda_home": h.cuda_home, "nccl_home": h.nccl_home,
               "cuda_cc_list": h.cuda_cc_list, "extra_env": dict(h.extra_env),
               "build_packages": [p.value for p in h.build_packages],
               "build_env": dict(build_env(spec)) if h.install != "none" else {}}
    cb = spec.expect.check_build
    site_info: Dict[str, Any] = {"name": spec.site.name, "modules": list(spec.site.modules),
                                 "base_env": spec.site.base_env, "launcher": spec.site.launcher,
                                 "scheduler": spec.site.scheduler, "gpus_per_node": spec.site.gpus_per_node,
                                 "env": {**dict(spec.site.env), **env_path_edits(spec.site.env_paths)},
                                 "libraries": {n: p.value for n, p in spec.site.libraries}}
    retired = resolved.site.retired if resolved is not None else sites.retirement(spec.site.name)
    site_info["retired"] = None if retired is None else {
        "date": retired.date, "source": retired.source, "source_ref": retired.source_ref, "note": retired.note}
    if resolved is not None:
        m = resolved.mapping
        site_info["site_file"] = resolved.site.path
        site_info["site_sources"] = dict(resolved.site.sources)
        site_sources = dict(resolved.site.sources)
        ref = provenance.parse(site_sources.get(m.source or "", "")) if m is not None and m.source else None
        site_info["stack"] = None if m is None else {
            "key": m.key, "spec": m.spec, "mark": m.mark, "source": m.source,
            "source_ref": site_sources.get(m.source or ""), "source_kind": ref.kind if ref else None,
            "where": ref.where() if ref else None, "note": m.note, "warning": m.warning,
            "overrides": sorted(m.overrides) if m.overrides else []}
    return {
        "name": spec.name, "path": spec.path, "extends": [f for f, _ in chain[1:]], "summary": spec.summary,
        "distribution": {"name": spec.distribution.name, "version": spec.distribution.version},
        "platforms": list(spec.platforms), "engine": spec.engine,
        "venv": {"system_site_packages": spec.venv.system_site_packages}, "channels": list(spec.channels),
        "channel_urls": channels.expand(spec.channels, spec.platforms[0] if spec.platforms else None),
        "pins": pins, "horovod": horovod,
        "expect": {"check_build": None if cb is None else {"frameworks": list(cb.frameworks),
                                                           "controllers": list(cb.controllers),
                                                           "tensor_operations": list(cb.tensor_operations)},
                   "dataloader_start_method": spec.expect.dataloader_start_method},
        "site": site_info, "env": {**dict(spec.env), **env_path_edits(spec.env_paths)}, "sources": sources,
        "notes": spec.notes,
        "status": {"value": spec.status.value, "since": spec.status.since, "source": spec.status.source,
                   "note": spec.status.note},
    }


def format_text(d: Dict[str, Any]) -> str:
    """Readable form of :func:`describe`'s mapping."""
    lines = [f"{d['name']}: {d['summary']}", f"  file: {d['path']}"]
    if d["extends"]:
        lines.append("  extends: " + " -> ".join(d["extends"]))
    st = d["status"]
    if st["value"] != "active":
        lines.append(f"  status: {st['value']}" + (f" since {st['since']}" if st["since"] else "")
                     + (f" [{st['source']}]" if st["source"] else "") + (f": {st['note']}" if st["note"] else ""))
    dist = d["distribution"]
    lines += [f"  distribution: {dist['name']} {dist['version'] or ''}".rstrip(),
              f"  platforms: {', '.join(d['platforms'])}; engine: {d['engine']}"
              + (" (venv --system-site-packages)" if d["venv"]["system_site_packages"] else ""),
              f"  channels: {', '.join(d['channels']) or '-'}"]
    if d["channel_urls"] != d["channels"]:
        lines.append(f"  channel URLs: {', '.join(d['channel_urls'])}  ({channels_note()})")
    lines += ["", "Pins (mark: V primary, V2 secondary, I inferred):"]
    width = max([len(p["field"]) for p in d["pins"]] + [5])
    vwidth = max([len(p["value"]) for p in d["pins"]] + [5])
    for p in d["pins"]:
        where = Path(p["defined_in"]).name if p["defined_in"] else "?"
        lines.append(f"  {p['field'].ljust(width)}  {p['value'].ljust(vwidth)}  [{p['mark'] or '-'}] "
                     f"{p['source'] or '-'} ({where})" + (f" - {p['note']}" if p["note"] else ""))
        if p.get("index"):
            lines.append(f"  {''.ljust(width)}  from the index {p['index']}")
    h = d["horovod"]
    lines += ["", f"Horovod: {h['version'] or '-'} ({h['install']})"]
    if h["source"]:
        lines.append(f"  source: {h['source']}")
    if h["build_env"]:
        lines.append("  build: " + " ".join(f"{k}={v}" for k, v in h["build_env"].items()))
    if h["build_packages"]:
        lines.append("  build-only packages (removed after the build): " + ", ".join(h["build_packages"]))
        if h["install"] == "conda":
            lines.append("  (the channel's package was built so; envtool installs it, it does not build it)")
    cb = d["expect"]["check_build"]
    lines.append("  expect --check-build: " + ("none (no --check-build for this Horovod)" if cb is None else
                                               "; ".join(", ".join(cb[k]) or "-" for k in
                                                         ("frameworks", "controllers", "tensor_operations"))))
    if d["expect"]["dataloader_start_method"]:
        lines.append(f"  DataLoader start method: {d['expect']['dataloader_start_method']}")
    s = d["site"]
    lines += ["", f"Site: {s['name']}" + (f" ({s['site_file']})" if s.get("site_file") else ""),
              f"  modules: {' '.join(s['modules']) or '-'}", f"  base env: {s['base_env'] or '-'}",
              f"  launcher: {s['launcher'] or '-'}; scheduler: {s['scheduler'] or '-'}; "
              f"GPUs per node: {s['gpus_per_node']}"]
    if s.get("retired"):
        from envtool.spec.sites import Retirement

        lines.insert(-3, f"  RETIRED: {s['name']} was {Retirement(**s['retired']).describe()}; job scripts for it "
                         "need --retired-ok")
    if s["env"]:
        lines.append("  env: " + " ".join(f"{k}={_env_word(k, v)}" for k, v in s["env"].items()))
    if s.get("libraries"):
        lines.append("  libraries from the site's modules: " + ", ".join(f"{k} {v}" for k, v in s["libraries"].items()))
    stack = s.get("stack")
    if stack:
        lines.append(f"  mapping: stacks.{stack['key']} [{stack['mark'] or '-'}] {stack['source'] or '-'}"
                     + (f" (variant of {stack['spec']})" if stack["spec"] else "")
                     + (f" - {stack['note']}" if stack["note"] else ""))
        if stack["warning"]:
            lines.append(f"  WARNING: {stack['warning']}")
        if stack["overrides"]:
            lines.append("  overrides: " + ", ".join(stack["overrides"]))
    elif "stack" in s:
        lines.append("  mapping: none for this spec (site defaults only)")
    if d["env"]:
        lines += ["", "Environment: " + " ".join(f"{k}={_env_word(k, v)}" for k, v in d["env"].items())]
    lines += ["", "Sources:"] + [f"  {k}: {v}" for k, v in d["sources"].items()]
    if d["notes"]:
        lines += ["", "Notes: " + d["notes"]]
    return "\n".join(lines)


def channels_note() -> str:
    """One line saying what ``defaults`` stands for (for ``show``)."""
    from envtool.spec import channels

    return "defaults = " + " + ".join(channels.DEFAULT_CHANNELS) + ", as conda means it"


def sources_view(d: Dict[str, Any]) -> Dict[str, Any]:
    """The ``--sources`` part of :func:`describe`'s mapping: each pin with where it can be read.

    Returns:
        ``{"name", "pins": [{"field", "value", "mark", "source", "source_kind", "where", "note"}],
        "site": {"name", "modules", "mark", "source", "where", "warning"} or None}``.
    """
    stack = d["site"].get("stack")
    return {"name": d["name"],
            "pins": [{k: p[k] for k in ("field", "value", "mark", "source", "source_kind", "where", "note")}
                     for p in d["pins"]],
            "site": None if not stack else {"name": d["site"]["name"], "modules": d["site"]["modules"],
                                            "mark": stack["mark"], "source": stack["source"],
                                            "where": stack["where"], "warning": stack["warning"]}}


def format_sources(v: Dict[str, Any]) -> str:
    """Readable form of :func:`sources_view`: one line per pin (field, value, mark, where)."""
    pins = v["pins"]
    fw = max([len(p["field"]) for p in pins] + [5])
    vw = max([len(p["value"]) for p in pins] + [5])
    lines = [f"{v['name']}: where each pin can be read (V primary, V2 secondary, I inferred)"]
    for p in pins:
        kind = f" ({p['source_kind']})" if p["source_kind"] and p["source_kind"] != "repo" else ""
        lines.append(f"  {p['field'].ljust(fw)}  {p['value'].ljust(vw)}  [{p['mark'] or '-'}] "
                     f"{p['where'] or p['source'] or '-'}{kind}")
    s = v["site"]
    if s:
        lines.append(f"  site {s['name']}: {' '.join(s['modules']) or '-'}  [{s['mark'] or '-'}] {s['where'] or '-'}")
        if s["warning"]:
            lines.append(f"  WARNING: {s['warning']}")
    return "\n".join(lines)


def run(args) -> int:
    d = describe(args.spec, args.site, args.site_file)
    if args.sources:
        v = sources_view(d)
        if args.json:
            print_json(v)
        else:
            print(format_sources(v))
        return 0
    if args.json:
        print_json(d)
    else:
        print(format_text(d))
    return 0
