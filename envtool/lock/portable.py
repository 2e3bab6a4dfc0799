"""Locks that travel: no URL in a lock points into the machine that wrote it.

How envtool locks pip packages (chosen for issue 10 and documented in the README):

* **Installing** a pip entry never uses its URL: it is ``name==version --hash=sha256:…`` handed to
  pip with ``--require-hashes``, so the installing machine's own pip configuration (index,
  mirror, ``find-links`` wheelhouse) finds the archive and pip refuses any archive whose SHA-256
  differs. A lock written against a local mirror installs on a machine that only has PyPI, and
  the other way round.
* **Recording**: pip reports the URL it downloaded from. A URL on this machine (``file://``, a
  bare path, or a loopback host — a local mirror or wheelhouse) is replaced by the URL of the
  same file (same SHA-256) on the public index, looked up with the PEP 691 JSON simple API
  (``$ENVTOOL_PUBLIC_INDEX``, default ``https://pypi.org/simple``). A file the public index does
  not have (a wheel from a private wheelhouse, a locally built Horovod wheel) is recorded by its
  file name alone, which names the artifact without pointing anywhere.

Conda entries keep their channel URLs: the channel is part of the spec, and a conda install from
a lock looks each record up in that channel.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
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


def _index_files(project: str, index: str) -> Dict[str, str]:
    """SHA-256 → URL of every file of ``project`` on ``index`` (PEP 691 JSON); ``{}`` on any failure."""
    from urllib.request import Request, urlopen

    req = Request(f"{index}/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urlopen(req, timeout=LOOKUP_TIMEOUT) as resp:  # noqa: S310 - https index from config
            data = json.loads(resp.read(64 << 20).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    out: Dict[str, str] = {}
    for f in data.get("files", []) if isinstance(data, dict) else []:
        digest = ((f or {}).get("hashes") or {}).get("sha256")
        if digest and f.get("url"):
            out[digest] = f["url"]
    return out


def make_portable(packages: Sequence[LockedPackage], progress: Optional[Callable[[str], None]] = None,
                  index: Optional[str] = None) -> Tuple[List[LockedPackage], List[str]]:
    """Replace every machine-local pip URL by its public URL or its bare file name.

    Args:
        packages: lock entries (conda entries and non-local URLs pass unchanged).
        progress: called with one line before the index is asked.
        index: the public index (default :func:`public_index`).
    Returns:
        ``(entries in the same order, notes)``; a note names each entry recorded by file name.
    """
    index = index or public_index()
    local = [p for p in packages if p.manager == "pip" and p.url and is_local(p.url)]
    if not local:
        return list(packages), []
    projects = sorted({p.key[1] for p in local if p.sha256})
    if progress and projects:
        progress(f"looking up the public URLs of {len(projects)} locally installed archives on {index}")
    with ThreadPoolExecutor(max_workers=8) as pool:
        found = dict(zip(projects, pool.map(lambda name: _index_files(name, index), projects)))
    out, notes = [], []
    for p in packages:
        if p in local:
            url = found.get(p.key[1], {}).get(p.sha256) if p.sha256 else None
            if url is None:
                url = file_name(p.url)
                notes.append(f"pip {p.key[1]} {p.version}: {url} is not on {index}; recorded by file name "
                             "(installs through the installing machine's pip configuration, hash checked)")
            p = replace(p, url=url)
        out.append(p)
    return out, notes
