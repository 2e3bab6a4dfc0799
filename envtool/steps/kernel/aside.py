"""What proves a directory beside a prefix is envtool's: the one test that ``create``'s sweep of a
dead run's leftovers (:class:`envtool.steps.kernel.transaction.BuildTransaction`) and ``envtool
remove`` (:mod:`envtool.steps.lifecycle.remove`) both apply before they delete anything.

A name is no proof: anyone may ``mkdir .data.envtool-old-0``. A copy counts as envtool's only when
envtool's own records say so:

* ``PREFIX/.envtool/create.json`` (:data:`CREATE_RECORD`, written by ``create`` as the last step
  before the environment is moved into place) whose ``prefix`` names the prefix: an environment
  renamed aside (``.NAME.envtool-old-PID``) or a build that had finished
  (``.NAME.envtool-build-PID``);
* the run marker :data:`RUN_MARKER` (``{"prefix": TARGET, "pid": PID}``) that a build writes into
  its private ``TMPDIR`` (``.NAME.envtool-tmp-PID`` beside the prefix, or ``envtool-DIGEST-PID``
  under the system's temporary directory, :func:`private_tmp`) as soon as it has made it: it proves
  that directory and the build directory of the same PID.

And only a directory (not a symbolic link) of the effective user's, whose PID is above 1 (no
envtool runs as PID 0 or 1) and no longer runs here (:func:`envtool.core.procs.stale_dirs`), is
ever deleted (:func:`leftovers`).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import List, NamedTuple, Optional, Tuple

from envtool.core import procs
from envtool.core.paths import own_directory

#: The record that proves envtool made an environment (relative to its prefix).
CREATE_RECORD = ".envtool/create.json"
#: The file inside a build's private ``TMPDIR`` (``.NAME.envtool-tmp-PID``) that proves envtool made
#: it, and its build directory ``.NAME.envtool-build-PID`` (same PID), for ``prefix``
#: (JSON ``{"prefix": TARGET, "pid": PID}``).
RUN_MARKER = ".envtool-run.json"
#: The names of what an interrupted ``create`` or ``remove`` leaves beside a prefix NAME:
#: ``.NAME<stem>PID``.
ASIDE_STEMS = (".envtool-old-", ".envtool-build-", ".envtool-tmp-")
#: The longest private ``TMPDIR`` kept beside the target (bytes). Children make Unix sockets under
#: it — Python's multiprocessing ``TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX`` (32 more bytes) for a
#: forkserver DataLoader, Open MPI's and PMIx's session directories — and a socket path holds at
#: most 107 bytes (``sun_path``, unix(7)); a longer prefix gets a short one under the system's
#: temporary directory instead.
MAX_TMPDIR = 48
#: Largest record read (bytes).
_MAX_RECORD = 16 * 1024 * 1024


def read_record(prefix: Path, name: str = CREATE_RECORD) -> Optional[dict]:
    """The JSON mapping of ``prefix/name``, or None when it is missing, not a regular file (a
    symbolic link included), larger than 16 MiB or not a JSON object."""
    path = Path(prefix) / name
    try:
        if os.path.islink(path) or not path.is_file():
            return None
        with open(path, "rb") as fh:
            raw = fh.read(_MAX_RECORD + 1)
        if len(raw) > _MAX_RECORD:
            return None
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: "[[[[…" nested past Python's limit
        return None
    return data if isinstance(data, dict) else None


def same_place(recorded: object, prefix: Path) -> bool:
    """Whether the ``prefix`` a record names (``recorded``) is ``prefix`` (as given or resolved)."""
    if not isinstance(recorded, str) or not recorded:
        return False
    return os.path.abspath(recorded) in (os.path.abspath(prefix), os.path.realpath(prefix))


def write_run_marker(tmp: Path, target: Path) -> None:
    """Write :data:`RUN_MARKER` into the build's private temporary directory ``tmp`` (made by this
    process, mode 0700), naming ``target`` (the prefix being built).

    Raises:
        OSError: it cannot be written (the transaction fails before anything is built).
    """
    with open(Path(tmp) / RUN_MARKER, "x", encoding="utf-8") as fh:
        json.dump({"prefix": str(target), "pid": os.getpid()}, fh)


def private_tmp(target: Path, pid: Optional[int] = None) -> Tuple[Path, Optional[str]]:
    """Where a build of ``target`` keeps its children's ``TMPDIR``, and the stem a sweep of a dead
    run's leftovers looks for there.

    Returns:
        ``(path, None)`` for ``.NAME.envtool-tmp-PID`` beside the target (swept with the build
        directories), or ``(path, stem)`` for ``envtool-DIGEST-PID`` under the system's temporary
        directory (``$TMPDIR``, else ``/tmp``) when the sibling path is longer than
        :data:`MAX_TMPDIR`; ``DIGEST`` names the target and the user. ``pid``: the build's process
        (default this one; another to find a dead run's).
    """
    import hashlib

    pid = os.getpid() if pid is None else pid
    sibling = target.parent / f".{target.name}.envtool-tmp-{pid}"
    if len(os.fsencode(str(sibling))) <= MAX_TMPDIR:
        return sibling, None
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) > 24:
        base = "/tmp"
    digest = hashlib.sha256(f"{os.geteuid()}:{target}".encode(errors="surrogateescape")).hexdigest()[:10]
    stem = f"envtool-{digest}-"
    return Path(base) / f"{stem}{pid}", stem


def aside_pid(prefix: Path, path: Path) -> Tuple[str, int]:
    """The stem (one of :data:`ASIDE_STEMS`) and PID of the aside name ``path`` of ``prefix``;
    ``("", 0)`` when ``path`` has no such name."""
    for stem in ASIDE_STEMS:
        head = f".{prefix.name}{stem}"
        if path.name.startswith(head) and path.name[len(head):].isdigit():
            return stem, int(path.name[len(head):])
    return "", 0


def marker_names(tmp: Path, prefix: Path) -> bool:
    """Whether ``tmp`` is a real directory of this user's carrying envtool's run marker
    (:data:`RUN_MARKER`) naming ``prefix``."""
    if not own_directory(tmp):
        return False
    rec = read_record(tmp, RUN_MARKER)
    return rec is not None and same_place(rec.get("prefix"), prefix)


def proven(prefix: Path, path: Path) -> bool:
    """Whether envtool's own records prove the aside copy ``path`` is a copy of ``prefix`` that an
    envtool run made (whether that run still runs is not looked at: :func:`leftovers` does).

    Returns:
        True for ``.NAME.envtool-old-PID`` carrying :data:`CREATE_RECORD` that names ``prefix``
        (an environment renamed aside); for ``.NAME.envtool-build-PID`` carrying that record, or
        whose run's private temporary directory (:func:`private_tmp`, same PID) carries the run
        marker naming ``prefix``; for ``.NAME.envtool-tmp-PID`` carrying the run marker. Never for a
        PID of 0 or 1 (no envtool runs as either), nor for another name.
    """
    stem, pid = aside_pid(prefix, path)
    if pid <= 1:
        return False
    if stem in (".envtool-old-", ".envtool-build-"):
        rec = read_record(path)
        if rec is not None and same_place(rec.get("prefix"), prefix):
            return True
    if stem == ".envtool-build-":
        sibling = prefix.parent / f".{prefix.name}.envtool-tmp-{pid}"
        return marker_names(sibling, prefix) or marker_names(private_tmp(prefix, pid)[0], prefix)
    if stem == ".envtool-tmp-":
        return marker_names(path, prefix)
    return False


class Leftovers(NamedTuple):
    """The directories with envtool's aside names beside a prefix (see :func:`leftovers`)."""

    mine: List[Path]
    unproven: List[Path]
    others: List[Path]
    live: List[Path]


def leftovers(prefix: Path) -> Leftovers:
    """The aside copies interrupted envtool runs left beside ``prefix``, split into those this
    process may delete and those it leaves alone.

    Args:
        prefix: the environment's absolute path (present or not).
    Returns:
        ``(mine, unproven, others, live)``, each sorted: ``mine`` are directories
        ``.NAME<stem>PID`` (stems :data:`ASIDE_STEMS`) that are not symbolic links, are owned by the
        effective user, whose PID no longer runs (:func:`envtool.core.procs.stale_dirs`) and that
        envtool's records prove envtool's (:func:`proven`), with a proven build directory's private
        temporary directory under the system's when it lives there; ``unproven`` are such
        directories without that proof (the user's own data under a look-alike name: never
        deleted); ``others`` have envtool's names and a dead PID but another owner, or are not
        directories; ``live`` have a PID that runs (another envtool at work, this process, or a
        PID reused by another process). Only ``mine`` may be deleted.
    """
    prefix = Path(prefix)
    found = Leftovers([], [], [], [])
    for stem in ASIDE_STEMS:
        stale, live = procs.stale_dirs(prefix.parent, f".{prefix.name}{stem}")
        found.live.extend(live)
        for path in stale:
            if not os.path.lexists(path):
                continue
            if not own_directory(path):
                found.others.append(path)
            elif proven(prefix, path):
                found.mine.append(path)
                if stem == ".envtool-build-":  # its private TMPDIR under the system's, when the path was long
                    tmp, far = private_tmp(prefix, aside_pid(prefix, path)[1])
                    if far and marker_names(tmp, prefix):
                        found.mine.append(tmp)
            else:
                found.unproven.append(path)
    for part in found:
        part.sort()
    return found


def stray_tmps(prefix: Path) -> Tuple[List[Path], List[Path]]:
    """A dead run's private temporary directories of ``prefix`` under the system's (``envtool-DIGEST-PID``,
    :func:`private_tmp`) whose build directory is gone already.

    Returns:
        ``(mine, unproven)``: directories of this user's with a PID above 1 that no longer runs and
        the run marker naming ``prefix`` (envtool's: may be deleted), and the other paths with that
        name and a dead PID (left alone). Both empty when this prefix's ``TMPDIR`` lives beside it.
    """
    here, stem = private_tmp(Path(prefix))
    if stem is None:
        return [], []
    mine: List[Path] = []
    unproven: List[Path] = []
    stale, _ = procs.stale_dirs(here.parent, stem)
    for path in sorted(stale):
        pid = int(path.name[len(stem):])
        (mine if pid > 1 and marker_names(path, prefix) else unproven).append(path)
    return mine, unproven
