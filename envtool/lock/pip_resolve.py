"""The pip part of a lock, resolved by pip itself (``pip install --dry-run --report``).

pip's installation report (format version 1, pip >= 22.2: https://pip.pypa.io/en/stable/reference/installation-report/)
lists every distribution pip would install, with ``download_info.url`` and
``download_info.archive_info.hashes.sha256``. The resolve honours the user's pip configuration
(index, mirrors, ``find-links``), so the URLs are those this machine's pip would download.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from envtool.core import external
from envtool.core.errors import EnvtoolError
from envtool.lock.model import LockedPackage, normalize

#: pip's ``--platform`` tag family per conda platform (manylinux; pip expands older manylinux tags).
MANYLINUX_ARCH = {"linux-64": "x86_64", "linux-ppc64le": "ppc64le", "linux-aarch64": "aarch64",
                  "linux-s390x": "s390x"}


@dataclass(frozen=True)
class PipTarget:
    """A platform other than the resolving interpreter's (binary wheels only).

    Attributes:
        platform: conda platform (``linux-ppc64le``).
        python_version: ``3.9``-style version of the target's Python.
        glibc: the target's glibc (``2.17``), which picks the newest ``manylinux_<glibc>`` tag.
    """

    platform: str
    python_version: str
    glibc: str = "2.17"

    def pip_args(self) -> List[str]:
        """pip's target options (``--platform``, ``--python-version``, ``--implementation``, ``--only-binary``).

        Raises:
            EnvtoolError: a platform with no manylinux tag.
        """
        arch = MANYLINUX_ARCH.get(self.platform)
        if not arch:
            raise EnvtoolError(f"pip packages cannot be locked for {self.platform}: no manylinux wheels exist for it")
        major, minor = (self.glibc.split(".") + ["17"])[:2]
        return ["--platform", f"manylinux_{major}_{minor}_{arch}", "--python-version", self.python_version,
                "--implementation", "cp", "--only-binary=:all:"]

    def marker_environment(self) -> Dict[str, str]:
        """PEP 508 marker values of the target (pip evaluates markers for the host only)."""
        arch = MANYLINUX_ARCH.get(self.platform, "")
        return {"python_version": self.python_version, "python_full_version": self.python_version + ".0",
                "platform_machine": arch, "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def run_report(python: str, requirements: Sequence[str], extra_args: Sequence[str] = (),
               progress: Optional[Callable[[str], None]] = None, timeout: float = 1800) -> Dict:
    """Run ``python -m pip install --dry-run --ignore-installed --report`` and return the report.

    Args:
        python: the interpreter whose pip resolves (and whose tags and markers apply).
        requirements: pip requirement strings.
        extra_args: more pip options (``--no-deps``, target options).
        progress: called with one line before pip runs.
        timeout: seconds.
    Returns:
        pip's report (dict with ``install``: list of items, ``environment``: marker values).
    Raises:
        EnvtoolError: pip failed (its last lines are in the message) or timed out.
    """
    with tempfile.TemporaryDirectory(prefix="envtool-pip-report-") as tmp:
        report = Path(tmp) / "report.json"
        # pip takes platform options only with --target (nothing is written: --dry-run)
        target = ["--target", str(Path(tmp) / "target")] if "--platform" in extra_args else []
        argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--dry-run", "--ignore-installed",
                "--quiet", "--report", str(report), *target, *extra_args, *requirements]
        if progress:
            progress("pip resolves: " + " ".join(requirements))
        env = dict(os.environ, PIP_NO_INPUT="1")
        try:
            proc = external.run(argv, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise EnvtoolError(f"pip did not resolve {' '.join(requirements)} within {timeout:.0f} s") from None
        except OSError as exc:
            raise EnvtoolError(f"cannot run {python}: {exc.strerror}") from None
        if proc.returncode != 0 or not report.is_file():
            lines = [l for l in (proc.stderr + proc.stdout).splitlines() if "is ignored: it is neither" not in l]
            tail = "\n".join("    " + l for l in lines[-10:])
            raise EnvtoolError(f"pip could not resolve {' '.join(requirements)} (exit {proc.returncode}):\n{tail}")
        return json.loads(report.read_text())


def dependencies_of(requires_dist: Sequence[str], environment: Dict[str, str]) -> Tuple[Tuple[str, str], ...]:
    """``Requires-Dist`` entries that apply in ``environment`` (PEP 508 marker values; missing
    values are this interpreter's), no extras, as sorted ``(normalized name, specifier or "*")``."""
    from packaging.requirements import InvalidRequirement, Requirement

    out: Dict[str, str] = {}
    for text in requires_dist or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(dict(environment, extra="")):
            continue
        out[normalize(req.name, "pip")] = str(req.specifier) or "*"
    return tuple(sorted(out.items()))


def packages_from_report(report: Dict, platform: str, built: Optional[Dict[str, str]] = None) -> List[LockedPackage]:
    """Lock entries for every item of a pip report.

    Args:
        report: pip's installation report.
        platform: the conda platform the entries are for.
        built: normalized name → requirement for the distributions envtool builds itself.
    Returns:
        entries in report order.
    Raises:
        EnvtoolError: an item without a URL (pip always gives one for index and file installs).
    """
    built = built or {}
    out = []
    environment = report.get("environment", {})
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        info = item.get("download_info", {})
        url = info.get("url", "")
        if not url:
            raise EnvtoolError(f"pip's report gives no URL for {meta.get('name')}")
        hashes = (info.get("archive_info") or {}).get("hashes") or {}
        sha256 = hashes.get("sha256", "")
        if not sha256 and (info.get("archive_info") or {}).get("hash", "").startswith("sha256="):
            sha256 = info["archive_info"]["hash"].split("=", 1)[1]
        name = meta.get("name", "")
        out.append(LockedPackage(manager="pip", name=normalize(name, "pip"), version=meta.get("version", ""), platform=platform,
                                 url=url, sha256=sha256, dependencies=dependencies_of(meta.get("requires_dist") or [], environment),
                                 built=built.get(normalize(name, "pip"), "")))
    return out


def resolve(requirements: Sequence[str], platform: str, python: Optional[str] = None,
            built_requirements: Sequence[str] = (), target: Optional[PipTarget] = None,
            progress: Optional[Callable[[str], None]] = None, index_args: Sequence[str] = ()) -> List[LockedPackage]:
    """Resolve pip requirements for one platform with pip.

    Args:
        requirements: requirements installed from the index (``torch==2.13.0``, ``setuptools``).
        platform: conda platform of the entries.
        python: interpreter that resolves (default: this one).
        built_requirements: requirements envtool builds (``horovod==0.28.1``); locked as the
            archive pip would build from, marked ``built``; their dependencies are locked too.
        target: resolve for another platform/Python (binary wheels only); the built
            requirements' metadata comes from a ``--no-deps`` resolve on this machine.
        progress: progress callback (one line per pip run).
        index_args: more index options for every pip run (``--extra-index-url URL`` of the spec's
            package indexes: :func:`envtool.lock.indexes.extra_index_args`).
    Returns:
        the entries (built ones included).
    Raises:
        EnvtoolError: pip failed.
    """
    from packaging.requirements import Requirement

    python = python or sys.executable
    built = {normalize(Requirement(r).name, "pip"): r for r in built_requirements if not _is_url(r)}
    url_built = [r for r in built_requirements if _is_url(r)]
    if target is None:
        report = run_report(python, [*requirements, *built_requirements], list(index_args), progress=progress)
        pkgs = packages_from_report(report, platform, built)
        return _mark_url_built(pkgs, url_built)
    # Another platform: the built ones (usually an sdist) are resolved here without their
    # dependencies, which are then resolved for the target together with the rest.
    built_pkgs: List[LockedPackage] = []
    extra_reqs: List[str] = []
    if built_requirements:
        report = run_report(python, list(built_requirements), ["--no-deps", *index_args], progress=progress)
        built_pkgs = [replace(p, dependencies=dependencies_of(item.get("metadata", {}).get("requires_dist") or [],
                                                              target.marker_environment()))
                      for p, item in zip(_mark_url_built(packages_from_report(report, platform, built), url_built),
                                         report.get("install", []))]
        for p in built_pkgs:
            extra_reqs += [name if spec == "*" else f"{name}{spec}" for name, spec in p.dependencies]
    report = run_report(python, [*requirements, *extra_reqs], [*target.pip_args(), *index_args], progress=progress)
    report["environment"] = target.marker_environment()
    return built_pkgs + packages_from_report(report, platform)


def _is_url(req: str) -> bool:
    return "://" in req or req.startswith("git+")


def _mark_url_built(pkgs: List[LockedPackage], url_built: Sequence[str]) -> List[LockedPackage]:
    """Mark the entries that came from a URL requirement (``git+https://…@commit``) as built."""
    if not url_built:
        return pkgs
    out = []
    for p in pkgs:
        match = next((r for r in url_built if p.url and (p.url in r or r.split("@", 1)[0].split("+", 1)[-1] in p.url)), "")
        out.append(replace(p, built=match) if match and not p.built else p)
    return out
