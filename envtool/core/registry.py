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
        OSError: the state directory cannot be made or written (read-only home, full disk).
    """
    path = record_path(prefix)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
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
    """Delete the record of ``prefix``; True when there was one."""
    try:
        record_path(prefix).unlink()
        return True
    except FileNotFoundError:
        return False


def entries() -> List[Dict[str, object]]:
    """Every readable record, oldest first; unreadable, oversized or malformed files are skipped
    (the registry is a hint, not a proof)."""
    out = []
    try:
        names = sorted(os.listdir(registry_dir()))
    except OSError:
        return []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            with open(registry_dir() / name, "rb") as fh:
                raw = fh.read(MAX_RECORD + 1)
            if len(raw) > MAX_RECORD:
                continue
            data = json.loads(raw.decode("utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("prefix"), str) and os.path.isabs(data["prefix"]):
            out.append(data)
    return sorted(out, key=_created)


def _created(record: Dict[str, object]) -> float:
    """A record's ``created`` (epoch seconds), 0 when it has none."""
    created = record.get("created")
    return created if isinstance(created, (int, float)) else 0
