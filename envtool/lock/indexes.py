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
``PUBLIC/rest``. A mirror may be an index served over http(s), a ``file://`` index, or a
``file://`` folder of archives (a wheelhouse).
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
    for word in text.replace(",", " ").split():
        public, sep, mirror = word.partition("=")
        if not sep or not public or not mirror:
            raise MirrorError(f"{word!r}: expected PUBLIC=MIRROR, e.g. "
                              "https://download.pytorch.org/whl/cpu=http://mirror.example/whl/cpu")
        if urlsplit(public).scheme != "https" or not urlsplit(public).hostname:
            raise MirrorError(f"{word!r}: the public index must be an https:// URL, got {public!r}")
        parts = urlsplit(mirror)
        if parts.scheme not in ("http", "https", "file") or (parts.scheme != "file" and not parts.hostname):
            raise MirrorError(f"{word!r}: the mirror must be an http(s):// or file:// URL, got {mirror!r}")
        out[public.rstrip("/")] = mirror.rstrip("/")
    return out


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
    for public, mirror in table.items():
        rest = _under(index.rstrip("/"), public)
        if rest is not None:
            return mirror + rest
    return index.rstrip("/")


def to_public(url: str, table: Optional[Dict[str, str]] = None) -> Optional[str]:
    """The public URL of an archive this machine fetched from a mirror, or None when ``url`` is
    under no mirror. ``file://`` URLs are compared after resolving symbolic links of the mirror
    root (pip reports the real path of a ``file://`` index it was given)."""
    table = mirrors() if table is None else table
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

    An ``http(s)`` index is asked for ``INDEX/PROJECT/`` (or ``INDEX/``) with one request; any HTTP
    answer but a server error means it is reachable. A ``file://`` index is reachable when its
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
    from urllib.error import HTTPError, URLError
    from urllib.request import Request, urlopen

    url = index.rstrip("/") + "/" + (project + "/" if project else "")
    try:
        with urlopen(Request(url, method="HEAD"), timeout=timeout):  # noqa: S310 - http(s) checked above
            return None
    except HTTPError as exc:
        return None if exc.code < 500 else f"HTTP {exc.code}"
    except URLError as exc:
        reason = exc.reason
        return str(getattr(reason, "strerror", None) or reason)
    except (OSError, ValueError) as exc:
        return str(exc) or type(exc).__name__


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
        args += ["--extra-index-url", used]
    return args, notes


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
