"""Caches of built Horovod wheels, keyed by everything that changes the binary.

Layout: ``<root>/horovod-wheels/<key>/`` holds one ``horovod-*.whl``, ``key.json`` (the inputs of
the key, for people and for ``lock``) and ``build.log`` (the output of the build that made it,
when envtool built it). The user's cache root is ``$ENVTOOL_CACHE_DIR``, else
``$XDG_CACHE_HOME/envtool``, else ``~/.cache/envtool``; it is read and written.

Site caches are read-only roots with the same layout that a site publishes
(``envtool cache publish --to DIR``): the directories of ``$ENVTOOL_CACHE_PATH`` (``:``-separated)
and then those of the site file's ``build_caches``. They are consulted after the user's cache;
an entry is used only when its ``key.json`` equals the wanted key (a mismatching or unreadable
entry is skipped, so the next cache or a build is used).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from envtool.core.paths import cache_root


@dataclass(frozen=True)
class BuildKey:
    """The inputs that change a Horovod binary.

    Attributes:
        requirement: what pip built (``horovod==0.28.1`` or a ``git+…@commit`` URL).
        build_env: sorted ``HOROVOD_*`` assignments (``MAKEFLAGS`` excluded).
        frameworks: sorted ``(distribution, version)`` of the installed frameworks.
        python_tag: ``cp311``.
        compiler: first line of the real C++ compiler's ``--version``.
        platform: ``linux-64``-style platform.
        mpi: first line of the MPI implementation's version, or ``none``.
        fixes: ids of the fix rules applied.
    """

    requirement: str
    build_env: Tuple[Tuple[str, str], ...]
    frameworks: Tuple[Tuple[str, str], ...]
    python_tag: str
    compiler: str
    platform: str
    mpi: str
    fixes: Tuple[str, ...]

    def digest(self) -> str:
        """A 20-hex-digit SHA-256 prefix of the canonical JSON form."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


#: The variable naming site caches (``:``-separated cache roots, read-only, consulted in order).
CACHE_PATH_VAR = "ENVTOOL_CACHE_PATH"


def key_from_json(data: Dict) -> BuildKey:
    """The :class:`BuildKey` a ``key.json`` mapping describes.

    Raises:
        KeyError, TypeError, ValueError: the mapping is not a key (a field missing or of the wrong shape).
    """
    return BuildKey(requirement=str(data["requirement"]),
                    build_env=tuple((str(k), str(v)) for k, v in data["build_env"]),
                    frameworks=tuple((str(k), str(v)) for k, v in data["frameworks"]),
                    python_tag=str(data["python_tag"]), compiler=str(data["compiler"]),
                    platform=str(data["platform"]), mpi=str(data["mpi"]), fixes=tuple(str(f) for f in data["fixes"]))


@dataclass(frozen=True)
class Entry:
    """One cached wheel.

    Attributes:
        digest: the key's digest (the entry's directory name).
        path: the entry's directory.
        wheel: the wheel file, or None when the entry holds none (an incomplete entry).
        key: the key its ``key.json`` holds, or None when that is missing or unreadable.
        size: bytes of the entry's files.
        mtime: the entry's last use (seconds since the epoch): set when stored and on each cache hit.
        has_log: the entry holds ``build.log``.
    """

    digest: str
    path: Path
    wheel: Optional[Path]
    key: Optional[BuildKey]
    size: int
    mtime: float
    has_log: bool

    def to_json(self) -> Dict:
        """A JSON-ready mapping (``key`` is the ``key.json`` mapping or null)."""
        return {"digest": self.digest, "path": str(self.path), "wheel": str(self.wheel) if self.wheel else None,
                "key": asdict(self.key) if self.key else None, "size_bytes": self.size,
                "last_used": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.mtime)),
                "build_log": self.has_log}


def _read_key(entry: Path) -> Optional[BuildKey]:
    try:
        return key_from_json(json.loads((entry / "key.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class WheelCache:
    """Built wheels under ``root/horovod-wheels``; safe against concurrent writers (atomic rename).

    Args:
        root: the cache root (default: the user's, :func:`envtool.core.paths.cache_root`).
        read_only: a site cache: :meth:`lookup` never touches it and :meth:`store` refuses.
    """

    def __init__(self, root: Optional[Path] = None, read_only: bool = False):
        self.root = Path(root) if root else cache_root()
        self.dir = self.root / "horovod-wheels"
        self.read_only = read_only

    def __repr__(self) -> str:
        return f"WheelCache({str(self.root)!r}{', read_only=True' if self.read_only else ''})"

    def lookup(self, key: BuildKey) -> Optional[Path]:
        """The cached wheel for ``key``, or None (also when the entry's ``key.json`` is not ``key``).

        A hit in a writable cache marks the entry used (its mtime, which ``prune`` reads).
        """
        entry = self.dir / key.digest()
        try:
            wheels = sorted(entry.glob("horovod-*.whl")) if entry.is_dir() else []
        except OSError:
            return None
        if not wheels or _read_key(entry) != key:
            return None
        if not self.read_only:
            try:
                os.utime(entry)
            except OSError:
                pass
        return wheels[0]

    def store(self, key: BuildKey, wheel: Path, log_text: Optional[str] = None) -> Path:
        """Copy ``wheel`` (and its build output ``log_text``) into the cache under ``key``.

        Returns:
            the cached wheel's path.
        Raises:
            PermissionError: the cache is read-only (a site cache).
        """
        if self.read_only:
            raise PermissionError(f"{self.root} is a read-only (site) wheel cache")
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.dir / key.digest()
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.dir))
        shutil.copy2(wheel, tmp / wheel.name)
        (tmp / "key.json").write_text(json.dumps(asdict(key), indent=2, sort_keys=True) + "\n")
        if log_text is not None:
            (tmp / "build.log").write_text(log_text, encoding="utf-8", errors="replace")
        try:
            os.rename(tmp, final)
        except OSError:  # another process stored the same key first
            shutil.rmtree(tmp, ignore_errors=True)
        return self.lookup(key) or final / wheel.name

    def entries(self) -> List[Entry]:
        """Every entry of the cache (complete or not), newest use first; ``[]`` when there is none."""
        out = []
        try:
            paths = [p for p in self.dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
        except OSError:
            return []
        for p in paths:
            try:
                files = [f for f in p.iterdir() if f.is_file()]
                wheels = sorted(f for f in files if f.name.startswith("horovod-") and f.name.endswith(".whl"))
                out.append(Entry(digest=p.name, path=p, wheel=wheels[0] if wheels else None, key=_read_key(p),
                                 size=sum(f.stat().st_size for f in files), mtime=p.stat().st_mtime,
                                 has_log=(p / "build.log").is_file()))
            except OSError:  # removed or unreadable meanwhile (another process pruning)
                continue
        return sorted(out, key=lambda e: -e.mtime)

    def prune(self, older_than: float, now: Optional[float] = None) -> List[Entry]:
        """Delete entries not used for ``older_than`` seconds, incomplete entries, and leftovers of
        interrupted stores (``.tmp-*`` older than a day).

        Args:
            older_than: age in seconds (``0`` deletes every entry).
            now: the current time (seconds since the epoch; default ``time.time()``).
        Returns:
            the entries deleted.
        Raises:
            PermissionError: the cache is read-only.
        """
        if self.read_only:
            raise PermissionError(f"{self.root} is a read-only (site) wheel cache")
        now = time.time() if now is None else now
        gone = []
        for e in self.entries():
            if now - e.mtime >= older_than or e.wheel is None or e.key is None:
                shutil.rmtree(e.path, ignore_errors=True)
                gone.append(e)
        try:
            for p in self.dir.glob(".tmp-*"):
                if now - p.stat().st_mtime > 86400:
                    shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass
        return gone


def site_roots(site_caches: Iterable[str] = ()) -> Tuple[Path, ...]:
    """The site cache roots, in the order they are consulted: ``$ENVTOOL_CACHE_PATH``'s
    directories (``:``-separated; empty items skipped), then ``site_caches`` (the site file's
    ``build_caches``); duplicates and the user's own root dropped. ``~`` is expanded.

    Args:
        site_caches: directories named by the site file.
    Returns:
        absolute paths (they need not exist: a missing one is simply never hit).
    """
    items = [x for x in os.environ.get(CACHE_PATH_VAR, "").split(":") if x.strip()] + list(site_caches)
    user = os.path.abspath(cache_root())
    out: List[Path] = []
    for item in items:
        p = Path(os.path.abspath(os.path.expanduser(item)))
        if str(p) != user and p not in out:
            out.append(p)
    return tuple(out)


def chain(site_caches: Iterable[str] = ()) -> Tuple[WheelCache, ...]:
    """The caches a build consults, in order: the user's (writable), then :func:`site_roots` (read-only)."""
    return (WheelCache(),) + tuple(WheelCache(r, read_only=True) for r in site_roots(site_caches))


def lookup_chain(caches: Sequence[WheelCache], key: BuildKey) -> Tuple[Optional[Path], Optional[WheelCache]]:
    """The first cache of ``caches`` holding ``key``: ``(wheel, cache)``, or ``(None, None)``."""
    for c in caches:
        wheel = c.lookup(key)
        if wheel is not None:
            return wheel, c
    return None, None


def publish(entries: Sequence[Entry], to: Path) -> List[Dict]:
    """Copy cache entries into the site cache root ``to`` (``to/horovod-wheels/<digest>/``), each
    atomically (copied beside, then renamed), group-readable (files ``g+r``, directories ``g+rx``).

    An entry already published (same digest, same ``key.json``) is left as it is.

    Args:
        entries: the entries to publish (complete ones: a wheel and a readable key).
        to: the site cache root (created when missing).
    Returns:
        one ``{"digest", "wheel", "status": "published"|"already there"|"skipped", "reason"?}`` per entry.
    Raises:
        OSError: ``to`` cannot be created or written.
    """
    dest_dir = Path(to) / "horovod-wheels"
    dest_dir.mkdir(parents=True, exist_ok=True)
    for d in (Path(to), dest_dir):
        _group_readable(d)
    site = WheelCache(Path(to), read_only=True)
    out = []
    for e in entries:
        if e.wheel is None or e.key is None:
            out.append({"digest": e.digest, "wheel": None, "status": "skipped",
                        "reason": "incomplete entry (no wheel or no readable key.json)"})
            continue
        if site.lookup(e.key) is not None:
            out.append({"digest": e.digest, "wheel": e.wheel.name, "status": "already there"})
            continue
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=dest_dir))
        try:
            for f in e.path.iterdir():
                if f.is_file():
                    shutil.copy2(f, tmp / f.name)
                    _group_readable(tmp / f.name)
            _group_readable(tmp)
            final = dest_dir / e.digest
            if final.exists():  # a stale or mismatching entry under this digest: replace it
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        out.append({"digest": e.digest, "wheel": e.wheel.name, "status": "published"})
    return out


def _group_readable(path: Path) -> None:
    mode = path.stat().st_mode
    extra = stat.S_IRGRP | (stat.S_IXGRP if stat.S_ISDIR(mode) else 0)
    os.chmod(path, stat.S_IMODE(mode) | extra)
