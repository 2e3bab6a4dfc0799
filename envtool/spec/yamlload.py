"""YAML loading that remembers where each mapping key sits (for errors that name a line).

PyYAML does the parsing (its C loader, libyaml, when installed; the pure-Python one otherwise);
this module only records ``key -> line`` on every mapping it builds, and bounds what a hostile
file can cost before anything is built from it:

* size: at most :data:`MAX_BYTES` bytes, read as UTF-8 (anything else is refused, naming the file);
* nesting: at most :data:`MAX_DEPTH` levels (5,000 ``[`` used to raise RecursionError);
* aliases: the document with every alias expanded may hold at most :data:`MAX_NODES` nodes (a
  1.2 KB "billion laughs" spec used to take 2.5 GB). The check walks PyYAML's composed node graph
  iteratively, counting each shared node once per reference, before any Python object is made.

Each file is parsed once per process: :func:`load_yaml` keeps what it parsed, keyed by the
file's resolved path, size and modification time, and hands every caller its own copy (callers
merge and edit what they get). ``envtool specs`` used to parse 80 files for 27 specs (a parent
once per child).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import yaml

from envtool.core.errors import SpecError
from envtool.core.inputs import open_input

#: Largest spec, site or other YAML input file read (bytes). Bundled specs are under 10 KB.
MAX_BYTES = 1 << 20
#: Deepest nesting of sequences and mappings.
MAX_DEPTH = 50
#: Most nodes of a document once its aliases are expanded.
MAX_NODES = 100_000

_BaseLoader = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader


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


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """(C)SafeLoader that builds :class:`LineDict` mappings and refuses duplicate keys."""


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


#: What :func:`load_yaml` parsed in this process: (resolved path, size, mtime_ns) -> the mapping.
_PARSED: Dict[Tuple[str, int, int], "LineDict"] = {}


def _copy(value):
    """A copy of a parsed tree (:class:`LineDict`, ``list``; scalars are immutable and shared)."""
    if isinstance(value, LineDict):
        out = LineDict()
        for k, v in value.items():
            out[k] = _copy(v)
        out.lines = dict(value.lines)
        out.line = value.line
        return out
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def load_yaml(path: Path) -> LineDict:
    """Read a YAML file whose top level is a mapping (parsed once per process; see the module docstring).

    Args:
        path: the file.
    Returns:
        the mapping, as nested :class:`LineDict` / ``list`` / scalars: the caller's own copy.
    Raises:
        SpecError: the file cannot be read, is not YAML, or its top level is not a mapping
            (the message names the file and line).
    """
    try:
        with open_input(path) as fh:  # a FIFO or a device is refused (exit 2), never read
            st = os.fstat(fh.fileno())
            key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
            if key in _PARSED:
                return _copy(_PARSED[key])
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise SpecError(path, "(file)", "a readable YAML file", hint=exc.strerror or str(exc)) from None
    if len(data) > MAX_BYTES:
        raise SpecError(path, "(file)", f"a YAML file of at most {MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(path, "(file)", "UTF-8 text", line=line,
                        hint=f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8") from None
    parsed = load_yaml_text(text, path)
    _PARSED[key] = _copy(parsed)
    return parsed


def _check_bounds(root: yaml.Node, path) -> None:
    """Refuse a composed document nested deeper than :data:`MAX_DEPTH` or bigger than
    :data:`MAX_NODES` nodes once aliases are expanded (iterative: no recursion, each node visited once).

    Raises:
        SpecError: naming the file and the line where the limit was crossed.
    """
    size: Dict[int, int] = {}
    stack = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if id(node) in size:
            continue
        if depth > MAX_DEPTH:
            raise SpecError(path, "(yaml)", f"at most {MAX_DEPTH} levels of nesting", line=node.start_mark.line + 1)
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            size[id(node)] = 1
            continue
        if done:
            total = 1 + sum(size[id(c)] for c in children)
            if total > MAX_NODES:
                raise SpecError(path, "(yaml)", f"at most {MAX_NODES} values once aliases are expanded",
                                line=node.start_mark.line + 1, hint="anchors and aliases that multiply")
            size[id(node)] = total
            continue
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in size)


def load_yaml_text(text: str, path) -> LineDict:
    """Parse YAML ``text`` (see :func:`load_yaml`); ``path`` is used in messages only."""
    if len(text) > MAX_BYTES:
        raise SpecError(path, "(file)", f"a YAML document of at most {MAX_BYTES} characters")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            data = None
        else:
            _check_bounds(node, path)
            data = loader.construct_document(node)
    except RecursionError:  # the composer recursed before the bound could be checked
        raise SpecError(path, "(yaml)", f"at most {MAX_DEPTH} levels of nesting") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(path, "(yaml)", "valid YAML", line=line, hint=str(problem)[:200]) from None
    finally:
        loader.dispose()
    if not isinstance(data, LineDict):
        raise SpecError(path, "(top level)", "a mapping of spec fields", got=type(data).__name__, line=1)
    return data
