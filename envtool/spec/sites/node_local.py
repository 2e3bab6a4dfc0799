"""A site file's ``node_local`` section: storage on each compute node (:class:`NodeLocal`)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

from envtool.spec.sites.reader import require_source, section

NODE_LOCAL_KEYS = ("path", "source", "directives", "note")
#: a node-local path: absolute, plain path characters and ``$NAME`` / ``${NAME}`` references only
#: (expanded by the job's shell inside double quotes: nothing else in it can be expanded or run)
NODE_LOCAL_PATH_RE = re.compile(r"/(?:[A-Za-z0-9_.+@%,=:/-]|\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\})*")


@dataclass(frozen=True)
class NodeLocal:
    """A site file's ``node_local`` section: storage on each compute node that a job may write,
    where ``jobscript --stage`` puts an environment (issue 25).

    Attributes:
        path: absolute directory; may hold ``$NAME``/``${NAME}`` references (``/mnt/bb/$USER``),
            which the job's shell expands.
        source: id in the site file's ``sources`` that documents it (required: the path is a fact
            about the site).
        directives: directive arguments a job needs to get the storage (Summit's
            ``-alloc_flags NVME``), written as they are.
        note: free text, or None.
    """

    path: str
    source: str
    directives: Tuple[str, ...] = ()
    note: Optional[str] = None


def parse_node_local(spath: str, raw, source_ids) -> Optional[NodeLocal]:
    """Parse the ``node_local`` section (SpecError naming ``node_local.<field>`` on a bad value)."""
    r = section(spath, raw, "node_local", NODE_LOCAL_KEYS, "a mapping with path: DIR and source: ID")
    if r is None:
        return None
    path = r.str("path")
    if path is None:
        raise r.error("path", "the absolute directory of each compute node's local storage (/tmp, /mnt/bb/$USER)")
    if not NODE_LOCAL_PATH_RE.fullmatch(path) or "/../" in path + "/":
        raise r.error("path", "an absolute directory of letters, digits, '_', '.', '-', '/' and $NAME or ${NAME} "
                              "references (no quotes, spaces, '..', $(...) or backquotes)", got=path)
    source = require_source(r, r.str("source"), source_ids, "the path")
    directives = r.str_list("directives")
    return NodeLocal(path=path.rstrip("/") or "/", source=source, directives=directives, note=r.str("note"))

