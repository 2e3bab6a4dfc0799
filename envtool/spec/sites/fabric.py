"""A site file's ``fabric`` section: the network variables a multi-GPU job needs on the site's
interconnect (NCCL/RCCL plug-in, libfabric settings), each with its value, when it applies,
whether a module of the site already sets it, its provenance mark and its source (issue 44).

Format::

    fabric:
      - name: NCCL_NET                # a shell variable name
        value: "AWS Libfabric"        # exported shell-quoted
        when: nodes > 1               # always (default) | nodes > N | nodes >= N
        module_sets: true             # the site's module already exports it: the job script
                                      #   shows it in a comment and does not export it again
        modules: [conda/*-aws-nccl-*] # only when the job loads one of these modules (globs);
                                      #   default: every job
        mark: V                       # provenance mark (required)
        source: alcf-nccl             # id in the file's sources (required)
        note: free text

``jobscript`` and ``validate`` (through :func:`envtool.steps.jobscript.build_request`) export
the variables that apply to the job's node count and modules and are not ``module_sets``.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from envtool.spec import load
from envtool.spec import model as m
from envtool.spec.names import ENV_KEY_RE
from envtool.spec.sites.reader import list_section, require_source

FABRIC_KEYS = ("name", "value", "when", "module_sets", "modules", "mark", "source", "note")
#: ``when``: ``always`` or a bound on the job's node count.
WHEN_RE = re.compile(r"\s*nodes\s*(>=|>)\s*([0-9]{1,6})\s*")
MODULE_GLOB_RE = re.compile(r"[A-Za-z0-9_.+/:@=,*?-]{1,200}")
#: Longest variable name a fabric entry may set (characters).
VAR_NAME_MAX = 128


@dataclass(frozen=True)
class FabricVar:
    """One entry of ``fabric``.

    Attributes:
        name: the variable.
        value: its value (a string; exported shell-quoted).
        min_nodes: the smallest node count it applies to (1: always; ``nodes > 1`` gives 2).
        module_sets: True when a module of the site the job loads already exports it.
        modules: module names or globs (``conda/*-aws-nccl-*``): it applies only to a job that
            loads one of them; () for every job.
        mark: provenance mark (a key of :data:`envtool.spec.model.MARKS`).
        source: id in the file's ``sources``.
        note: free text, or None.
    """

    name: str
    value: str
    min_nodes: int = 1
    module_sets: bool = False
    modules: Tuple[str, ...] = ()
    mark: str = "V"
    source: str = ""
    note: Optional[str] = None

    def applies(self, nodes: int, loaded: Sequence[str]) -> bool:
        """True when the variable applies to a job of ``nodes`` nodes (an int >= 1) that loads the
        modules ``loaded`` (names as ``module load`` gets them)."""
        if nodes < self.min_nodes:
            return False
        if not self.modules:
            return True
        return any(fnmatch.fnmatchcase(mod, g) for mod in loaded for g in self.modules)

    def when_text(self) -> str:
        """``always`` or ``nodes >= N``."""
        return "always" if self.min_nodes <= 1 else f"nodes >= {self.min_nodes}"


def _when(r, raw) -> int:
    """``when`` as the smallest node count (SpecError naming ``fabric[i].when`` otherwise)."""
    if raw is None or raw == "always":
        return 1
    mt = WHEN_RE.fullmatch(raw) if isinstance(raw, str) else None
    if mt is None:
        raise r.error("when", "always, 'nodes > N' or 'nodes >= N'", got=raw)
    n = int(mt.group(2))
    return max(1, n + 1 if mt.group(1) == ">" else n)


def parse_fabric(spath: str, raw, source_ids: Sequence[str]) -> Tuple[FabricVar, ...]:
    """Parse the ``fabric`` section: a list of variables, in file order; () when absent.

    Args:
        spath: the site file (for messages).
        raw: the file's top-level mapping.
        source_ids: the ids of its ``sources``.
    Raises:
        SpecError: not a list of mappings, an unknown key, a bad name, value, ``when``, mark,
            ``module_sets`` or ``modules``, or a missing or unknown source — naming the file,
            line and ``fabric[i].<field>`` (exit 2).
    """
    items, line = list_section(spath, raw, "fabric", "a list of variables (name, value, when, module_sets, mark, source)",
                               "a mapping (" + ", ".join(FABRIC_KEYS) + ")")
    out = []
    for i, item in items:
        r = load._Reader(spath, item, f"fabric[{i}]", line=line)
        r.check_keys(FABRIC_KEYS)
        name = r.get("name")
        if not isinstance(name, str) or len(name) > VAR_NAME_MAX or not ENV_KEY_RE.fullmatch(name):
            raise r.error("name", "a shell variable name (NCCL_NET)", got=name)
        value = r.get("value")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise r.error("value", "a string or number (quote it in YAML: \"AWS Libfabric\")", got=value)
        module_sets = r.get("module_sets", False)
        if not isinstance(module_sets, bool):
            raise r.error("module_sets", "true or false (true: the site's module already exports it)",
                          got=module_sets)
        mark = r.get("mark")
        if mark not in m.MARKS:
            raise r.error("mark", "a provenance mark, one of " + ", ".join(m.MARKS), got=mark)
        source = require_source(r, r.str("source"), source_ids, f"{name}={value}")
        modules = r.get("modules") or []
        if not isinstance(modules, list) or not all(isinstance(g, str) and MODULE_GLOB_RE.fullmatch(g)
                                                    for g in modules):
            raise r.error("modules", "a list of module names or globs ('conda/*-aws-nccl-*')", got=modules)
        out.append(FabricVar(name=name, value=str(value), min_nodes=_when(r, r.get("when")), module_sets=module_sets,
                             modules=tuple(modules), mark=str(mark), source=source, note=r.str("note")))
    return tuple(out)


def applying(fabric: Sequence[FabricVar], nodes: int, loaded: Sequence[str]) -> Tuple[FabricVar, ...]:
    """The entries of ``fabric`` that apply to a job of ``nodes`` nodes loading the modules
    ``loaded`` (see :meth:`FabricVar.applies`), in file order; a later entry of the same name wins."""
    chosen: Dict[str, FabricVar] = {}
    for v in fabric:
        if v.applies(nodes, loaded):
            chosen.pop(v.name, None)
            chosen[v.name] = v
    return tuple(chosen.values())
