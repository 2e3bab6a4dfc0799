"""What a modulefile says, independent of the module system: :class:`ModuleContent` and its
:class:`EnvChange` entries, and the names a module system accepts.

Modelled on Spack's format-independent module description (``spack/spack@04e016a8154f:
lib/spack/spack/modules/common.py``, ``BaseContext``): :mod:`envtool.modules.build` fills it in from
a prefix and its spec, and each writer (:mod:`envtool.modules.writer`) renders it. This module
imports nothing else of :mod:`envtool.modules`, so both the builder and
:mod:`envtool.modules.activation` can use it without an import circle.

Every change is static and reversible: ``prepend_path``/``append_path`` (undone by removing
the entry) and ``pushenv`` (undone by restoring the previous value, or unsetting it when there
was none). Nothing is executed at load time, so ``module unload`` restores the shell exactly.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from envtool.spec.names import ENV_KEY_RE

#: Module name and version components: what Lmod and Environment Modules accept as a path
#: component without quoting, and never ``.``-leading (hidden) or ``default``.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
#: Environment variable names a modulefile may set (POSIX shell names: the specs' own rule).
VAR_RE = ENV_KEY_RE
#: Control characters: Lmod 8.6 and Environment Modules 5.2 both emit a variable whose value
#: holds a newline as two shell lines (the second is run as a command: seen with both on
#: Debian 12), so values may not contain them. Text in whatis/help may (it is only displayed).
CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass(frozen=True)
class EnvChange:
    """One reversible change to the environment.

    Attributes:
        op: ``prepend_path``, ``append_path`` (one ``:``-separated entry) or ``pushenv`` (set;
            unload restores the previous value or unsets it).
        name: the variable (a POSIX shell name).
        value: the entry or value (no control characters).
        origin: where it comes from, for a comment: ``activation``, ``spec env``, ``site env``
            or ``etc/conda/activate.d/<script>``.
    """

    op: str
    name: str
    value: str
    origin: str = "activation"


@dataclass(frozen=True)
class ModuleContent:
    """Everything a modulefile says, independent of the module system.

    Attributes:
        name: module name (``cpu-horovod``).
        version: module version (``2026.11``); the file is ``<root>/<name>/<version>.lua``.
        prefix: the environment's prefix as users will see it (absolute path).
        kind: ``conda`` (has ``conda-meta/``), ``venv`` (has ``pyvenv.cfg``) or ``prefix``.
        whatis: ``Label: text`` lines for ``whatis``/``module-whatis`` (may hold any text).
        help: the help text (may hold any text; the writers escape it).
        family: the Lmod family (``python``: one Python stack at a time), or None.
        conflicts: module names that cannot be loaded together with this one.
        depends_on: modules loaded first and unloaded with it (``spec.site.modules``).
        changes: environment changes, in order.
        extensions: ``(name, version)`` of every installed package, for ``module spider``.
        notes: comments for the admin (e.g. what an activate.d script did that was not applied).
        warning: printed on every ``module load`` (an archived or deprecated stack), or None.
    """

    name: str
    version: str
    prefix: str
    kind: str
    whatis: Tuple[str, ...] = ()
    help: str = ""
    family: Optional[str] = "python"
    conflicts: Tuple[str, ...] = ()
    depends_on: Tuple[str, ...] = ()
    changes: Tuple[EnvChange, ...] = ()
    extensions: Tuple[Tuple[str, str], ...] = ()
    notes: Tuple[str, ...] = ()
    warning: Optional[str] = None

    @property
    def full_name(self) -> str:
        """``name/version``."""
        return f"{self.name}/{self.version}"

    def to_dict(self) -> Dict[str, object]:
        """JSON-ready form."""
        return {"name": self.name, "version": self.version, "prefix": self.prefix, "kind": self.kind,
                "whatis": list(self.whatis), "help": self.help, "family": self.family,
                "conflicts": list(self.conflicts), "depends_on": list(self.depends_on),
                "changes": [{"op": c.op, "name": c.name, "value": c.value, "origin": c.origin}
                            for c in self.changes],
                "extensions": [f"{n}/{v}" for n, v in self.extensions], "notes": list(self.notes),
                "warning": self.warning}


#: ``--extensions`` choices: every installed package, the spec's own
#: (:func:`envtool.modules.packages.extension_names`), or none.
EXTENSIONS_CHOICES = ("all", "spec", "none")
