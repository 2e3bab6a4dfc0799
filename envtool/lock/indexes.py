"""Package indexes a spec names, and the mirrors of them a machine has.

A spec's pip pin may name the public index that serves it (``index:`` of a pin; PyTorch's CPU
builds such as ``torch==2.13.0+cpu`` are on ``https://download.pytorch.org/whl/cpu``, not on PyPI:
https://pytorch.org/get-started/locally/ gives ``pip3 install torch --index-url
https://download.pytorch.org/whl/cpu`` for Linux, pip, CPU). A lock records the public URL of
every file; a machine that cannot reach a public index (an air-gapped login node, our test
machines) maps it to a **mirror** holding the same files under another root, as pixi's
``mirrors`` do for conda channels (https://pixi.sh/latest/reference/pixi_configuration/#mirror-configuration):

    ENVTOOL_INDEX_MIRRORS="https://download.pytorch.org/whl/cpu=http://mirror.example/whl/cpu"

(setting ``index_mirrors`` in ``config.yaml``: ``PUBLIC=MIRROR`` words). envtool resolves and
installs through the mirror and records the public URL: a file at ``MIRROR/rest`` is recorded as
``PUBLIC/rest`` (the mirror is declared to hold the public index's tree; envtool does not check
that the public file exists, it cannot reach it). A mirror may be an index served over https, over
http (the mirror's host is then trusted for plain HTTP: pip's ``--trusted-host``, which uv takes too),
a ``file://`` index, or a ``file://`` folder of archives (a wheelhouse, given as ``--find-links``).
A mirror URL carries no user name or password (a URL would show them in the process list and in
envtool's output): give the mirror's credentials to pip and uv through ``~/.netrc`` or a keyring.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

#: The environment variable of the ``index_mirrors`` setting.
MIRRORS_VARIABLE = "ENVTOOL_INDEX_MIRRORS"
#: Seconds a reachability probe of one index waits (a DNS failure answers at once; a firewall
#: that drops packets would otherwise hold ``create`` for pip's 15 s x 5 retries).
PROBE_TIMEOUT = 5.0


class MirrorError(ValueError):
    """A malformed ``index_mirrors`` value (the message names the entry and what was expected)."""


def parse_mirrors(text: str) -> Dict[str, str]:
    """``PUBLIC=MIRROR`` words (space or comma separated) as ``{public root: mirror root}``.

    Args:
        text: the setting's value, e.g. ``"https://download.pytorch.org/whl/cpu=file:///srv/pytorch-cpu"``.
    Returns:
        roots without a trailing slash.
    Raises:
        MirrorError: an entry without ``=``, a public root that is not ``https://``, or a mirror
            that is not an ``http(s)://`` or ``file://`` URL.
    """
    out: Dict[str, str] = {}
    if len(text) > 65536:
        raise MirrorError(f"{len(text)} characters: expected at most 65536")
    for word in text.replace(",", " ").split():
        public, sep, mirror = word.partition("=")
        if not sep or not public or not mirror:
            raise MirrorError(f"{word[:200]!r}: expected PUBLIC=MIRROR, e.g. "
                              "https://download.pytorch.org/whl/cpu=https://mirror.example/whl/cpu")
        try:
            pub, mir = urlsplit(public), urlsplit(mirror)
            pub.port, mir.port  # noqa: B018 - a bad port raises here, not later
        except ValueError as exc:
            raise MirrorError(f"{word[:200]!r}: not a URL ({exc})") from None
        if pub.scheme != "https" or not pub.hostname or pub.query or pub.fragment:
            raise MirrorError(f"{word[:200]!r}: the public index must be an https:// URL without query or "
                              f"fragment, got {public[:200]!r}")
        if mir.scheme not in ("http", "https", "file") or (mir.scheme != "file" and not mir.hostname) \
                or mir.query or mir.fragment or (mir.scheme == "file" and len(mir.path.rstrip("/")) < 2):
            raise MirrorError(f"{word[:200]!r}: the mirror must be an http(s):// URL or a file:// folder (not /), "
                              f"without query or fragment, got {mirror[:200]!r}")
        if pub.username or pub.password or mir.username or mir.password:
            raise MirrorError(f"{pub.scheme}://{pub.hostname}/…={mir.scheme}://{mir.hostname or ''}/…: no user "
                              "name or password in a mirror URL (it would show in the process list and in "
                              "envtool's output); give them to pip and uv through ~/.netrc or a keyring")
        out[_canonical(public)] = _canonical(mirror)
    return out


def _canonical(url: str) -> str:
    """``url`` with its scheme and host in lower case and no trailing slash (hosts compare so)."""
    parts = urlsplit(url)
    netloc = parts.netloc.lower()
    return f"{parts.scheme.lower()}://{netloc}{parts.path}".rstrip("/")


def mirrors(environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This machine's mirrors (``$ENVTOOL_INDEX_MIRRORS``); ``{}`` when unset.

    Raises:
        MirrorError: see :func:`parse_mirrors` (``envtool`` refuses the variable at start, exit 2).
    """
    env = os.environ if environ is None else environ
    return parse_mirrors(env.get(MIRRORS_VARIABLE, ""))


def _under(url: str, root: str) -> Optional[str]:
    """The rest of ``url`` below ``root`` (``""`` for the root itself), or None."""
    if url == root:
        return ""
    return url[len(root):] if url.startswith(root + "/") else None


def through_mirror(index: str, table: Optional[Dict[str, str]] = None) -> str:
    """The URL this machine uses for the public ``index`` (its mirror, or itself)."""
    table = mirrors() if table is None else table
    key = _canonical(index)
    for public, mirror in table.items():
        rest = _under(key, public)
        if rest is not None:
            return mirror + rest
    return index.rstrip("/")


def to_public(url: str, table: Optional[Dict[str, str]] = None) -> Optional[str]:
    """The public URL of an archive this machine fetched from a mirror, or None when ``url`` is
    under no mirror. ``file://`` URLs are compared after resolving symbolic links of the mirror
    root (pip reports the real path of a ``file://`` index it was given)."""
    table = mirrors() if table is None else table
    try:
        url = _canonical(url)
    except ValueError:
        return None
    for public, mirror in table.items():
        roots = [mirror]
        if mirror.startswith("file://"):
            real = "file://" + os.path.realpath(mirror[len("file://"):])
            roots.append(real)
        for root in roots:
            rest = _under(url, root)
            if rest:
                return public + rest
    return None


def unreachable(index: str, project: str = "", timeout: float = PROBE_TIMEOUT) -> Optional[str]:
    """Why ``index`` (a URL as this machine uses it) cannot be reached, or None when it answers.

    An ``http(s)`` index is asked for ``INDEX/PROJECT/`` (or ``INDEX/``) with one ``GET``; any answer
    (an HTTP error status, a TLS certificate this process does not trust — pip and uv have their
    own trust settings —, a malformed reply) means something is there: only a failed name lookup, a
    refused or timed-out connection count as unreachable. A ``file://`` index is reachable when its
    folder exists.

    Args:
        index: the index URL.
        project: a project to ask for (its page proves the index serves it).
        timeout: seconds for the one request.
    Returns:
        None, or a short reason (``"DNS: Name or service not known"``).
    """
    parts = urlsplit(index)
    if parts.scheme == "file":
        return None if os.path.isdir(parts.path) else f"{parts.path} is not a folder"
    import http.client
    import socket
    import ssl
    from urllib.error import HTTPError, URLError
    from urllib.request import Request, urlopen

    url = index.rstrip("/") + "/" + (project + "/" if project else "")
    try:
        with urlopen(Request(url), timeout=timeout) as resp:  # noqa: S310 - http(s) checked above
            resp.read(1)
            return None
    except HTTPError:
        return None
    except URLError as exc:
        reason = exc.reason
        if isinstance(reason, (ssl.SSLError, ssl.CertificateError)):
            return None
        if isinstance(reason, (socket.gaierror, ConnectionError, socket.timeout, TimeoutError, OSError)):
            return str(getattr(reason, "strerror", None) or reason)
        return None
    except (socket.timeout, TimeoutError, ConnectionError) as exc:
        return str(exc) or type(exc).__name__
    except (http.client.HTTPException, ssl.SSLError, ValueError):
        return None
    except OSError as exc:
        return str(exc.strerror or exc)


def spec_indexes(pins: Sequence[object]) -> Dict[str, str]:
    """``{normalized project name: public index}`` of the pip pins that name an index.

    Args:
        pins: :class:`envtool.spec.model.Pin` objects of ``packages.pip``.
    """
    from envtool.lock.model import normalize

    out: Dict[str, str] = {}
    for pin in pins:
        index = getattr(pin, "index", None)
        name = getattr(pin, "name", None)
        if index and name:
            out[normalize(name, "pip")] = index.rstrip("/")
    return out


def extra_index_args(indexes: Dict[str, str], table: Optional[Dict[str, str]] = None,
                     probe: bool = True) -> Tuple[List[str], List[str]]:
    """pip/uv options that add the indexes of ``indexes`` (through their mirrors), and notes.

    An index this machine cannot reach is left out (uv stops at an unreachable index even when
    another source has the package; pip retries it for minutes): the package must then come from
    the machine's own pip configuration, and a note says so.

    Args:
        indexes: ``{project: public index}`` (:func:`spec_indexes`, or a lock's record).
        table: mirrors (default :func:`mirrors`).
        probe: check reachability (False: add every index).
    Returns:
        ``(["--extra-index-url", URL, …], notes)``.
    """
    table = mirrors() if table is None else table
    args: List[str] = []
    notes: List[str] = []
    by_index: Dict[str, List[str]] = {}
    for project, index in sorted(indexes.items()):
        by_index.setdefault(index, []).append(project)
    for index, projects in by_index.items():
        used = through_mirror(index, table)
        why = unreachable(used, projects[0]) if probe else None
        if why is not None:
            notes.append(f"{index} (the index of {', '.join(projects)})"
                         + (f", mirrored at {used}," if used != index else "")
                         + f" cannot be reached from here ({why}); {', '.join(projects)} must come from this "
                         f"machine's pip configuration, or configure a mirror: envtool config set index_mirrors "
                         f"'{index}=MIRROR_URL'")
            continue
        args += _source_args(used)
    return args, notes


def _source_args(url: str) -> List[str]:
    """Installer options that add ``url`` as a source: ``--find-links`` for a ``file://`` folder that
    holds archives at its top (a wheelhouse), else ``--extra-index-url``; with ``--trusted-host
    HOST`` for plain ``http`` (pip ignores an http index on a host it does not trust; uv takes the same
    option as an alias of ``--allow-insecure-host``)."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        try:
            flat = any(e.is_file() and e.name.endswith((".whl", ".tar.gz", ".zip")) for e in os.scandir(parts.path))
        except OSError:
            flat = False
        return ["--find-links", url] if flat else ["--extra-index-url", url]
    out = ["--extra-index-url", url]
    if parts.scheme == "http" and parts.hostname:
        out += ["--trusted-host", parts.hostname]
    return out


def hint_for_missing(output: str, indexes: Dict[str, str], table: Optional[Dict[str, str]] = None) -> str:
    """For installer output that says a locked version exists nowhere (uv: ``no version of NAME``;
    pip: ``No matching distribution found for NAME``): a line naming the index that has it, or ``""``.

    Args:
        output: the installer's output.
        indexes: ``{project: public index}``.
        table: mirrors (default :func:`mirrors`).
    """
    import re

    from envtool.lock.model import normalize

    table = mirrors() if table is None else table
    names = re.findall(r"(?:no version of|No matching distribution found for|Could not find a version that "
                       r"satisfies the requirement)\s+([A-Za-z0-9_.\-]+)", output)
    names += re.findall(r"Because ([A-Za-z0-9_.\-]+?)(?:==\S+)? was not found in the package registry", output)
    lines = []
    for raw in dict.fromkeys(names):
        name = normalize(raw, "pip")
        index = indexes.get(name)
        if index:
            used = through_mirror(index, table)
            where = f" (through its mirror {used})" if used != index else ""
            lines.append(f"{name} is on {index}{where}, the index its spec names; this machine could not get it "
                         f"there: check that the index is reachable, or configure a mirror holding the same files: "
                         f"envtool config set index_mirrors '{index}=MIRROR_URL'")
        else:
            lines.append(f"{name}: this machine's pip configuration (its index, mirrors, find-links) does not have the "
                         "locked version")
    return "\n".join(lines)
