"""The spec catalog: where specs live and how a name becomes a :class:`Spec`.

Search order: each directory of ``ENVTOOL_SPEC_PATH`` (``:``-separated), then the bundled
specs (``specs/`` of the source tree, or ``envtool/_bundled/specs`` in an installed wheel).
A name that contains ``/`` or ends in ``.yaml``/``.yml`` is read as a path.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Dict

from envtool.core.errors import SpecError
from envtool.core.inputs import check_input
from envtool.spec import load, rules
from envtool.spec.search import available, bundled_dir, search_dirs  # noqa: F401 (re-exported)
from envtool.spec.model import Spec

def find_named(name: str, found: Dict[str, Path], kind: str, fallback_hint: str, list_known: bool = False) -> Path:
    """The file for ``name`` among ``found`` (``available()``'s map), or ``name`` itself as a path.

    Args:
        name: a name, or a path when it contains ``/`` or ends in ``.yaml``/``.yml``.
        found: name → file.
        kind: ``spec`` or ``site`` (for the message).
        fallback_hint: the hint when no name is close.
        list_known: name every known entry in the message.
    Raises:
        SpecError: no such file, or no such name (the message lists close names).
    """
    if "/" in name or name.endswith((".yaml", ".yml")):
        path = Path(name)
        check_input(path, f"{kind} file")  # a FIFO or a device: exit 2 at once
        try:
            ok = path.is_file()
        except OSError as exc:  # ENAMETOOLONG, ELOOP …: is_file only swallows "not there"
            raise SpecError(name, f"({kind} file)", f"an existing {kind} file ({exc.strerror})") from None
        if not ok:
            raise SpecError(name, f"({kind} file)", f"an existing {kind} file")
        return path
    if name in found:
        return found[name]
    close = difflib.get_close_matches(name, list(found), n=3)
    expected = f"a known {kind}" + (" (" + ", ".join(sorted(found)) + ")" if list_known else "")
    raise SpecError(name, f"({kind} name)", expected, got=name,
                    hint=("did you mean " + ", ".join(close) + "?") if close else fallback_hint)


def find(name: str) -> Path:
    """The file for spec ``name`` (a name or a path).

    Raises:
        SpecError: no such spec (the message lists close names).
    """
    return find_named(name, available(), "spec", "see 'envtool specs'")


def load_spec(name: str) -> Spec:
    """Load, merge (``extends``) and validate spec ``name`` (or a path).

    Returns:
        the resolved :class:`Spec`.
    Raises:
        SpecError: anything wrong with the file or its parents, exit status 2.
    """
    path = find(name)
    raw = load.resolve_raw(path, find)
    if raw.get("abstract") is True:
        raise SpecError(path, "abstract", "a concrete spec (this one is only a parent for 'extends')",
                        line=raw.line_of("abstract"), hint="see 'envtool specs' for the specs that extend it")
    spec_name = str(raw.get("name") or path.stem) if "name" in raw else path.stem
    spec = load.build_spec(str(path), raw, name=spec_name)
    rules.check(spec, raw)
    return spec
