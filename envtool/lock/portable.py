"""Locks that travel: no URL in a lock points into the machine that wrote it.

How envtool locks pip packages (chosen for issue 10 and documented in the README):

* **Installing** a pip entry never uses its URL: it is ``name==version --hash=sha256:…`` handed to
  pip with ``--require-hashes``, so the installing machine's own pip configuration (index,
  mirror, ``find-links`` wheelhouse), plus the package indexes the lock records
  (:mod:`envtool.lock.indexes`), finds the archive and pip refuses any archive whose SHA-256
  differs. A lock written against a local mirror installs on a machine that only has PyPI, and
  the other way round.
* **Recording**: pip reports the URL it downloaded from. A file fetched from a configured mirror
  is recorded under the mirror's public root; any other URL on this machine (``file://``, a bare
  path, or a loopback host — a local wheelhouse) is replaced by the URL of the same file (same
  SHA-256) on its package's index or the public index (``$ENVTOOL_PUBLIC_INDEX``, default
  ``https://pypi.org/simple``), read in the JSON (PEP 691) or HTML (PEP 503) simple API. A lock of
  a spec refuses a file no public index has (:class:`NotPublic`); a snapshot of an environment (a
  locally built Horovod wheel) records it by its file name, which names the artifact without
  pointing anywhere.

Conda entries keep their channel URLs: the channel is part of the spec, and a conda install from
a lock looks each record up in that channel.
"""
from __future__ import annotations

import http.client
import json
import os
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from dataclasses import replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import unquote, urlsplit

from envtool.lock.model import LockedPackage

#: The public index whose URLs a lock records (PEP 691 JSON simple API).
DEFAULT_PUBLIC_INDEX = "https://pypi.org/simple"
#: Seconds allowed for one index request.
LOOKUP_TIMEOUT = 20.0
_LOOPBACK = ("localhost", "127.0.0.1", "::1", "")


def public_index() -> str:
    """``$ENVTOOL_PUBLIC_INDEX`` or :data:`DEFAULT_PUBLIC_INDEX`, without a trailing slash."""
    return (os.environ.get("ENVTOOL_PUBLIC_INDEX") or DEFAULT_PUBLIC_INDEX).rstrip("/")


def is_local(url: str) -> bool:
    """True for a URL that only makes sense on this machine: ``file:``, a path, or a loopback host.

    Args:
        url: an archive URL as pip reports it (or a bare file name, which is not local).
    """
    if "://" not in url:
        return url.startswith("/")
    parts = urlsplit(url)
    if parts.scheme == "file":
        return True
    host = (parts.hostname or "").lower()
    return host in _LOOPBACK or host.startswith("127.")


def file_name(url: str) -> str:
    """The archive's file name (last path component, percent-decoded) of ``url``."""
    return unquote(urlsplit(url).path.rsplit("/", 1)[-1]) if "://" in url else url.rsplit("/", 1)[-1]


class _Anchors(HTMLParser):
    """The ``href`` of every ``<a>`` of a PEP 503 project page (the standard library's HTML parser)."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: List[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _index_files(project: str, index: str) -> Dict[str, str]:
    """SHA-256 → absolute URL of every file of ``project`` on ``index``, ``{}`` on any failure.

    The project page is asked for in the JSON form (PEP 691) and read in whichever form the index
    answers: JSON (``files[].hashes.sha256``), or HTML (PEP 503: ``<a href="…#sha256=…">``, which
    PyTorch's ``download.pytorch.org/whl/…`` serves). Relative URLs are joined with the page's.
    """
    from urllib.parse import urldefrag, urljoin
    from urllib.request import Request, urlopen

    page = f"{index}/{project}/"
    req = Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    try:
        with urlopen(req, timeout=LOOKUP_TIMEOUT) as resp:  # noqa: S310 - https index from config
            kind = resp.headers.get_content_type()
            body = resp.read(64 << 20).decode("utf-8", "replace")
            page = resp.geturl() or page
    except (OSError, ValueError, http.client.HTTPException):
        return {}
    out: Dict[str, str] = {}
    if "json" in kind:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return {}
        for f in data.get("files", []) if isinstance(data, dict) else []:
            if not isinstance(f, dict):
                continue
            digest = (f.get("hashes") or {}).get("sha256") if isinstance(f.get("hashes"), dict) else None
            if isinstance(digest, str) and isinstance(f.get("url"), str) and f["url"]:
                out[digest.lower()] = urljoin(page, f["url"])
        return out
    parser = _Anchors()
    try:
        parser.feed(body)
    except (ValueError, AssertionError):
        return out
    for href in parser.hrefs:
        url, frag = urldefrag(urljoin(page, href))
        if frag.startswith("sha256="):
            out[frag[len("sha256="):].lower()] = url
    return out


class NotPublic(Exception):
    """Archives a lock cannot record by a public URL (``strict`` :func:`make_portable`).

    Attributes:
        entries: ``(name, version, local URL, indexes looked on)`` per archive.
    """

    def __init__(self, entries: List[Tuple[str, str, str, Tuple[str, ...]]]):
        self.entries = entries
        super().__init__("; ".join(f"{n} {v}: {u}" for n, v, u, _ in entries))


def make_portable(packages: Sequence[LockedPackage], progress: Optional[Callable[[str], None]] = None,
                  index: Optional[str] = None, indexes: Optional[Dict[str, str]] = None,
                  strict: bool = False, mirror_table: Optional[Dict[str, str]] = None
                  ) -> Tuple[List[LockedPackage], List[str]]:
    """Replace every machine-local pip URL by its public URL (or, unless ``strict``, its bare file name).

    In order: an archive fetched from a configured mirror (:mod:`envtool.lock.indexes`) is recorded
    at the same place under the mirror's public root; any other local archive (a ``find-links``
    folder, a ``file://`` index) is looked up by SHA-256 on its project's own index (``indexes``)
    and on the public index.

    Args:
        packages: lock entries (conda entries and non-local URLs pass unchanged).
        progress: called with one line before an index is asked.
        index: the public index (default :func:`public_index`).
        indexes: ``{project: public index}`` the spec names (:func:`envtool.lock.indexes.spec_indexes`).
        strict: raise :class:`NotPublic` for archives found on no public index (a lock of a spec)
            instead of recording them by file name (a snapshot of an environment).
        mirror_table: mirrors (default: this machine's, :func:`envtool.lock.indexes.mirrors`).
    Returns:
        ``(entries in the same order, notes)``; a note names each entry recorded by file name.
    Raises:
        NotPublic: ``strict`` and some archive has no public URL.
    """
    from envtool.lock.indexes import mirrors, to_public

    index = index or public_index()
    indexes = indexes or {}
    table = mirrors() if mirror_table is None else mirror_table
    mapped: Dict[int, str] = {}
    for i, p in enumerate(packages):
        if p.manager == "pip" and p.url and table:
            public = to_public(p.url, table)
            if public is not None:
                mapped[i] = public
    local = [(i, p) for i, p in enumerate(packages)
             if i not in mapped and p.manager == "pip" and p.url and is_local(p.url)]
    if not local and not mapped:
        return list(packages), []
    wanted = sorted({(p.key[1], where) for _, p in local if p.sha256
                     for where in dict.fromkeys([indexes.get(p.key[1], index), index])})
    if progress and wanted:
        progress(f"looking up the public URLs of {len({n for n, _ in wanted})} locally found archives on "
                 + ", ".join(sorted({w for _, w in wanted})))
    from envtool.lock.indexes import through_mirror

    def look(pair: Tuple[str, str]) -> Dict[str, str]:
        """The public index's files, asked of its mirror when this machine has one (then mapped back:
        a file the mirror serves outside its root has no public URL here)."""
        name, where = pair
        used = through_mirror(where, table)
        files = _index_files(name, used)
        if used == where.rstrip("/"):
            return files
        return {digest: public for digest, url in files.items() if (public := to_public(url, table))}

    with ThreadPoolExecutor(max_workers=8) as pool:
        found = dict(zip(wanted, pool.map(look, wanted)))
    out, notes, missing = [], [], []
    for i, p in enumerate(packages):
        if i in mapped:
            p = replace(p, url=mapped[i])
        elif p.manager == "pip" and p.url and is_local(p.url):
            looked = tuple(dict.fromkeys([indexes.get(p.key[1], index), index]))
            url = next((found.get((p.key[1], w), {}).get(p.sha256) for w in looked
                        if p.sha256 and found.get((p.key[1], w), {}).get(p.sha256)), None)
            if url is None:
                if strict:
                    missing.append((p.key[1], p.version, p.url, looked))
                    out.append(p)
                    continue
                url = file_name(p.url)
                notes.append(f"pip {p.key[1]} {p.version}: {url} is not on {' or '.join(looked)}; recorded by file "
                             "name (installs through the installing machine's pip configuration, hash checked)")
            p = replace(p, url=url)
        out.append(p)
    if missing:
        raise NotPublic(missing)
    return out, notes
