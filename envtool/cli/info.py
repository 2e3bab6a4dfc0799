"""``envtool info``: where envtool stands on this machine: version, interpreter, settings and their
origins, the site detected, installers, caches with their real sizes, and where logs go."""
from __future__ import annotations

from typing import Dict

from envtool.cli.common import add_no_size, print_json


def register(sub) -> None:
    p = sub.add_parser("info", help="show envtool's version, settings (and where each came from), site, "
                                    "installers, caches with sizes, and where logs go",
                       description="What envtool would use here: its version and interpreter; the configuration "
                                   "files read (user ~/.config/envtool/config.yaml, site-wide "
                                   "/etc/envtool/config.yaml) and each setting's effective value (its default when "
                                   "nothing sets it) and origin ('envtool config' changes them); the "
                                   "site detected; the installers found; the caches envtool's runs fill (envtool's "
                                   "own, uv's, pip's) with their sizes on disk; where build logs go.")
    add_no_size(p, "the caches")
    p.set_defaults(func=run)


def _uv_cache(uv: str) -> str:
    """uv's cache directory: what ``uv cache dir`` says (it honours ``UV_CACHE_DIR``, ``XDG_CACHE_HOME``
    and uv's own configuration), else uv's documented default ``$XDG_CACHE_HOME/uv`` or ``~/.cache/uv``
    (https://docs.astral.sh/uv/concepts/cache/#cache-directory)."""
    import os
    import subprocess

    if uv:
        try:
            from envtool.core import external

            out = external.run([uv, "cache", "dir"], timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    if os.environ.get("UV_CACHE_DIR"):
        return os.environ["UV_CACHE_DIR"]
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "uv")


def _pip_cache() -> str:
    """pip's cache directory: ``$PIP_CACHE_DIR``, else ``$XDG_CACHE_HOME/pip`` or ``~/.cache/pip`` on
    Linux (pip docs, "Caching": https://pip.pypa.io/en/stable/topics/caching/#default-paths)."""
    import os

    return os.environ.get("PIP_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pip")


def collect(sizes: bool = True) -> dict:
    """Everything ``info`` shows, as a JSON-ready mapping (see the command's description)."""
    import os
    import shutil
    import sys
    from pathlib import Path

    from envtool import __version__
    from envtool.cli import settings
    from envtool.core.errors import EnvtoolError, UsageError
    from envtool.core.paths import CACHE_ENTRIES, cache_root, check_cache
    from envtool.core.registry import registry_dir
    from envtool.core.sizes import tree_size
    from envtool.engines.installer import find_uv

    site = None
    try:
        from envtool.spec import sites

        found = sites.detect()
        site = {"name": found.name, "file": str(found.path), "reason": found.reason} if found else None
        origin = next((s["from"] for s in settings.effective() if s["setting"] == "site"), None) or ""
        if site and found is not None and found.reason == "$ENVTOOL_SITE" and not origin.startswith("environment"):
            site["reason"] = f"the site setting of {origin}"
    except EnvtoolError as exc:
        site = {"error": str(exc)}
    uv, uv_version = find_uv()
    installers: Dict[str, Dict[str, object]] = {
        "uv": {"path": uv or None, "version": uv_version or None},
        "pip": {"path": shutil.which("pip") or shutil.which("pip3")}}
    for tool in ("conda", "mamba", "micromamba"):
        installers[tool] = {"path": shutil.which(tool)}
    try:
        import importlib.util

        installers["py-rattler"] = {"available": importlib.util.find_spec("rattler") is not None}
    except (ImportError, ValueError):
        installers["py-rattler"] = {"available": False}
    root = cache_root()
    caches = []

    def cache(name: str, path, what: str, problem: str = "") -> None:
        p = Path(path)
        row = {"name": name, "path": str(p), "what": what, "exists": p.is_dir(),
               "bytes": tree_size(p) if sizes and p.is_dir() and not problem else None}
        if problem:  # envtool's rule for paths refuses it: nothing in it is read (no size)
            row["problem"] = problem
        caches.append(row)

    try:
        check_cache("horovod-wheels", "logs", "bytecode")
        refused = ""
    except UsageError as exc:
        refused = str(exc)

    cache("envtool", root, "envtool's cache: " + ", ".join(sorted(CACHE_ENTRIES)), refused)
    cache("uv", _uv_cache(uv), "uv's cache (wheels envtool's installs link from; 'uv cache prune' trims it)")
    cache("pip", _pip_cache(), "pip's cache (used by --installer pip; 'pip cache purge' empties it)")
    return {"version": __version__, "interpreter": {"path": sys.executable, "version": sys.version.split()[0]},
            "package": str(Path(__file__).resolve().parent.parent),
            "config_files": [{"path": p, "status": s} for p, s in settings.files()],
            "settings": settings.effective(), "site": site, "installers": installers, "caches": caches,
            "logs": str(root / "logs"), "registry": str(registry_dir()),
            "debug": bool(os.environ.get("ENVTOOL_DEBUG"))}


def run(args) -> int:
    from envtool.core.sizes import human

    d = collect(sizes=not args.no_size)
    if args.json:
        print_json(d)
        return 0
    print(f"envtool {d['version']} ({d['package']})")
    print(f"interpreter: {d['interpreter']['path']} (Python {d['interpreter']['version']})")
    print("configuration files:")
    for f in d["config_files"]:
        print(f"  {f['path']}: {f['status']}")
    print("settings (value: from):")
    width = max(len(s["setting"]) for s in d["settings"])
    for s in d["settings"]:
        value = s["value"] if s["value"] is not None else \
            (f"{s['default']} (default)" if s["default"] is not None else "(none)")
        print(f"  {s['setting'].ljust(width)}  {value}  [{s['from']}]")
    site = d["site"]
    print("site: " + ("none detected (jobscript and create use 'local'; set site in the configuration or "
                      "ENVTOOL_SITE)" if site is None else site.get("error") or
                      f"{site['name']} ({site['reason']}; {site['file']})"))
    print("installers:")
    for name, i in d["installers"].items():
        where = i.get("path") or ("available" if i.get("available") else "not found")
        print(f"  {name}: {where}" + (f" ({i['version']})" if i.get("version") else ""))
    print("caches:")
    for c in d["caches"]:
        size = human(c["bytes"]) if c["bytes"] is not None else ("-" if not c["exists"] else "not measured")
        print(f"  {c['name']}: {c['path']}  {size if c['exists'] else '(none yet)'}")
        if c.get("problem"):
            print(f"    not used: {c['problem']}")
    print(f"build logs: {d['logs']}")
    print(f"list of your environments: {d['registry']}")
    return 0
