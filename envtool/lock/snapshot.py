"""Snapshot an existing prefix into lock entries: conda records and pip distributions.

Both come from :class:`~envtool.core.prefix.PrefixData`: conda records (py-rattler
``PrefixRecord``: URL, MD5, SHA-256) and the distributions pip installed (``INSTALLER`` is
``pip``; not conda's, not the venv's own pip); the archive URL and SHA-256 come
from ``direct_url.json`` where pip recorded one (a wheel installed from a file or URL, PEP 610),
otherwise from pip's own resolver asked for exactly the installed versions (``--no-deps``),
which names the archive this machine's pip installs for them. A Horovod wheel from envtool's
wheel cache is marked as built, with its cache key.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from envtool.core.errors import UsageError
from envtool.core.prefix import VENV_SEEDED, PrefixData
from envtool.lock.model import LockedPackage, normalize


def seeded(prefix: Path) -> Tuple[str, ...]:
    """Names that :func:`envtool.lock.diff.compare` may find added without drift: :data:`VENV_SEEDED` in a venv."""
    return VENV_SEEDED if PrefixData(prefix).is_venv else ()


_CACHE_KEY_RE = re.compile(r"/horovod-wheels/([0-9a-f]{20})/[^/]+\.whl$")


def ensurepip_wheels(prefix: Path) -> Dict[Tuple[str, str], Path]:
    """``(name, version)`` → the wheel ``python -m venv`` seeded ``prefix`` from: the base
    interpreter's ``ensurepip/_bundled`` (CPython ``Lib/ensurepip``), found through ``pyvenv.cfg``'s
    ``home``. Empty for a conda prefix or when the directory is not there."""
    home = PrefixData(Path(prefix)).venv_config().get("home")
    if not home:
        return {}
    out: Dict[Tuple[str, str], Path] = {}
    for whl in Path(home).parent.glob("lib/python*/ensurepip/_bundled/*.whl"):
        parts = whl.name.split("-")
        if len(parts) >= 2:
            out[(normalize(parts[0], "pip"), parts[1])] = whl
    return out


def created_build_keys(prefix: Path) -> Dict[str, str]:
    """Built package → wheel-cache key, from ``prefix/.envtool/create.json`` (``results.build-horovod``)."""
    f = Path(prefix) / ".envtool" / "create.json"
    try:
        results = json.loads(f.read_text()).get("results", {})
    except (OSError, json.JSONDecodeError):
        return {}
    key = (results.get("build-horovod") or {}).get("cache_key")
    return {"horovod": key} if key else {}


def _archive(direct: Mapping[str, object]) -> Tuple[str, str]:
    """``(url, sha256)`` of a distribution's parsed ``direct_url.json`` (PEP 610,
    https://packaging.python.org/en/latest/specifications/direct-url-data-structure/): the
    ``archive_info.hashes`` sha256, else the deprecated ``archive_info.hash`` ``sha256=...``;
    ``""`` for what is missing or not of the specified type."""
    url = direct.get("url")
    info = direct.get("archive_info")
    sha256 = ""
    if isinstance(info, dict):
        hashes = info.get("hashes")
        if isinstance(hashes, dict) and isinstance(hashes.get("sha256"), str):
            sha256 = hashes["sha256"]
        elif isinstance(info.get("hash"), str) and info["hash"].startswith("sha256="):
            sha256 = info["hash"].split("=", 1)[1]
    return (url if isinstance(url, str) else ""), sha256


def snapshot(prefix: Path, platform: str, lookup: bool = True, built_keys: Optional[Dict[str, str]] = None,
             python: Optional[str] = None, progress: Optional[Callable[[str], None]] = None,
             known: Optional[Mapping[Tuple[str, str], Tuple[str, str]]] = None) -> List[LockedPackage]:
    """Lock entries for what ``prefix`` holds.

    Args:
        prefix: a venv or conda prefix.
        platform: the platform the entries are for (this machine's).
        lookup: ask pip for URL and SHA-256 of distributions without ``direct_url.json``
            (one ``pip install --dry-run --no-deps`` run; uses the index). Without it, those
            entries have an empty URL and hash (enough for ``diff``, not for a lockfile).
        built_keys: name → wheel-cache key of packages envtool built (default: from
            ``create.json``; a wheel under ``…/horovod-wheels/<key>/`` is recognized anyway).
        python: the prefix's interpreter (default ``prefix/bin/python``).
        progress: progress callback.
        known: ``(normalized name, version)`` → ``(url, sha256)`` of pip distributions whose
            archive is already known (the lock the prefix was installed from); those need no lookup.
    Returns:
        conda entries then pip entries.
    Raises:
        UsageError: ``prefix`` is not a directory or holds no environment.
        EnvtoolError: the pip lookup failed.
    """
    from envtool.lock import conda_resolve, pip_resolve

    prefix = Path(prefix)
    if not prefix.is_dir():
        raise UsageError(f"{prefix}: expected an existing environment prefix")
    data = PrefixData(prefix)
    records = data.conda_records
    dists = [(d.name, d.version, d.direct, list(d.requires), d.installer) for d in data.pip_installed()]
    if not records and data.site_packages is None:
        raise UsageError(f"{prefix}: expected a conda or venv prefix (no conda-meta/, no lib/python*/site-packages)")
    keys = dict(created_build_keys(prefix))
    keys.update(built_keys or {})
    out: List[LockedPackage] = [conda_resolve.record_to_package(r, platform) for r in records]
    pip_pkgs: Dict[str, LockedPackage] = {}
    missing: List[str] = []
    requires: Dict[str, List[str]] = {}
    bundled = ensurepip_wheels(prefix)
    for name, version, direct, reqs, _ in dists:
        requires[name] = reqs
        # seeded by python -m venv (no direct_url.json) or by uv from the same wheel (a file URL, no hash)
        url, sha256 = _archive(direct)
        if (name, version) in bundled and not sha256:
            whl = bundled[(name, version)]
            url, sha256 = whl.as_uri(), hashlib.sha256(whl.read_bytes()).hexdigest()
        if not (url and sha256) and known and (name, version) in known:
            url, sha256 = known[(name, version)]
        m = _CACHE_KEY_RE.search(url)
        built = keys.get(name, "") or (m.group(1) if m else "")
        if m and keys.get(name) and keys[name] != m.group(1):
            built = m.group(1)  # the wheel actually installed wins over the recorded key
        pip_pkgs[name] = LockedPackage(manager="pip", name=name, version=version, platform=platform, url=url,
                                       sha256=sha256, built=built)
        if not (url and sha256) and not built:
            missing.append(f"{name}=={version}")
    environment: Dict[str, str] = {}
    if missing and lookup:
        py = python or str(data.python)
        report = pip_resolve.run_report(py, missing, ["--no-deps"], progress=progress)
        environment = report.get("environment", {})
        for p in pip_resolve.packages_from_report(report, platform):
            name = normalize(p.name, "pip")
            if name in pip_pkgs:
                pip_pkgs[name] = replace(pip_pkgs[name], url=p.url, sha256=p.sha256)
    for name, p in pip_pkgs.items():
        deps = pip_resolve.dependencies_of(requires.get(name, []), environment)
        out.append(replace(p, dependencies=deps))
    return out


def channels_of(records_or_packages) -> Tuple[str, ...]:
    """Channel base URLs of conda entries, in order of first appearance."""
    seen: List[str] = []
    for p in records_or_packages:
        if getattr(p, "manager", "conda") != "conda" or not p.url:
            continue
        base = p.url.rsplit("/", 2)[0]
        if base not in seen:
            seen.append(base)
    return tuple(seen)
