"""YAML loading that remembers where each mapping key sits (for errors that name a line).

PyYAML does the parsing; this module only records ``key -> line`` on every mapping it builds.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

import yaml

from envtool.core.errors import SpecError


class LineDict(dict):
    """A ``dict`` that also knows the 1-based line of each key (``lines``) and of itself."""

    lines: Dict[Any, int]
    line: Optional[int]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lines = {}
        self.line = None

    def line_of(self, key) -> Optional[int]:
        """Line of ``key`` in its file, or of this mapping when the key is absent."""
        return self.lines.get(key, self.line)


class _Loader(yaml.SafeLoader):
    """SafeLoader that builds :class:`LineDict` mappings and refuses duplicate keys."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> LineDict:
    loader.flatten_mapping(node)
    out = LineDict()
    out.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = key_node.start_mark.line + 1
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: Path) -> LineDict:
    """Read a YAML file whose top level is a mapping.

    Args:
        path: the file.
    Returns:
        the mapping, as nested :class:`LineDict` / ``list`` / scalars.
    Raises:
        SpecError: the file cannot be read, is not YAML, or its top level is not a mapping
            (the message names the file and line).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(path, "(file)", "a readable YAML file", hint=exc.strerror or str(exc)) from None
    return load_yaml_text(text, path)


def load_yaml_text(text: str, path) -> LineDict:
    """Parse YAML ``text`` (see :func:`load_yaml`); ``path`` is used in messages only."""
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(path, "(yaml)", "valid YAML", line=line, hint=str(problem)) from None
    if not isinstance(data, LineDict):
        raise SpecError(path, "(top level)", "a mapping of spec fields", got=type(data).__name__, line=1)
    return data
