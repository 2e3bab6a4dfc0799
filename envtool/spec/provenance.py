"""Where a pin can be read: parse a spec's ``sources`` entries and check the marks that cite them.

A source entry (``sources: {id: REF}`` in a spec or site file) is one of:

- ``owner/name@ref:path`` — a file of a public GitHub repository at a tag or commit, optionally
  with ``#L12`` or ``#L12-L20`` (e.g. ``open-ce/open-ce@open-ce-v1.7.0:README.md#L27``);
- ``https://…`` — a vendor or site page;
- ``docs/FILE#L1-L2`` — a record in this repository of what was measured on our own machines
  (``docs/gpu-proof.md``): first-hand, so primary;
- ``docs/reference/…`` — the project's own summaries of the release matrix and of Horovod's
  build (``docs/reference/stacks.md``): a *secondary* source.

Every form is one a user can open: a public repository file, a public page, or a file shipped in
this repository.

Anything may follow the reference after whitespace, in parentheses (``(OLCF docs, 1.6.1 table)``).
A ``V`` pin ("verified in a primary source", :data:`envtool.spec.model.MARKS`) must cite a
primary reference (repository file, URL or project record); ``V2`` and ``I`` may cite anything.
Nothing here does I/O.
"""
from __future__ import annotations

import dataclasses
import re
import urllib.parse
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

#: Kinds a reference can be; these are primary, ``secondary`` is not.
PRIMARY_KINDS = ("repo", "url", "project")

_DESC = r"(?:\s+\((?P<desc>.*)\))?\s*$"
_LINES = r"(?:#?L?(?P<l1>\d+)(?:-L?(?P<l2>\d+))?)?"
_REPO_RE = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)@(?P<ref>[^\s:@]+):(?P<path>[^\s#]+)"
                      r"(?:#L(?P<l1>\d+)(?:-L?(?P<l2>\d+))?)?" + _DESC)
_URL_RE = re.compile(r"^(?P<url>https?://\S+)" + _DESC)
_SECONDARY_RE = re.compile(r"^(?P<path>docs/reference/\S+)" + _DESC)
_PROJECT_RE = re.compile(r"^(?P<path>docs/[^\s#]+)(?:#L(?P<l1>\d+)(?:-L?(?P<l2>\d+))?)?" + _DESC)


@dataclass(frozen=True)
class SourceRef:
    """A parsed source entry.

    Attributes:
        text: the entry as written.
        kind: ``repo``, ``url``, ``project`` or ``secondary``.
        repo: ``owner/name`` (kind ``repo``), else None.
        ref: the tag or commit (kind ``repo``), else None.
        path: file path in the public repository, or the path in this repository
            (``docs/…``); None for URLs.
        url: the address (kind ``url``) or a browsable GitHub address (kind ``repo``), else None.
        lines: ``(first, last)`` line numbers (1-based, inclusive), or None.
        description: the parenthesised text after the reference, or None.
    """

    text: str
    kind: str
    repo: Optional[str] = None
    ref: Optional[str] = None
    path: Optional[str] = None
    url: Optional[str] = None
    lines: Optional[Tuple[int, int]] = None
    description: Optional[str] = None

    @property
    def primary(self) -> bool:
        """True for a repository file, a URL or a project record."""
        return self.kind in PRIMARY_KINDS

    def where(self) -> str:
        """Where to read it, one line: a GitHub address with line anchor, a URL, or ``docs/F line N``."""
        if self.kind == "repo":
            anchor = ""
            if self.lines:
                anchor = f"#L{self.lines[0]}" + (f"-L{self.lines[1]}" if self.lines[1] != self.lines[0] else "")
            return f"https://github.com/{self.repo}/blob/{self.ref}/{self.path}{anchor}"
        if self.kind in ("project", "secondary"):
            where = str(self.path)
            if self.lines:
                where += f" line {self.lines[0]}" + (f"-{self.lines[1]}" if self.lines[1] != self.lines[0] else "")
            return where
        if self.kind == "url":
            return self.url or self.text
        return str(self.path)


def _lines(m: "re.Match[str]") -> Optional[Tuple[int, int]]:
    if not m.group("l1"):
        return None
    first = int(m.group("l1"))
    last = int(m.group("l2")) if m.group("l2") else first
    return (first, last)


def parse(text: str) -> Optional[SourceRef]:
    """Parse one source entry.

    Args:
        text: the entry (``owner/name@tag:path#L1``, ``https://…``, ``docs/gpu-proof.md#L3``,
            ``docs/reference/stacks.md (…)``).
    Returns:
        the :class:`SourceRef`, or None when the entry is none of these forms (free text).
    """
    text = text.strip()
    m = _REPO_RE.match(text)
    if m:
        sref = SourceRef(text=text, kind="repo", repo=m.group("repo"), ref=m.group("ref"), path=m.group("path"),
                         lines=_lines(m), description=m.group("desc"))
        return dataclasses.replace(sref, url=sref.where())
    m = _URL_RE.match(text)
    if m:
        return SourceRef(text=text, kind="url", url=m.group("url"), description=m.group("desc"))
    m = _SECONDARY_RE.match(text)
    if m:
        return SourceRef(text=text, kind="secondary", path=m.group("path"), description=m.group("desc"))
    m = _PROJECT_RE.match(text)
    if m:
        return SourceRef(text=text, kind="project", path=m.group("path"), lines=_lines(m), description=m.group("desc"))
    return None


def states(text: str, version: str, python: bool = False) -> bool:
    """Whether ``text`` (a cited line) states ``version`` as a whole version.

    ``2.4.1`` is not stated by ``2.4.10``, nor ``0.18.2+1`` by ``__version__ = '0.18.2'``; URL
    escapes are read (a badge's ``3.6%20%7C%203.7`` states ``3.7``). With ``python``, an ``X.Y``
    is also stated by Miniconda's installer name ``pyXY_…`` (``CONDAVER='py38_4.12.0'``:
    argonne-lcf/conda_install_scripts@899e23cf3cc7:alcf_polaris/install_datascience_conda_fromsource.sh#L197).

    Args:
        text: the cited text.
        version: the version a pin names (``2.14.3``, ``3.8``).
        python: the pin is a Python version.
    """
    text = urllib.parse.unquote(text)
    if re.search(r"(?<![\d.])" + re.escape(version) + r"(?![\d+])", text):
        return True
    parts = version.split(".")
    return python and len(parts) >= 2 and re.search(r"\bpy" + parts[0] + parts[1] + r"(?!\d)", text) is not None


def problems(name: str, sources: Iterable[Tuple[str, str]], pins: Iterable[Tuple[str, object]]) -> List[str]:
    """What is wrong with a spec's (or site file's) provenance.

    Args:
        name: the spec or site name (for the messages).
        sources: ``(id, entry)`` pairs.
        pins: ``(field, pin)`` pairs; a pin needs ``mark``, ``source`` and ``value`` attributes
            (:class:`envtool.spec.model.Pin`, or a site's stack mapping).
    Returns:
        one message per problem (empty when all is well): an entry that is neither a repository
        file, a URL, a file of this repository nor a secondary reference; a ``V`` pin that cites
        no source or a secondary one.
    """
    out: List[str] = []
    parsed: Dict[str, Optional[SourceRef]] = {}
    for sid, text in sources:
        ref = parse(text)
        parsed[sid] = ref
        if ref is None:
            out.append(f"{name}: source {sid!r} ({text!r}) is not owner/repo@tag:path, a URL, "
                       "docs/… or docs/reference/…")
    for field, pin in pins:
        mark = getattr(pin, "mark", None)
        if mark != "V":
            continue
        cited = getattr(pin, "source", None)
        value = getattr(pin, "value", None) or ""
        ref = parsed.get(cited or "")
        if cited is None or cited not in parsed:
            out.append(f"{name}: {field} ({value}) is marked V but cites no source of the file")
        elif ref is not None and not ref.primary:
            out.append(f"{name}: {field} ({value}) is marked V but cites {cited!r}, a secondary source "
                       f"({ref.text}); cite where it can be read or mark it V2")
    return out
