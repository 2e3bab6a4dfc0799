"""A site file's ``validation`` section: the fabric, the allreduce sweep's references
(:class:`ValidateSection`) and ReFrame-style references per node count (:class:`Reference`)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from envtool.core.errors import SpecError
from envtool.spec import load
from envtool.spec.sites.reader import line_of
from envtool.spec.yamlload import LineDict

VALIDATION_KEYS = ("fabric", "references", "sweep")
#: A performance variable's name (``allreduce_latency_4B``): what ReFrame reports it as.
PERF_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass(frozen=True)
class Reference:
    """One entry of a site file's ``validation.references``: what a performance variable of the
    validation must measure on ``nodes`` nodes, in ReFrame's form (value, lower, upper, unit).

    ReFrame's reference tuples: the bounds are fractions of ``value``, ``lower`` in [-1, 0] and
    ``upper`` >= 0 for a positive value, None for no bound
    (https://reframe-hpc.readthedocs.io/en/stable/regression_test_api.html, ``reference``;
    reframe-hpc@v4.10.4:reframe/utility/sanity.py ``reference_bounds``).

    Attributes:
        nodes: the node count it applies to.
        name: the performance variable (``allreduce_latency_4B``).
        value: the reference value (> 0), in ``unit``.
        lower: the lower bound as a fraction of ``value`` (``-0.1``: at least 90 %), or None.
        upper: the upper bound as a fraction of ``value`` (``0.5``: at most 150 %), or None.
        unit: the unit (``us``, ``GB/s``).
    """

    nodes: int
    name: str
    value: float
    lower: Optional[float]
    upper: Optional[float]
    unit: str


#: What carries NCCL's traffic between nodes at a site: ``ib`` (InfiniBand/RoCE verbs, NCCL's
#: ``NET/IB``), ``ofi`` (libfabric through the aws-ofi-nccl plugin, as on Slingshot and EFA), or
#: ``socket`` (TCP).
FABRICS = ("ib", "ofi", "socket")
#: Controllers a reference may name (``*``: every one).
REFERENCE_CONTROLLERS = ("*", "mpi", "gloo", "torch", "nccl")
#: Units of a reference: bus bandwidth (``GB/s``, ``MB/s``; 1e9 and 1e6 bytes/s) or latency.
REFERENCE_UNITS = ("GB/s", "MB/s", "us", "ms")
#: Sizes a reference may name: the sweep's, every power of two from 8 B to 64 MiB.
REFERENCE_SIZES = tuple(2 ** k for k in range(3, 27))
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*$")



@dataclass(frozen=True)
class AllreduceReference:
    """One reference of a site's allreduce sweep, in ReFrame's form (value, lower, upper, unit):
    the measured number must lie within ``value * (1 + lower)`` and ``value * (1 + upper)``, a
    None bound being open (https://reframe-hpc.readthedocs.io/en/stable/regression_test_api.html,
    ``RegressionTest.reference``).

    Attributes:
        controller: ``mpi``, ``gloo``, ``torch``, ``nccl`` or ``*`` (all).
        nodes: the node count it holds for.
        size: the allreduce's size in bytes (one of :data:`REFERENCE_SIZES`).
        value: the reference number, > 0, in ``unit``.
        lower: fraction (<= 0) below ``value`` still accepted, or None.
        upper: fraction (>= 0) above ``value`` still accepted, or None.
        unit: ``GB/s`` or ``MB/s`` (bus bandwidth) or ``us``/``ms`` (latency per allreduce).
        source: where it was written (``FILE:LINE``).
    """

    controller: str
    nodes: int
    size: int
    value: float
    lower: Optional[float]
    upper: Optional[float]
    unit: str
    source: str = ""


@dataclass(frozen=True)
class ValidateSection:
    """What a site file's ``validation`` section says of the allreduce sweep::

        validation:
          fabric: ib                    # NCCL must use it between nodes (ib, ofi, socket)
          sweep:                        # controller (or "*") → nodes → size → [value, lower, upper, unit]
            gloo:
              2:
                64MiB: [1.2, -0.25, null, GB/s]
                8B: [150, null, 0.5, us]

    Attributes:
        fabric: ``ib``, ``ofi``, ``socket`` or None.
        references: the :class:`AllreduceReference` entries.
    """

    fabric: Optional[str] = None
    references: Tuple[AllreduceReference, ...] = ()


def parse_size(text: object) -> Optional[int]:
    """``64MiB``, ``8 B``, ``4096`` → bytes, or None when unreadable."""
    if isinstance(text, bool):
        return None
    m_ = _SIZE.match(str(text))
    if not m_:
        return None
    return int(m_.group(1)) << {"B": 0, None: 0, "KiB": 10, "MiB": 20, "GiB": 30}[m_.group(2)]


def _number(v: object) -> bool:
    """A finite int or float (not a bool): what a reference's value and bounds must be."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_references(spath: str, raw) -> Tuple[Reference, ...]:
    """Parse ``validation.references`` (SpecError naming ``validation.references.<nodes>.<name>``)."""
    data = raw.get("validation")
    if data is None:
        return ()
    line = line_of(raw, "validation")
    if not isinstance(data, dict):
        raise SpecError(spath, "validation", "a mapping (" + ", ".join(VALIDATION_KEYS) + ")", got=data, line=line)
    v = load._Reader(spath, data, "validation", line=line)
    v.check_keys(VALIDATION_KEYS)
    refs = data.get("references")
    if refs is None:
        return ()
    shape = "a mapping of node counts to {performance variable: [value, lower, upper, unit]}"
    if not isinstance(refs, dict):
        raise v.error("references", shape, got=refs)
    out: List[Reference] = []
    for nodes, per_name in refs.items():
        at = refs.line_of(nodes) if isinstance(refs, LineDict) else v.line_of("references")
        out += _node_references(spath, nodes, per_name, at)
    return tuple(out)


def _node_references(spath: str, nodes: Any, per_name: Any, at: Optional[int]) -> List[Reference]:
    """The references of ``validation.references.<nodes>``."""
    where = f"validation.references.{nodes}"
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise SpecError(spath, where, "a node count (an integer, 1 or more) as the key", got=nodes, line=at)
    if not isinstance(per_name, dict) or not per_name:
        raise SpecError(spath, where, "a mapping of performance variables to [value, lower, upper, unit]",
                        got=per_name, line=at)
    out = []
    for name, ref in per_name.items():
        field = f"{where}.{name}"
        line_n = per_name.line_of(name) if isinstance(per_name, LineDict) else at
        if not isinstance(name, str) or not PERF_NAME_RE.fullmatch(name):
            raise SpecError(spath, field, "a performance variable name (letters, digits, '_'; "
                            "e.g. allreduce_latency_4B)", got=name, line=line_n)
        if not isinstance(ref, list) or len(ref) != 4:
            raise SpecError(spath, field, "[value, lower, upper, unit] (ReFrame's reference form)", got=ref,
                            line=line_n)
        value, lower, upper, unit = _reference_values(spath, field, ref, line_n)
        out.append(Reference(nodes=nodes, name=name, value=value, lower=lower, upper=upper, unit=unit))
    return out


def _reference_values(spath: str, field: str, ref: list,
                      line_n: Optional[int]) -> Tuple[float, Optional[float], Optional[float], str]:
    """``[value, lower, upper, unit]`` of one reference, checked (SpecError naming ``field[i]``)."""
    value, lower, upper, unit = ref
    if not _number(value) or value <= 0:
        raise SpecError(spath, field + "[0]", "the reference value, a number above 0", got=value, line=line_n)
    if lower is not None and (not _number(lower) or not -1 <= lower <= 0):
        raise SpecError(spath, field + "[1]", "the lower bound as a fraction of the value, from -1 to 0 "
                        "(-0.1: at least 90 %), or null", got=lower, line=line_n)
    if upper is not None and (not _number(upper) or upper < 0):
        raise SpecError(spath, field + "[2]", "the upper bound as a fraction of the value, 0 or more "
                        "(0.5: at most 150 %), or null", got=upper, line=line_n)
    if not isinstance(unit, str) or not re.fullmatch(r"[A-Za-z0-9/%_.*^-]{1,16}", unit):
        raise SpecError(spath, field + "[3]", "a unit (us, GB/s, …: letters, digits, '/', '%')", got=unit,
                        line=line_n)
    return (float(value), None if lower is None else float(lower), None if upper is None else float(upper), unit)


def parse_validate(spath: str, raw) -> ValidateSection:
    """Parse the ``validation`` section's ``fabric`` and ``sweep`` (SpecError naming
    ``validation.<field>`` on a bad value; :func:`parse_references` checks the section's keys)."""
    data = raw.get("validation")
    if not isinstance(data, dict):
        return ValidateSection()
    line = line_of(raw, "validation")
    v = load._Reader(spath, data, "validation", line=line)
    fabric = v.choice("fabric", FABRICS)
    by_controller = data.get("sweep") or {}
    if not isinstance(by_controller, dict):
        raise v.error("sweep", "a mapping: controller (" + ", ".join(REFERENCE_CONTROLLERS) + ") → node count "
                      "→ size → [value, lower, upper, unit]", got=by_controller)
    refs: List[AllreduceReference] = []
    for controller, by_nodes in by_controller.items():
        refs += _sweep_of(spath, controller, by_nodes, _line(by_controller, controller, line), line)
    return ValidateSection(fabric=fabric, references=tuple(refs))


def _line(node: Any, key: Any, default: Optional[int]) -> Optional[int]:
    """The line of ``key`` in ``node``, else ``default`` (the section's line)."""
    return node.line_of(key) if isinstance(node, LineDict) else default


def _sweep_of(spath: str, controller: Any, by_nodes: Any, at: Optional[int],
              line: Optional[int]) -> List[AllreduceReference]:
    """The references of ``validation.sweep.<controller>``."""
    field = f"validation.sweep.{controller}"
    if str(controller) not in REFERENCE_CONTROLLERS:
        raise SpecError(spath, field, "a controller: " + ", ".join(REFERENCE_CONTROLLERS), got=controller, line=at)
    if not isinstance(by_nodes, dict):
        raise SpecError(spath, field, "a mapping: node count → size → [value, lower, upper, unit]",
                        got=by_nodes, line=at)
    out: List[AllreduceReference] = []
    for nodes, by_size in by_nodes.items():
        nfield = f"{field}.{nodes}"
        if isinstance(nodes, bool) or not str(nodes).isdigit() or int(nodes) < 1:
            raise SpecError(spath, nfield, "a node count (1 or more)", got=nodes, line=_line(by_nodes, nodes, line))
        if not isinstance(by_size, dict):
            raise SpecError(spath, nfield, "a mapping: size (8B … 64MiB) → [value, lower, upper, unit]",
                            got=by_size, line=_line(by_nodes, nodes, line))
        out += [_sweep_reference(spath, nfield, str(controller), int(nodes), size, ref, _line(by_size, size, line))
                for size, ref in by_size.items()]
    return out


def _sweep_reference(spath: str, nfield: str, controller: str, nodes: int, size: Any, ref: Any,
                     at: Optional[int]) -> AllreduceReference:
    """One ``[value, lower, upper, unit]`` of the sweep, checked (SpecError naming its size)."""
    sfield = f"{nfield}.{size}"
    nbytes = parse_size(size)
    if nbytes is None or nbytes not in REFERENCE_SIZES:
        raise SpecError(spath, sfield, "a size of the sweep: a power of two from 8B to 64MiB "
                        "(8B, 1KiB, 64MiB …)", got=size, line=at)
    if not _sweep_form(ref):
        raise SpecError(spath, sfield, "[value > 0, lower (a fraction from -1 to 0, or null), upper "
                        "(a fraction >= 0, or null), unit (" + ", ".join(REFERENCE_UNITS) + ")]",
                        got=ref, line=at)
    return AllreduceReference(controller=controller, nodes=nodes, size=nbytes, value=float(ref[0]),
                              lower=None if ref[1] is None else float(ref[1]),
                              upper=None if ref[2] is None else float(ref[2]), unit=ref[3],
                              source=f"{spath}: {sfield}")


def _sweep_form(ref: Any) -> bool:
    """``ref`` is ``[value > 0, lower in [-1, 0] or None, upper >= 0 or None, unit]``."""
    return (isinstance(ref, list) and len(ref) == 4 and _number(ref[0]) and ref[0] > 0
            and (ref[1] is None or (_number(ref[1]) and -1 <= ref[1] <= 0))
            and (ref[2] is None or (_number(ref[2]) and ref[2] >= 0))
            and ref[3] in REFERENCE_UNITS)
