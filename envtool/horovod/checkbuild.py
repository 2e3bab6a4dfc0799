"""Parse ``horovodrun --check-build`` output and compare it with a spec's expectations.

Formats (``docs/reference/horovod.md``, from horovod/runner/launch.py::check_build@v0.28.1,
horovod/run/run.py@v0.17.1–0.19.1, horovod/run/runner.py@v0.19.2–0.19.5):

* a ``Horovod vX.Y.Z:`` header, then three sections — ``Available Frameworks:``,
  ``Available Controllers:``, ``Available Tensor Operations:`` — of items ``    [X] Name``;
* 0.17.1–0.18.2 print ``MLSL`` where 0.19+ print ``CCL``;
* ``--verbose`` adds a leading blank line, ``Checking whether extension …`` lines and whole
  tracebacks between items; the last line carries trailing spaces;
* the exit status is 0 whatever is found, so only the marks count.

:func:`from_api` builds the same :class:`CheckBuild` from Horovod's Python API as gathered by
the ``env_info`` probe (``envtool/probes/env_info.py``, ``check_build_api``), so ``doctor``
need not start ``horovodrun`` (which imports each framework again in its own process).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from envtool.core import frameworks as _frameworks
from envtool.core.errors import EnvtoolError
from envtool.spec.model import CheckBuildExpectation

SECTIONS = {
    "available frameworks": "frameworks",
    "available controllers": "controllers",
    "available tensor operations": "tensor_operations",
}
_HEADER = re.compile(r"^\s*Horovod v(\S+?):?\s*$")
_SECTION = re.compile(r"^\s*(Available [A-Za-z ]+?):\s*$")
_ITEM = re.compile(r"^\s*\[( |X|x)\] (\w+)\s*$")


class CheckBuildParseError(EnvtoolError):
    """The text holds no ``--check-build`` sections (exit status 2: bad input)."""

    exit_status = 2


@dataclass(frozen=True)
class CheckBuild:
    """What one ``--check-build`` run reported.

    Attributes:
        version: the Horovod version in the header (``0.28.1``), or None if absent.
        frameworks / controllers / tensor_operations: ordered ``(name, available)`` pairs,
            names as Horovod prints them (``PyTorch``, ``Gloo``, ``MLSL``).
    """

    version: Optional[str]
    frameworks: Tuple[Tuple[str, bool], ...] = ()
    controllers: Tuple[Tuple[str, bool], ...] = ()
    tensor_operations: Tuple[Tuple[str, bool], ...] = ()

    def section(self, name: str) -> Dict[str, bool]:
        """``{name: available}`` of one section (``frameworks``, ``controllers``, ``tensor_operations``)."""
        return dict(getattr(self, name))

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"version": self.version,
                **{s: {n: a for n, a in getattr(self, s)} for s in SECTIONS.values()}}


def parse(text: str) -> CheckBuild:
    """Parse ``horovodrun --check-build`` output (any version 0.17.1 → 0.28.1, verbose or not).

    Args:
        text: the captured stdout (stderr may be mixed in).
    Returns:
        a :class:`CheckBuild`.
    Raises:
        CheckBuildParseError: no section with items was found (e.g. Horovod < 0.17.1, where
            the option does not exist, or an import failure before any output).
    """
    version = None
    sections: Dict[str, List[Tuple[str, bool]]] = {v: [] for v in SECTIONS.values()}
    current: Optional[str] = None
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m and version is None:
            version = m.group(1)
            continue
        m = _SECTION.match(line)
        if m:
            current = SECTIONS.get(m.group(1).strip().lower())
            continue
        m = _ITEM.match(line)
        if m and current is not None:
            name = m.group(2)
            if name not in (n for n, _ in sections[current]):
                sections[current].append((name, m.group(1) in "Xx"))
    if not any(sections.values()):
        raise CheckBuildParseError(_no_sections(text))
    return CheckBuild(version=version, **{k: tuple(v) for k, v in sections.items()})


#: The last line of a Python traceback: ``ModuleNotFoundError: No module named 'yaml'`` (an
#: exception class name, a colon, the message).
_RAISED = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)): (.*)$")
_NO_MODULE = re.compile(r"No module named '([^']+)'")


def _no_sections(text: str) -> str:
    """Why ``horovodrun --check-build`` printed no section: the exception it died of when its
    output ends in a traceback (a missing module named, with what to install), else the last
    line (an old Horovod without the option, 0.17.1 added it)."""
    lines = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    raised = next((m for m in (_RAISED.match(ln.strip()) for ln in reversed(lines)) if m), None)
    if raised is not None:
        what = f"{raised.group(1)}: {raised.group(2)}"[:300]
        module = _NO_MODULE.search(raised.group(2))
        if module is not None:
            top = module.group(1).split(".")[0]
            return (f"horovodrun --check-build failed before printing anything: {what}; the module {top!r} is "
                    f"missing from the environment (and from any base it is layered over): install the package "
                    f"that provides it into the environment")
        return f"horovodrun --check-build failed before printing anything: {what}"
    snippet = lines[-1][:200] if lines else "(empty output)"
    return ("no 'horovodrun --check-build' sections found (Horovod < 0.17.1 has no --check-build); "
            f"last line: {snippet}")


#: The capability rows of ``horovodrun --check-build`` and the API function each one shows, in
#: its order: the controllers MPI and Gloo and the tensor operations MPI and Gloo show
#: ``mpi_built``/``gloo_built`` again (horovod/horovod@v0.28.1:horovod/runner/launch.py
#: ``check_build``; 0.19+, where CCL replaced MLSL).
API_ROWS: Tuple[Tuple[str, str, str], ...] = (
    ("controllers", "MPI", "mpi_built"), ("controllers", "Gloo", "gloo_built"),
    ("tensor_operations", "NCCL", "nccl_built"), ("tensor_operations", "DDL", "ddl_built"),
    ("tensor_operations", "CCL", "ccl_built"), ("tensor_operations", "MPI", "mpi_built"),
    ("tensor_operations", "Gloo", "gloo_built"))


class ApiUnanswered(Exception):
    """The API record cannot stand in for ``horovodrun --check-build``; the message says why
    (then ``doctor`` runs ``horovodrun --check-build`` itself)."""


def _ext_key(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def from_api(record: Optional[Mapping[str, Any]]) -> CheckBuild:
    """The :class:`CheckBuild` that ``horovodrun --check-build`` would print, from the
    ``check_build_api`` record of the ``env_info`` probe.

    Mirrors horovod/horovod@v0.28.1:horovod/runner/launch.py ``check_build`` and
    horovod/horovod@v0.28.1:horovod/common/util.py (``extension_available``, ``mpi_built``,
    ``gloo_built``, ``nccl_built``, ``ddl_built``, ``ccl_built``): a framework is available when
    ``import horovod.<x>`` raised nothing (``horovod.torch`` without its library only prints
    "has not been built" and so still counts); a capability is the first answer that is not
    None of ``horovod.tensorflow``, ``horovod.torch``, ``horovod.mxnet`` in that order, among
    those that imported, an error counting as None; a row is marked when that answer is true
    (``nccl_built`` returns the NCCL version or 0).

    Args:
        record: the probe's ``check_build_api`` dict (``version``; ``extensions``, a list of
            dicts with ``module``, ``framework``, ``framework_installed``, ``imported``,
            ``error``, ``not_built``, ``api`` and ``api_errors``), or None when the probe did not
            produce one (Horovod did not import, or the probe failed).
    Returns:
        a :class:`CheckBuild` with the labels and order ``horovodrun --check-build`` prints.
    Raises:
        ApiUnanswered: the record is missing or incomplete, or an extension failed to import in
            the probe's process while another framework was loaded there and the failure is not
            Horovod's "has not been built" (``horovodrun`` imports each extension alone, in a
            fresh child, so its answer could differ).
    """
    if not record:
        raise ApiUnanswered("the API probe did not import horovod")
    version = record.get("version")
    if not version:
        raise ApiUnanswered("the API probe found no horovod.__version__")
    by_key = {_ext_key(str(e.get("module", ""))): e for e in record.get("extensions") or ()}
    exts = []
    for fw in _frameworks.FRAMEWORKS:
        entry = by_key.get(_ext_key(fw.binding))
        if entry is None:
            raise ApiUnanswered(f"the API probe did not try {fw.binding}")
        exts.append((fw, entry))
    framework_rows = []
    for fw, entry in exts:
        if not entry.get("imported"):
            others = [o.module for o, e in exts if o is not fw and e.get("framework_installed")]
            if entry.get("framework_installed") and not entry.get("not_built") and others:
                raise ApiUnanswered(
                    f"import {fw.binding} failed ({entry.get('error') or 'no error text'}) in a process that also "
                    f"loaded {', '.join(others)}; horovodrun imports each extension alone")
        framework_rows.append((fw.label, bool(entry.get("imported"))))
    answers: Dict[str, Any] = {}
    for _section, _name, fn in API_ROWS:
        if fn in answers:
            continue
        answer = None
        for fw, entry in exts:
            if not entry.get("imported"):
                continue
            api, errors = entry.get("api") or {}, entry.get("api_errors") or {}
            if fn not in api and fn not in errors:
                raise ApiUnanswered(f"the API probe did not call {fw.binding}.{fn}()")
            if api.get(fn) is not None:
                answer = api[fn]
                break
        answers[fn] = answer
    sections: Dict[str, List[Tuple[str, bool]]] = {"controllers": [], "tensor_operations": []}
    for section, name, fn in API_ROWS:
        sections[section].append((name, bool(answers[fn])))
    return CheckBuild(version=str(version), frameworks=tuple(framework_rows),
                      controllers=tuple(sections["controllers"]),
                      tensor_operations=tuple(sections["tensor_operations"]))


def listed_without_extension(found: CheckBuild, prefix: Path) -> List[str]:
    """The frameworks ``found`` marks ``[X]`` whose Horovod binding in ``prefix`` has no compiled
    extension (``lib/python3*/site-packages/horovod/<binding>/mpi_lib*.so``), by check-build label.

    ``horovodrun --check-build`` marks a framework when ``import horovod.<binding>`` raises nothing,
    and from Horovod 0.22 a binding whose extension was not built imports all the same, printing
    only "Extension … has not been built" (horovod/horovod@v0.28.1:horovod/common/util.py,
    ``check_extension`` and ``extension_available``): seen here as ``[X] PyTorch`` in a TensorFlow-only
    build with no torch installed. Only a binding directory of the prefix's own ``horovod`` is
    judged; a prefix whose Horovod lives elsewhere (a base it is layered over) gives ``[]``.

    Args:
        found: the parsed check-build.
        prefix: the environment check-build ran in.
    Returns:
        labels (``PyTorch``) in check-build order; ``[]`` when every marked binding has its extension.
    """
    roots = [sp / "horovod" for sp in sorted(Path(prefix).glob("lib/python3*/site-packages"))
             if (sp / "horovod").is_dir()]
    out = []
    for label, marked in found.frameworks:
        fw = _frameworks.by_label(label)
        if not marked or fw is None or not roots:
            continue
        sub = fw.binding.split(".", 1)[1]
        if not any(next((root / sub).glob("mpi_lib*.so"), None) for root in roots):
            out.append(label)
    return out


def without_frameworks(found: CheckBuild, labels: List[str]) -> CheckBuild:
    """``found`` with the frameworks named in ``labels`` marked not built (``[ ]``)."""
    return replace(found, frameworks=tuple((n, a and n not in labels) for n, a in found.frameworks))


@dataclass(frozen=True)
class Row:
    """One capability in the comparison table."""

    section: str
    name: str
    expected: bool
    found: bool

    @property
    def ok(self) -> bool:
        """A capability that was asked for must be there; an extra one is reported, not failed."""
        return self.found or not self.expected


@dataclass(frozen=True)
class Comparison:
    """Expected versus found, row by row (in the order Horovod prints them)."""

    rows: Tuple[Row, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    @property
    def missing(self) -> List[Row]:
        """Rows asked for and not found."""
        return [r for r in self.rows if not r.ok]

    def to_dict(self) -> dict:
        return {"ok": self.ok, "rows": [{"section": r.section, "name": r.name, "expected": r.expected,
                                         "found": r.found, "ok": r.ok} for r in self.rows],
                "missing": [f"{r.section}:{r.name}" for r in self.missing]}


def compare(found: CheckBuild, expected: CheckBuildExpectation) -> Comparison:
    """Compare a parsed result with a spec's ``expect.check_build``.

    A name the spec expects but the output does not list at all (``CCL`` against a 0.18
    output) counts as not found.
    """
    rows: List[Row] = []
    for section in SECTIONS.values():
        want = set(getattr(expected, section))
        seen = []
        for name, available in getattr(found, section):
            rows.append(Row(section, name, name in want, available))
            seen.append(name)
        for name in getattr(expected, section):
            if name not in seen:
                rows.append(Row(section, name, True, False))
    return Comparison(tuple(rows))


_LABEL = {"frameworks": "", "controllers": " (controller)", "tensor_operations": " (tensor op)"}


def format_table(comparison: Comparison) -> str:
    """The human table: ``horovodrun --check-build   expected   found`` then one row each."""
    lines = [f"{'horovodrun --check-build':<28}{'expected':<11}found"]
    for r in comparison.rows:
        label = f"  {r.name}{_LABEL[r.section]}"
        flag = "" if r.ok else "   <- MISSING"
        lines.append(f"{label:<28}{'yes' if r.expected else 'no':<11}{'yes' if r.found else 'no'}{flag}")
    return "\n".join(lines)
