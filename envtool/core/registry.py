"""The user's record of the environments envtool made (core layer): what ``envtool list`` shows.

Every ``create`` (and ``publish``, which builds through it) writes one small JSON file per
prefix under the user's state directory, ``$XDG_STATE_HOME/envtool/environments/`` (else
``~/.local/state/envtool/environments/``; XDG Base Directory Specification,
https://specifications.freedesktop.org/basedir-spec/latest/ : "state data that should persist
between (application) restarts"). One file per prefix (named by a digest of the prefix), written
to a temporary name and renamed into place, so concurrent creates never share a file nor leave
half a record. The record only says *where* to look: the environment's own
``PREFIX/.envtool/create.json`` stays the proof that envtool made it (``envtool remove`` reads
that, never this registry alone).

Record fields: ``prefix`` (absolute path), ``spec`` (name), ``created`` (seconds since the epoch),
``kind`` (``created`` or ``published``), ``module`` (``NAME/VERSION`` of a published one, else null).

The state directory is used under envtool's one rule for paths (:mod:`envtool.core.paths`): no
directory on the way that another user owns or can write, no link of another user's, and the
directory itself the user's and writable by nobody else (:func:`checked_dir`). Otherwise reading
is refused (exit 2, naming ``$XDG_STATE_HOME``), and writing or deleting a record fails as an
``OSError`` naming the reason (a create still succeeds, and says so).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Dict, List, Optional

#: Largest registry record read (bytes); anything bigger is not envtool's and is skipped.
MAX_RECORD = 64 * 1024


def state_dir() -> Path:
    """envtool's state directory: ``$XDG_STATE_HOME/envtool``, else ``~/.local/state/envtool`` (not created)."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(base):  # the specification says a relative value is invalid and is ignored
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "envtool"


def registry_dir() -> Path:
    """Where the records live (``state_dir()/environments``; not created)."""
    return state_dir() / "environments"


def _origin() -> str:
    """Where the state directory comes from, for errors."""
    return "$XDG_STATE_HOME/envtool" if os.path.isabs(os.environ.get("XDG_STATE_HOME") or "") \
        else "~/.local/state/envtool"


def checked_dir(create: bool = False) -> Path:
    """The registry directory, checked under envtool's rule for paths (:func:`envtool.core.paths.trusted_path`,
    :func:`envtool.core.paths.owned_problem`); with ``create`` the state directory and the registry
    directory are made (``0700``) when missing, and an existing one's mode is left as it is.

    Returns:
        :func:`registry_dir` (with ``create`` False it may not exist).
    Raises:
        UsageError: the way to it passes through a directory another user owns or can write or a
            link another user owns, or it is not the user's or others can write it (exit 2, naming
            the variable it comes from, the component, its owner and mode).
        OSError: it cannot be created.
    """
    from envtool.core.errors import UsageError
    from envtool.core.paths import owned_problem, private_dir, trusted_path

    instead = f"{state_dir()} is {_origin()}: set XDG_STATE_HOME to a directory of your own"
    what = "envtool's state directory"
    for path in (state_dir(), registry_dir()):
        if create:
            private_dir(path, what=what, instead=instead)
            continue
        st = trusted_path(path, what, instead)
        problem = owned_problem(path, st, what, instead) if st is not None else None
        if problem:
            raise UsageError(problem)
    return registry_dir()


def _writable() -> Path:
    """:func:`checked_dir` for a write: a refusal is a ``PermissionError`` naming the reason."""
    from envtool.core.errors import UsageError

    try:
        return checked_dir(create=True)
    except UsageError as exc:
        raise PermissionError(13, str(exc), str(registry_dir())) from None


def record_path(prefix: Path) -> Path:
    """The file that records ``prefix`` (``registry_dir()/DIGEST.json``, DIGEST the first 24 hex digits
    of the SHA-256 of the absolute path's bytes); it may not exist."""
    digest = hashlib.sha256(os.fsencode(os.path.abspath(prefix))).hexdigest()[:24]
    return registry_dir() / f"{digest}.json"


def record(prefix: Path, spec: str, kind: str = "created", module: Optional[str] = None,
           created: Optional[float] = None) -> Path:
    """Write (or replace) the record of ``prefix``.

    Args:
        prefix: the environment's absolute prefix.
        spec: the spec name it was made from.
        kind: ``created`` or ``published``.
        module: ``NAME/VERSION`` for a published environment, else None.
        created: when (seconds since the epoch; default now).
    Returns:
        the record's path.
    Raises:
        OSError: the state directory cannot be made or written (read-only home, full disk), or it
            fails envtool's rule for paths (:func:`checked_dir`; a ``PermissionError`` naming why).
    """
    path = record_path(prefix)
    _writable()
    data = {"prefix": os.path.abspath(prefix), "spec": spec, "created": created or time.time(), "kind": kind,
            "module": module}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    return path


def forget(prefix: Path) -> bool:
    """Delete the record of ``prefix``; True when there was one.

    Raises:
        OSError: it cannot be deleted, or the state directory fails envtool's rule for paths
            (:func:`checked_dir`; a ``PermissionError`` naming why).
    """
    from envtool.core.errors import UsageError

    try:
        checked_dir()
    except UsageError as exc:
        raise PermissionError(13, str(exc), str(record_path(prefix))) from None
    try:
        record_path(prefix).unlink()
        return True
    except FileNotFoundError:
        return False


def entries() -> List[Dict[str, object]]:
    """Every readable record, oldest first; unreadable, oversized or malformed files are skipped
    (the registry is a hint, not a proof), and so are links and files of another user's.

    Raises:
        UsageError: the state directory fails envtool's rule for paths (:func:`checked_dir`, exit 2).
    """
    checked_dir()
    out = []
    try:
        names = sorted(os.listdir(registry_dir()))
    except OSError:
        return []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            with open(registry_dir() / name, "rb", opener=_nofollow) as fh:
                if os.fstat(fh.fileno()).st_uid != os.geteuid():
                    continue
                raw = fh.read(MAX_RECORD + 1)
            if len(raw) > MAX_RECORD:
                continue
            data = json.loads(raw.decode("utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("prefix"), str) and os.path.isabs(data["prefix"]):
            out.append(data)
    return sorted(out, key=_created)


def _nofollow(path: str, flags: int) -> int:
    """``open``'s opener: never through a link, never blocking on a FIFO."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)


def _created(record: Dict[str, object]) -> float:
    """A record's ``created`` (epoch seconds), 0 when it has none."""
    created = record.get("created")
    return created if isinstance(created, (int, float)) else 0
