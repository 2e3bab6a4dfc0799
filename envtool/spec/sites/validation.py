"""A site file's ``validation`` section: the fabric, the allreduce sweep's references
(:class:`ValidateSection`) and ReFrame-style references per node count (:class:`Reference`)."""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from envtool.core.errors import SpecError
from envtool.spec import load
from envtool.spec.sites.reader import line_of
from envtool.spec.yamlload import LineDict

VALIDATION_KEYS = ("fabric", "references", "sweep")
#: A performance variable's name (``allreduce_latency_4B``): what ReFrame reports it as.
PERF_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


#: What a reference's ``stack`` may say it was measured on: the modules loaded, the container
#: image, the uenv (CSCS's user environments), the NCCL (or RCCL) version and the network plug-in
#: (``aws-ofi-nccl``, ``aws-ofi-nccl 1.9.1``; ``none`` for NCCL's own transports, TCP included).
REF_STACK_KEYS = ("modules", "image", "uenv", "nccl", "plugin")
#: Fields of one entry of the list form of ``validation.references``.
REFERENCE_ENTRY_KEYS = ("name", "value", "lower", "upper", "unit", "nodes", "size", "controller", "stack",
                        "stack_hash", "date", "source", "note")
_DATE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$")


@dataclass(frozen=True)
class RefStack:
    """The software a reference number was measured on (a reference's ``stack``), or what an
    environment is known to run; None (or ``()``) where it is not said or not known.

    Attributes:
        modules: modules loaded (``conda/2025-09-25``), in order.
        image: the container image (``nvcr.io/nvidia/pytorch:25.01-py3``), or None.
        uenv: the uenv (``prgenv-gnu/24.11``), or None.
        nccl: the NCCL (or RCCL) version (``2.21.5``; ``2.21`` matches any 2.21.x), or None.
        plugin: the network plug-in, ``NAME [VERSION]`` (``aws-ofi-nccl 1.9.1``), ``none`` for
            none (NCCL's own IB or TCP socket transport), or None.
    """

    modules: Tuple[str, ...] = ()
    image: Optional[str] = None
    uenv: Optional[str] = None
    nccl: Optional[str] = None
    plugin: Optional[str] = None

    def describe(self) -> Dict[str, Any]:
        """The fields it states (``{"modules": [...], "nccl": "2.21.5"}``), in :data:`REF_STACK_KEYS` order."""
        d: Dict[str, Any] = {}
        if self.modules:
            d["modules"] = list(self.modules)
        for k in ("image", "uenv", "nccl", "plugin"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d

    def digest(self) -> str:
        """A stable hash of the description: the first 16 hex digits of the SHA-256 of
        :meth:`describe` as JSON with sorted keys and no spaces (``json.dumps(d, sort_keys=True,
        separators=(",", ":"))``), so the same stated stack gives the same hash on any machine."""
        text = json.dumps(self.describe(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def text(self) -> str:
        """``modules conda/2025-09-25, nccl 2.21.5, plugin aws-ofi-nccl`` (one line)."""
        return ", ".join(f"{k} {' '.join(v) if isinstance(v, list) else v}" for k, v in self.describe().items())


def _version_matches(ref: str, have: str) -> bool:
    """``ref`` (``2.21``) names ``have`` (``2.21.5``): equal dotted parts as far as ``ref`` goes."""
    want, got = ref.strip().split("."), have.strip().split(".")
    return len(got) >= len(want) and got[:len(want)] == want


def _plugin_parts(text: str) -> Tuple[str, Optional[str]]:
    """``aws-ofi-nccl 1.9.1`` → ``("aws-ofi-nccl", "1.9.1")``; names compare case-insensitively."""
    parts = text.split()
    return (parts[0].lower() if parts else "", parts[1].lstrip("v") if len(parts) > 1 else None)


_WHAT = {"modules": "modules", "image": "container image", "uenv": "uenv", "nccl": "NCCL version",
         "plugin": "network plug-in"}


def stack_differences(ref: RefStack, env: RefStack) -> List[str]:
    """Why a number measured on ``ref`` cannot be compared with a run on ``env``: one line per
    field ``ref`` states that ``env`` does not match or does not know (empty: comparable).

    Rules: every module of ``ref`` must be loaded in ``env`` (others may be too); the image and
    uenv must be equal; the NCCL version must match as far as ``ref`` states it (``2.21`` matches
    ``2.21.5``); the plug-in's name must be equal and, where both state one, its version.
    """
    out: List[str] = []
    for key in REF_STACK_KEYS:
        want = getattr(ref, key)
        if not want:
            continue
        have = getattr(env, key)
        if not have:
            out.append(f"the reference was measured with {_WHAT[key]} {' '.join(want) if key == 'modules' else want}; "
                       f"the environment's {_WHAT[key]} is not known")
        elif key == "modules":
            missing = [m for m in want if m not in have]
            if missing:
                out.append(f"the reference was measured with modules {' '.join(want)}; the environment loads "
                           f"{' '.join(have)} (not {' '.join(missing)})")
        elif key == "nccl":
            if not _version_matches(want, have):
                out.append(f"the reference was measured with NCCL {want}; the environment has NCCL {have}")
        elif key == "plugin":
            (wn, wv), (hn, hv) = _plugin_parts(want), _plugin_parts(have)
            if wn != hn or (wv and hv and not _version_matches(wv, hv)):
                out.append(f"the reference was measured with network plug-in {want}; the environment has {have}")
        elif want != have:
            out.append(f"the reference was measured with {_WHAT[key]} {want}; the environment has {have}")
    return out


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
        size: the message size in bytes it was measured at, or None (the mapping form says none).
        controller: what ran the allreduce (``nccl``, ``*``; :data:`REFERENCE_CONTROLLERS`).
        stack: the software it was measured on (:class:`RefStack`), or None: the mapping form,
            whose references hold for any stack.
        date: the date it was published or measured (``YYYY-MM-DD``), or None.
        source: the id in the site file's ``sources`` it was read in, or None.
        note: free text, or None.
    """

    nodes: int
    name: str
    value: float
    lower: Optional[float]
    upper: Optional[float]
    unit: str
    size: Optional[int] = None
    controller: str = "*"
    stack: Optional[RefStack] = None
    date: Optional[str] = None
    source: Optional[str] = None
    note: Optional[str] = None

    @property
    def stack_hash(self) -> Optional[str]:
        """:meth:`RefStack.digest` of its stack, or None without one."""
        return self.stack.digest() if self.stack is not None else None

    def differences(self, env: RefStack) -> List[str]:
        """Why it cannot be compared with a run on ``env`` (:func:`stack_differences`); empty when it
        can, and always for a reference without a stack."""
        return stack_differences(self.stack, env) if self.stack is not None else []

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form: every field, ``stack`` as :meth:`RefStack.describe` and its ``stack_hash``."""
        return {"name": self.name, "nodes": self.nodes, "size": self.size, "controller": self.controller,
                "value": self.value, "lower": self.lower, "upper": self.upper, "unit": self.unit,
                "stack": self.stack.describe() if self.stack is not None else None, "stack_hash": self.stack_hash,
                "date": self.date, "source": self.source}


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


def parse_references(spath: str, raw, source_ids: Sequence[str] = ()) -> Tuple[Reference, ...]:
    """Parse ``validation.references``: either a mapping ``nodes → {name: [value, lower, upper,
    unit]}`` (SpecError naming ``validation.references.<nodes>.<name>``), or a list of published
    numbers, each with its stack, date and source (:func:`_list_reference`; SpecError naming
    ``validation.references[i].<field>``). ``source_ids``: the ids of the file's ``sources``."""
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
    shape = ("a mapping of node counts to {performance variable: [value, lower, upper, unit]}, or a list of "
             "references with name, value, unit, nodes, stack, date and source")
    if isinstance(refs, list):
        at = v.line_of("references")
        return tuple(_list_reference(spath, i, entry, at, source_ids) for i, entry in enumerate(refs))
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


def _list_reference(spath: str, i: int, entry: Any, at: Optional[int], source_ids: Sequence[str]) -> Reference:
    """One entry of the list form of ``validation.references``::

        - {name: allreduce_busbw_1GiB, value: 36.03, lower: -0.1, upper: null, unit: GB/s,
           nodes: 2, size: 1GiB, controller: nccl,
           stack: {nccl: "2.21.5", plugin: aws-ofi-nccl}, stack_hash: 0123456789abcdef,
           date: "2024-04-29", source: SOURCE-ID, note: ...}

    ``lower``, ``upper``, ``size`` (default none), ``controller`` (default ``*``), ``stack_hash``
    (checked against the stack's :meth:`RefStack.digest` when given) and ``note`` are optional.

    Raises:
        SpecError: naming ``validation.references[i].FIELD`` and the expected form (exit 2).
    """
    where = f"validation.references[{i}]"
    line = entry.line_of("name") if isinstance(entry, LineDict) and "name" in entry else at

    def bad(fld: str, expect: str, got: Any) -> SpecError:
        return SpecError(spath, f"{where}.{fld}", expect, got=got,
                         line=entry.line_of(fld) if isinstance(entry, LineDict) and fld in entry else line)

    if not isinstance(entry, dict):
        raise SpecError(spath, where, "a mapping with name, value, unit, nodes, stack, date and source", got=entry,
                        line=at)
    unknown = [k for k in entry if k not in REFERENCE_ENTRY_KEYS]
    if unknown:
        raise bad(str(unknown[0]), "one of " + ", ".join(REFERENCE_ENTRY_KEYS), unknown[0])
    for required in ("name", "value", "unit", "nodes", "stack", "date", "source"):
        if entry.get(required) is None:
            raise bad(required, f"a {required} (required)", None)
    name = entry["name"]
    if not isinstance(name, str) or not PERF_NAME_RE.fullmatch(name):
        raise bad("name", "a performance variable name (letters, digits, '_'; e.g. allreduce_busbw_1GiB)", name)
    value, lower, upper, unit = entry["value"], entry.get("lower"), entry.get("upper"), entry["unit"]
    if not _number(value) or value <= 0:
        raise bad("value", "the reference value, a number above 0", value)
    if lower is not None and (not _number(lower) or not -1 <= lower <= 0):
        raise bad("lower", "the lower bound as a fraction of the value, from -1 to 0 (-0.1: at least 90 %), "
                  "or null", lower)
    if upper is not None and (not _number(upper) or upper < 0):
        raise bad("upper", "the upper bound as a fraction of the value, 0 or more (0.5: at most 150 %), or null",
                  upper)
    if unit not in REFERENCE_UNITS:
        raise bad("unit", "one of " + ", ".join(REFERENCE_UNITS), unit)
    nodes = entry["nodes"]
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise bad("nodes", "a node count (an integer, 1 or more)", nodes)
    size = None
    if entry.get("size") is not None:
        size = parse_size(entry["size"])
        if size is None or size <= 0:
            raise bad("size", "a message size (8B, 64MiB, 1GiB, or bytes)", entry["size"])
    controller = str(entry.get("controller", "*"))
    if controller not in REFERENCE_CONTROLLERS:
        raise bad("controller", "one of " + ", ".join(REFERENCE_CONTROLLERS), entry.get("controller"))
    stack = _ref_stack(entry["stack"], lambda k, e, g: bad(f"stack.{k}" if k else "stack", e, g))
    if entry.get("stack_hash") is not None and str(entry["stack_hash"]) != stack.digest():
        raise bad("stack_hash", f"the hash of the stack as written ({stack.digest()}); the stack or the hash "
                  f"was changed", entry["stack_hash"])
    date = str(entry["date"])
    if not _DATE.match(date):
        raise bad("date", "a date YYYY-MM-DD (quoted)", entry["date"])
    source = str(entry["source"])
    if source not in source_ids:
        raise bad("source", "an id of the file's sources (" + ", ".join(source_ids) + ")", source)
    note = entry.get("note")
    if note is not None and not isinstance(note, str):
        raise bad("note", "free text", note)
    return Reference(nodes=nodes, name=name, value=float(value), lower=None if lower is None else float(lower),
                     upper=None if upper is None else float(upper), unit=unit, size=size, controller=controller,
                     stack=stack, date=date, source=source, note=note)


def _ref_stack(data: Any, bad) -> RefStack:
    """A reference's ``stack`` mapping (``bad(key, expectation, got)`` makes the SpecError)."""
    if not isinstance(data, dict) or not data:
        raise bad("", "a mapping naming what the number was measured on: " + ", ".join(REF_STACK_KEYS), data)
    for k, val in data.items():
        if k not in REF_STACK_KEYS:
            raise bad(str(k), "one of " + ", ".join(REF_STACK_KEYS), k)
        if k == "modules":
            if not isinstance(val, list) or not val or not all(isinstance(m, str) and m.strip() for m in val):
                raise bad(k, "a list of module names (conda/2025-09-25)", val)
        elif isinstance(val, bool) or not isinstance(val, (str, int, float)) or not str(val).strip():
            raise bad(k, "a string" + (" (quote versions: \"2.21.5\")" if k == "nccl" else ""), val)
    return RefStack(modules=tuple(data.get("modules") or ()), image=_opt(data.get("image")),
                    uenv=_opt(data.get("uenv")), nccl=_opt(data.get("nccl")), plugin=_opt(data.get("plugin")))


def _opt(v: Any) -> Optional[str]:
    return None if v is None else str(v).strip()
