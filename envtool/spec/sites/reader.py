"""Helpers the site-file sections share: a checked reader over one section, and the check that a
``source`` names an entry of the file's ``sources``."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from envtool.core.errors import SpecError
from envtool.spec import load
from envtool.spec.yamlload import LineDict


def line_of(raw: Any, key: str) -> Optional[int]:
    """The line of ``key`` in the mapping ``raw`` (None when ``raw`` carries no lines)."""
    return raw.line_of(key) if isinstance(raw, LineDict) else None


def section(spath: str, raw, key: str, keys, expected: str):
    """A ``load._Reader`` over the mapping section ``key`` of a site file (checked against
    ``keys``), or None when the file has no such section.

    Raises:
        SpecError: the section is not a mapping (``expected`` says what it should be) or has an
            unknown key; names the file, line and field.
    """
    data = raw.get(key)
    if data is None:
        return None
    line = line_of(raw, key)
    if not isinstance(data, dict):
        raise SpecError(spath, key, expected, got=data, line=line)
    r = load._Reader(spath, data, key, line=line)
    r.check_keys(keys)
    return r


def list_section(spath: str, raw, key: str, expected: str, item_expected: str) -> Tuple[List[Tuple[int, dict]], Optional[int]]:
    """The items of the list section ``key`` of a site file, each a mapping, as ``(index, item)``
    pairs, and the section's line (``([], None)`` when the file has no such section).

    Raises:
        SpecError: the section is not a list (``expected`` says what it should be) or an item is not a
            mapping (``item_expected``); names the file, line and ``key[i]``.
    """
    data = raw.get(key)
    if data is None:
        return [], None
    line = line_of(raw, key)
    if not isinstance(data, list):
        raise SpecError(spath, key, expected, got=data, line=line)
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise SpecError(spath, f"{key}[{i}]", item_expected, got=item, line=line)
    return list(enumerate(data)), line


def check_source(r, field: str, value: Optional[str], source_ids: Sequence[str]) -> None:
    """An optional ``field`` (``source``, ``base_source``) that names an entry of ``sources``.

    Raises:
        SpecError: ``value`` is given and is no id of ``source_ids`` (the message lists them).
    """
    if value is not None and value not in source_ids:
        raise r.error(field, "the id of an entry of 'sources' (" + ", ".join(source_ids) + ")", got=value)


def require_source(r, value: Optional[str], source_ids: Sequence[str], what: str) -> str:
    """A required ``source`` that documents ``what`` (``the runtime``, ``the path``).

    Raises:
        SpecError: ``value`` is missing or no id of ``source_ids``.
    """
    if value is None or value not in source_ids:
        raise r.error("source", f"the id of the entry of 'sources' that documents {what} ("
                      + (", ".join(source_ids) or "no sources yet") + ")", got=value)
    return value
