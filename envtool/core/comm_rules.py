"""Known-bad communication stacks: GPU × network × NCCL × plug-in combinations that corrupt data,
hang or crash (core layer; issue 41, item 4).

One table, :data:`KNOWN`: each row says what it matches (an NCCL version range, GPU models, a
network, a network plug-in, and the environment settings that work around it), what goes wrong,
the fix, its public sources and the date of the newest of them. Adding a rule is one row.

The facts a row is matched against (:class:`CommFacts`) come from the spec (its NCCL pin or the
site's ``nccl/…`` module), the site file's ``gpu`` section (:mod:`envtool.spec.sites.gpu`) and
the environment the job gets (the site's and the stack's ``env``). ``plan`` refuses a spec whose
facts match a row (exit 2) and names the row, its source and the fix; ``doctor`` and the
pre-flight report a match as a failed check. A row whose deciding fact is not known (no NCCL
version, no ``gpu`` section) does not match; :func:`evaluate` says which rows could not be
decided and why.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class CommFacts:
    """What is known about a job's communication stack.

    Attributes:
        gpu: the GPU's name (``NVIDIA GH200 480GB``, ``H100``), or None.
        network: ``slingshot``, ``infiniband``, ``ethernet`` or ``nvlink``, or None.
        nccl: NCCL's version (``2.28.9``), or None.
        plugins: ``(name, version or None)`` of the NCCL network plug-ins in use.
        env: the variables the job's ranks get.
        where: where the facts come from, for messages (``site perlmutter (2025-01-15)``).
    """

    gpu: Optional[str] = None
    network: Optional[str] = None
    nccl: Optional[str] = None
    plugins: Tuple[Tuple[str, Optional[str]], ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    where: str = ""


def proto_excludes(value: Optional[str], proto: str) -> bool:
    """Whether ``NCCL_PROTO=value`` keeps NCCL from using protocol ``proto``: a list that names
    the protocols to use leaves it out, or a ``^``-list names it (NCCL's documented forms:
    https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-proto)."""
    if not value:
        return False
    text = value.strip()
    negate = text.startswith("^")
    names = {p.strip().lower() for p in text.lstrip("^").split(",") if p.strip()}
    return proto.lower() in names if negate else proto.lower() not in names


@dataclass(frozen=True)
class CommRule:
    """One known-bad communication stack.

    Attributes:
        id: stable id shown in messages (``nccl-2.28.9-aws-ofi-nccl``).
        reason: what goes wrong, one line.
        fix: what to do instead.
        source: every public source of the row's facts.
        date: the date of the newest source (``YYYY-MM-DD``).
        nccl: the NCCL versions affected, a PEP 440 specifier, or "" for any.
        gpus: patterns (regular expressions, case-insensitive) on the GPU's name; empty: any GPU.
        network: the network the row needs, or "" for any.
        plugin: a network plug-in that must be in use, or "" for none needed.
        avoided_by: ``(variable, protocol)``: NCCL_PROTO excluding that protocol avoids the
            problem (:func:`proto_excludes`), or None.
        avoided_by_env: variables whose values, all set as given, avoid the problem.
    """

    id: str
    reason: str
    fix: str
    source: str
    date: str
    nccl: str = ""
    gpus: Tuple[str, ...] = ()
    network: str = ""
    plugin: str = ""
    avoided_by: Optional[Tuple[str, str]] = None
    avoided_by_env: Tuple[Tuple[str, str], ...] = ()

    def explain(self) -> str:
        """``known-bad stack ID: REASON; fix: FIX; source: SOURCE (DATE)`` (for messages)."""
        return f"known-bad stack {self.id}: {self.reason}; fix: {self.fix}; source: {self.source} ({self.date})"


#: The rows (see the module docstring). Sources were read on the dates given.
KNOWN: Tuple[CommRule, ...] = (
    CommRule(
        id="nccl-2.28.9-aws-ofi-nccl",
        nccl="==2.28.9",
        plugin="aws-ofi-nccl",
        reason="NCCL 2.28.9 with the aws-ofi-nccl plug-in deadlocks, and crashes with rail mismatch errors when "
               "GIN is on (NCCL 2.27.7 with the same plug-in worked in the same report)",
        fix="use NCCL 2.27.7 (or a release after 2.28.9 that the plug-in's release notes name) with aws-ofi-nccl",
        source="https://github.com/aws/aws-ofi-nccl/issues/1055 (\"aws-ofi-nccl Plugin Fails with NCCL 2.28.9 and "
               "Vanilla Libfabric\", H100 nodes, 2025-11-18)",
        date="2025-11-18",
    ),
    CommRule(
        id="gh200-slingshot-ll128",
        gpus=(r"\bGH200\b",),
        network="slingshot",
        avoided_by=("NCCL_PROTO", "LL128"),
        avoided_by_env=(("FI_CXI_RDZV_THRESHOLD", "0"), ("FI_CXI_RDZV_GET_MIN", "0")),
        reason="NCCL's LL128 protocol between GH200 nodes over Slingshot (CXI) corrupts data silently: the two "
               "halves of a 128-byte chunk can reach GPU memory out of order",
        fix="export NCCL_PROTO=^LL128 in the job (or HPE's FI_CXI_RDZV_THRESHOLD=0 and FI_CXI_RDZV_GET_MIN=0)",
        source="https://github.com/NVIDIA/nccl/issues/2001 (HPE, 2026-05-05: \"related to the use of GPUDirect in "
               "the LL128 path on Grace Hopper\"); https://github.com/NVIDIA/nccl/pull/2053 (LL128 corrupt, Simple "
               "and LL clean; closed unmerged); https://github.com/HewlettPackard/shs-ccl-docs/pull/21 (the "
               "FI_CXI_* settings)",
        date="2026-05-05",
    ),
    CommRule(
        id="blackwell-nccl-before-2.25.1",
        nccl="<2.25.1",
        gpus=(r"\bGB?[23]00\b", r"\bB[23]00\b"),
        reason="NCCL supports Blackwell (B200, GB200) from 2.25.1; older releases do not run there",
        fix="use NCCL 2.25.1 or newer",
        source="https://github.com/NVIDIA/nccl/issues/1611 (NVIDIA, 2025-02-22: \"GB200 and Blackwell were "
               "officially supported in the NCCL 2.25.1 and later releases\")",
        date="2025-02-22",
    ),
    CommRule(
        id="hopper-nccl-before-2.15",
        nccl="<2.15",
        gpus=(r"\bGH200\b", r"\bH[12]00\b", r"\bH800\b"),
        reason="NCCL supports Hopper (compute capability 9.0: H100, H200, GH200) from 2.15; older releases have "
               "no sm_90 kernels",
        fix="use NCCL 2.15 or newer (NVIDIA suggested 2.19 or later on H800 nodes in 2024)",
        source="https://github.com/cupy/cupy/issues/7094 (CuPy maintainer, 2022-11-09: \"NCCL 2.15 adds support "
               "for H100 (sm90)\"); https://github.com/NVIDIA/nccl/releases/tag/v2.16.2-1 (\"Support for H100 "
               "features\"); https://github.com/NVIDIA/nccl/issues/1199 (NVIDIA, 2024-02-27)",
        date="2024-02-27",
    ),
    CommRule(
        id="hopper-nccl-2.18.1-ll128",
        nccl="==2.18.1",
        gpus=(r"\bH100\b",),
        network="infiniband",
        avoided_by=("NCCL_PROTO", "LL128"),
        avoided_by_env=(("NCCL_IB_PCI_RELAXED_ORDERING", "0"),),
        reason="on HGX H100 (a NIC sharing a PCI switch with one GPU) NCCL 2.18.1's Tree algorithm makes LL128 "
               "unsafe: data corruption",
        fix="export NCCL_PROTO=^LL128 (or NCCL_IB_PCI_RELAXED_ORDERING=0), or use a later NCCL",
        source="https://docs.nvidia.com/deeplearning/nccl/release-notes/rel_2-18-1.html (Known Issues); "
               "https://github.com/coreweave/nccl-tests/pull/18 (2023-05-27: the relaxed-ordering setting on H100s)",
        date="2023-05-27",
    ),
)


def _nccl_version(text: Optional[str]) -> Optional[Version]:
    """``2.15.5-ofi`` (a site module's name) or ``2.28.9`` as a Version, or None."""
    m = re.match(r"\d+(?:\.\d+)*", (text or "").strip())
    try:
        return Version(m.group(0)) if m else None
    except InvalidVersion:
        return None


def _avoided(rule: CommRule, env: Mapping[str, str]) -> Optional[str]:
    """The setting in ``env`` that avoids ``rule``'s problem, or None."""
    if rule.avoided_by and proto_excludes(env.get(rule.avoided_by[0]), rule.avoided_by[1]):
        return f"{rule.avoided_by[0]}={env.get(rule.avoided_by[0])}"
    if rule.avoided_by_env and all(env.get(k) == v for k, v in rule.avoided_by_env):
        return " ".join(f"{k}={v}" for k, v in rule.avoided_by_env)
    return None


def evaluate(facts: CommFacts, rules: Tuple[CommRule, ...] = KNOWN) -> Dict[str, List]:
    """Match ``facts`` against ``rules``.

    Returns:
        ``{"matched": [CommRule], "undecided": [(CommRule, why)], "avoided": [(CommRule, setting)]}``:
        rows that apply, rows a missing fact leaves open (only rows whose known facts all
        match), and rows that would apply but the environment works around.
    """
    out: Dict[str, List] = {"matched": [], "undecided": [], "avoided": []}
    for rule in rules:
        missing = []
        if rule.gpus:
            if facts.gpu is None:
                missing.append("the GPU model")
            elif not any(re.search(p, facts.gpu, re.IGNORECASE) for p in rule.gpus):
                continue
        if rule.network:
            if facts.network is None:
                missing.append("the network")
            elif facts.network != rule.network:
                continue
        if rule.nccl:
            have = _nccl_version(facts.nccl)
            if have is None:
                missing.append("the NCCL version")
            elif not SpecifierSet(rule.nccl).contains(have, prereleases=True):
                continue
        if rule.plugin and rule.plugin not in {name for name, _ in facts.plugins}:
            continue  # a plug-in not listed is not in use
        setting = _avoided(rule, facts.env)
        if setting:
            out["avoided"].append((rule, setting))
        elif missing:
            out["undecided"].append((rule, "not known: " + ", ".join(missing)))
        else:
            out["matched"].append(rule)
    return out
