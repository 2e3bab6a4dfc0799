"""The release matrix: one row per spec, as ``envtool specs`` prints it (like the package table of OLCF's Summit page, ``olcf/olcf-user-docs@6c07271c3d12:software/analytics/distributed-dl-env.rst#L60-L76``'s
table, one column per stack there, one row per stack here).

Columns (:data:`COLUMNS`): spec name, distribution and version, Python, TensorFlow, PyTorch,
Horovod and its GPU backend (NCCL, DDL, MPI; the CPU controllers when no GPU operation is built),
how Horovod is installed, CUDA, platforms, site and status (``active``, ``deprecated``, ``archived``). Versions are read from the spec's pins:
conda match specs as py-rattler's ``MatchSpec``, pip requirements as ``packaging``'s ``Requirement``, both
parsed once when the spec was loaded (:class:`envtool.spec.model.Pin`).
"""
from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional, Tuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from envtool.core import frameworks
from envtool.core.errors import UsageError
from envtool.spec.model import Spec
from envtool.spec.table import COLUMNS, DROP_ORDER, Row, fit_columns, format_table  # noqa: F401 (re-exported)

#: Package names (conda and pip) that carry each framework's version.
FRAMEWORK_PACKAGES: Dict[str, Tuple[str, ...]] = {f.name: f.package_names for f in frameworks.FRAMEWORKS}
#: ``--has`` names and the column each compares.
HAS_NAMES = {"horovod": "horovod", "tensorflow": "tensorflow", "tf": "tensorflow", "pytorch": "pytorch",
             "torch": "pytorch", "python": "python", "cuda": "cuda"}
_SHORT_PLATFORM = {"linux-64": "x86_64", "linux-ppc64le": "ppc64le", "linux-aarch64": "aarch64",
                   "linux-s390x": "s390x", "osx-64": "osx-64", "osx-arm64": "osx-arm64"}
_VERSION_RE = re.compile(r"\d+(?:\.\d+)*")


def _clean(version: str) -> str:
    """``==1.7.1`` → ``1.7.1``, ``1.7.1.*`` → ``1.7.1``, ``>=2.4.1,<2.4.5`` stays."""
    text = version.strip()
    if text.startswith("==") and "," not in text:
        text = text[2:]
    if text.endswith(".*") and "," not in text:
        text = text[:-2]
    return text.lstrip("=")


def package_version(spec: Spec, names: Iterable[str]) -> str:
    """The version part of the first pin (conda, then pip) whose package is one of ``names``, or ''.

    Reads what :mod:`envtool.spec.load` parsed: a conda pin's py-rattler ``MatchSpec``
    (:attr:`~envtool.spec.model.Pin.match_spec`), a pip pin's ``packaging`` ``Requirement``
    (:attr:`~envtool.spec.model.Pin.requirement`); pins without them are skipped.
    """
    wanted = set(names)
    for pin in spec.packages.conda:
        ms = pin.match_spec
        if ms is not None and ms.name is not None and ms.name.normalized in wanted:
            return _clean(str(ms.version or ""))
    for pin in spec.packages.pip:
        req = pin.requirement
        if req is not None and req.name.lower() in wanted:
            return _clean(str(req.specifier))
    return ""


def backend(spec: Spec) -> str:
    """Horovod's backend as a short word: the GPU allreduce (``NCCL``, ``DDL``, ``MPI``), else the
    CPU side (``Gloo+MPI (CPU)``); '' without Horovod."""
    h = spec.horovod
    if h.install == "none":
        return ""
    if h.gpu_operations:
        return h.gpu_operations.upper()
    ops = dict(h.gpu_ops)
    if ops:
        return ops.get("allreduce", next(iter(ops.values()))).upper()
    if h.cpu_operations:
        return h.cpu_operations.upper() + " (CPU)"
    names = {"mpi": "MPI", "gloo": "Gloo"}
    return "+".join(names[c] for c in sorted(h.controllers, key=lambda c: c != "gloo")) + " (CPU)" \
        if h.controllers else ""


def row(spec: Spec) -> Row:
    """The matrix row of a resolved spec."""
    h = spec.horovod
    hvd = "" if h.install == "none" else (h.version.value if h.version else package_version(spec, ("horovod",)))
    return Row(
        name=spec.name, distribution=spec.distribution.name, version=spec.distribution.version or "",
        python=spec.python.value if spec.python else "",
        tensorflow=package_version(spec, FRAMEWORK_PACKAGES["tensorflow"]),
        pytorch=package_version(spec, FRAMEWORK_PACKAGES["pytorch"]),
        horovod=hvd, backend=backend(spec), install=h.install if h.install != "none" else "",
        cuda=spec.cuda.value if spec.cuda else "",
        platforms=", ".join(_SHORT_PLATFORM.get(p, p) for p in spec.platforms),
        site=spec.site.name, status=spec.status.value, summary=spec.summary, path=spec.path or "")


def first_version(text: str) -> Optional[Version]:
    """The first version number in ``text`` (``>=2.4.1,<2.4.5`` → 2.4.1), or None."""
    match = _VERSION_RE.search(text or "")
    if not match:
        return None
    try:
        return Version(match.group(0))
    except InvalidVersion:
        return None


def parse_has(text: str) -> Tuple[str, Requirement]:
    """Parse a ``--has`` filter such as ``horovod>=0.21`` or ``torch==1.7.1``.

    Returns:
        ``(column, requirement)``.
    Raises:
        UsageError: not a requirement, or not one of :data:`HAS_NAMES`.
    """
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise UsageError(f"--has {text!r}: expected NAME[OP VERSION] such as 'horovod>=0.21' "
                         f"({str(exc).splitlines()[0]})") from None
    column = HAS_NAMES.get(req.name.lower())
    if column is None:
        raise UsageError(f"--has {text!r}: expected one of {', '.join(sorted(HAS_NAMES))} as the name")
    return column, req


def matches(r: Row, column: str, req: Requirement) -> bool:
    """True when ``r`` has ``column`` and its (first) version satisfies ``req``'s specifier."""
    value = getattr(r, column)
    if not value:
        return False
    if not str(req.specifier):
        return True
    version = first_version(value)
    return version is not None and req.specifier.contains(version, prereleases=True)


def sort_key(column: str):
    """A key function ordering rows by ``column``: version-aware for version columns.

    Raises:
        UsageError: unknown column.
    """
    if column not in COLUMNS:
        raise UsageError(f"--sort {column!r}: expected one of {', '.join(COLUMNS)}")

    def key(r: Row):
        value = getattr(r, column)
        version = first_version(value) if column not in ("name", "distribution", "backend", "install",
                                                         "platforms", "site", "status") else None
        if column == "version":
            return (r.distribution, version is None, version or Version("0"), value)
        return (version is None, version or Version("0"), value, r.name)

    return key


def build(specs: List[Spec], distribution: Optional[str] = None, has: Iterable[str] = (),
          sort: str = "version") -> List[Row]:
    """Rows for ``specs``, filtered and sorted.

    Args:
        specs: resolved specs.
        distribution: keep rows whose distribution name equals it (case-insensitive), or None.
        has: ``--has`` filters (all must hold).
        sort: a column of :data:`COLUMNS` (``version`` sorts by distribution, then version).
    Returns:
        the rows.
    Raises:
        UsageError: a bad filter or column.
    """
    filters = [parse_has(h) for h in has]
    rows = [row(s) for s in specs]
    if distribution:
        rows = [r for r in rows if r.distribution.lower() == distribution.lower()]
    for column, req in filters:
        rows = [r for r in rows if matches(r, column, req)]
    return sorted(rows, key=sort_key(sort))
