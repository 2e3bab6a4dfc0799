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

Every entry proves itself before its wheel is used (:meth:`WheelCache.find`):

* ``key.json`` records the wheel (``"wheel": {"file", "size", "sha256"}``, written by
  :meth:`WheelCache.store` and :func:`publish`); the entry must hold exactly that one wheel, of
  that size and SHA-256. An entry that records none (stored by an older envtool), holds another
  or a second wheel, or whose wheel's hash differs is skipped with the reason.
* Under a lock that records the wheel's SHA-256, only a wheel with that hash is used.
* Nobody but the cache's owner may write it: every directory from the cache root down to the
  entry, and the entry's files, must be owned by the root's owner (the user, for the user's own
  cache) or by root, not world-writable, and group-writable only by the group the site file
  names in ``build_cache_group``; symbolic links below the root are refused, and the way to the
  root passes envtool's one rule for paths (no directory on it that anyone but root, the user or
  the cache's owner owns or can write, no link of anyone else's). A cache that fails is skipped with the reason (:func:`envtool.core.paths.site_cache_problem`).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from envtool.core.paths import cache_root, check_cache, ensure_dir, own_directory, read_fd_bounded, site_cache_problem


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


#: Most bytes of a ``key.json`` read (a key with its wheel and compile records is under 4 KiB).
KEY_JSON_MAX = 1 << 20


def key_json_text(entry: Path) -> str:
    """The text of ``entry/key.json``: opened ``O_NOFOLLOW | O_NONBLOCK`` and read only when it is a
    regular file (a FIFO planted there would block the reader for ever), at most
    :data:`KEY_JSON_MAX` bytes, decoded as UTF-8 with ``surrogateescape``.

    Raises:
        OSError: missing, a link, unreadable, or not a regular file (``EINVAL``).
    """
    fd = os.open(Path(entry) / "key.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(22, "not a regular file", str(Path(entry) / "key.json"))
        return read_fd_bounded(fd, KEY_JSON_MAX, 1 << 16).decode("utf-8", errors="surrogateescape")
    finally:
        os.close(fd)


def read_key(entry: Path) -> Optional[BuildKey]:
    """The :class:`BuildKey` ``entry/key.json`` holds (:func:`key_json_text`), or None when it is
    missing, not a regular file, unreadable or not a key."""
    try:
        return key_from_json(json.loads(key_json_text(entry)))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


@dataclass(frozen=True)
class WheelRecord:
    """The wheel an entry's ``key.json`` records (its ``"wheel"`` object).

    Attributes:
        file: the wheel's file name (``horovod-0.28.1-cp311-cp311-linux_x86_64.whl``).
        size: its size in bytes.
        sha256: its SHA-256 (64 lower-case hex digits).
    """

    file: str
    size: int
    sha256: str


def _read_record(entry: Path) -> Optional[WheelRecord]:
    """The :class:`WheelRecord` of ``entry/key.json``, or None when it records none (or a malformed one)."""
    try:
        w = json.loads(key_json_text(entry))["wheel"]
        rec = WheelRecord(file=str(w["file"]), size=int(w["size"]), sha256=str(w["sha256"]).lower())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if len(rec.sha256) != 64 or any(c not in "0123456789abcdef" for c in rec.sha256) or "/" in rec.file:
        return None
    return rec


def compile_record(entry: Path) -> Optional[Dict]:
    """The compile an entry's ``key.json`` records (``"compiled": {"seconds", "host", "cpus",
    "when"}``, written by :meth:`WheelCache.store` after a build), or None (none recorded: an
    entry from an older envtool, a published copy, an unreadable file)."""
    try:
        import math

        rec = json.loads(key_json_text(entry)).get("compiled")
        seconds = float(rec["seconds"]) if isinstance(rec, dict) else 0.0
        if math.isfinite(seconds) and 0 < seconds < 7 * 86400:  # a week: no compile takes longer
            cpus = rec.get("cpus")
            return {"seconds": seconds, "host": str(rec.get("host", ""))[:200],
                    "cpus": cpus if isinstance(cpus, int) and not isinstance(cpus, bool) else None,
                    "when": str(rec.get("when", ""))[:64]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        pass
    return None


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes (hex), read in 1 MiB blocks.

    Raises:
        OSError: the file cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _key_json(key: BuildKey, wheel: Path, sha256: str, compiled: Optional[Dict] = None) -> str:
    data = asdict(key)
    if compiled:
        data["compiled"] = compiled
    data["wheel"] = {"file": wheel.name, "size": wheel.stat().st_size, "sha256": sha256}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


class WheelCache:
    """Built wheels under ``root/horovod-wheels``; safe against concurrent writers (atomic rename).

    Args:
        root: the cache root (default: the user's, :func:`envtool.core.paths.cache_root`).
        read_only: a site cache: :meth:`lookup` never touches it and :meth:`store` refuses.
        group: the group trusted to write a site cache (the site file's ``build_cache_group``).
    """

    def __init__(self, root: Optional[Path] = None, read_only: bool = False, group: Optional[str] = None):
        self.root = Path(root) if root else cache_root()
        self.dir = self.root / "horovod-wheels"
        self.read_only = read_only
        self.group = group

    def __repr__(self) -> str:
        return f"WheelCache({str(self.root)!r}{', read_only=True' if self.read_only else ''})"

    def find(self, key: BuildKey, want_sha256: str = "", mark_used: bool = True) -> Tuple[Optional[Path], str]:
        """The proven wheel for ``key``, or why there is none.

        The entry ``horovod-wheels/<digest>`` is used when nobody but the cache's owner can write it
        (:func:`envtool.core.paths.site_cache_problem`; the user's own cache must be the user's), its
        ``key.json`` is
        ``key`` and records the wheel, the entry holds exactly that wheel (no other ``.whl``), of
        the recorded size and SHA-256, and that SHA-256 is ``want_sha256`` when given (a lock's).
        The wheel's bytes are hashed here; :func:`envtool.steps.create.horovod_build` checks again that
        pip installed a wheel of that hash (``direct_url.json``). A hit in a writable cache marks
        the entry used (its mtime, which ``prune`` reads).

        Args:
            key: the wanted build key.
            want_sha256: the SHA-256 the wheel must have (a lock's), or ``""``.
            mark_used: on a hit in a writable cache, mark the entry used (False: ``plan``'s
                look, which uses nothing).
        Returns:
            ``(wheel, "")`` on a hit; ``(None, "")`` when there is no entry; ``(None, reason)``
            when the entry is there but not used (``reason`` says why, naming the path).
        Raises:
            UsageError: a writable (the user's) cache that fails envtool's rule for caches
                (:func:`envtool.core.paths.check_cache`: reached through another user's link or
                directory, owned by another user, or writable by others; exit 2).
        """
        digest = key.digest()
        entry = self.dir / digest
        if not self.read_only:  # the user's own cache: envtool's one rule, as for every command (exit 2)
            check_cache("horovod-wheels", root=self.root)
        if not os.path.lexists(entry):
            return None, ""
        problem = site_cache_problem(self.root, ("horovod-wheels", f"horovod-wheels/{digest}"),
                                     owner=None if self.read_only else os.geteuid(), group=self.group)
        if problem:
            return None, f"not trusted: {problem}"
        if read_key(entry) != key:
            return None, "its key.json names another build (or is unreadable)"
        rec = _read_record(entry)
        if rec is None:
            return None, (f"{entry}/key.json records no wheel SHA-256 (stored by an older envtool; "
                          "publish or build it again)")
        try:
            wheels = sorted(f.name for f in entry.iterdir() if f.name.endswith(".whl"))
        except OSError as exc:
            return None, f"{entry}: {exc.strerror or exc}"
        if wheels != [rec.file]:
            return None, (f"{entry} holds {', '.join(wheels) or 'no wheel'}; key.json names exactly one wheel, "
                          f"{rec.file}")
        wheel = entry / rec.file
        problem = site_cache_problem(self.root, (f"horovod-wheels/{digest}/key.json",
                                                 f"horovod-wheels/{digest}/{rec.file}"),
                                     owner=None if self.read_only else os.geteuid(), group=self.group)
        if problem:
            return None, f"not trusted: {problem}"
        if want_sha256 and rec.sha256 != want_sha256.lower():
            return None, f"{wheel}: SHA-256 {rec.sha256} recorded, the lock has {want_sha256.lower()}"
        try:
            size, got = wheel.stat().st_size, file_sha256(wheel)
        except OSError as exc:
            return None, f"{wheel}: {exc.strerror or exc}"
        if size != rec.size or got != rec.sha256:
            return None, (f"{wheel}: not the wheel key.json records (SHA-256 {got}, {size} bytes; recorded "
                          f"{rec.sha256}, {rec.size} bytes)")
        if not self.read_only and mark_used:
            try:
                os.utime(entry)
            except OSError:
                pass
        return wheel, ""

    def lookup(self, key: BuildKey, want_sha256: str = "") -> Optional[Path]:
        """The proven cached wheel for ``key`` (:meth:`find`), or None."""
        return self.find(key, want_sha256)[0]

    def store(self, key: BuildKey, wheel: Path, log_text: Optional[str] = None,
              seconds: Optional[float] = None) -> Path:
        """Copy ``wheel`` (and its build output ``log_text``) into the cache under ``key``; its
        ``key.json`` records the wheel's file name, size and SHA-256, and with ``seconds`` the
        compile (:func:`compile_record`). The cache's directories are private (``0700``,
        :func:`envtool.core.paths.ensure_dir`), its files ``0600``.

        Args:
            key: the build's key.
            wheel: the built wheel.
            log_text: the build's output, kept as ``build.log``.
            seconds: how long the compile took (wall clock), recorded with this host's name and
                CPU count for ``plan``'s estimate of the next compile.

        Returns:
            the cached wheel's path.
        Raises:
            PermissionError: the cache is read-only (a site cache).
            UsageError: the cache directory belongs to another user.
            EnvtoolError: the stored entry does not prove itself afterwards (names the reason).
        """
        if self.read_only:
            raise PermissionError(f"{self.root} is a read-only (site) wheel cache")
        check_cache("horovod-wheels", root=self.root)
        ensure_dir(self.dir)
        final = self.dir / key.digest()
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.dir))
        shutil.copyfile(wheel, tmp / wheel.name)
        compiled = None
        if seconds is not None:
            compiled = {"seconds": round(float(seconds), 1), "host": socket.gethostname(), "cpus": os.cpu_count(),
                        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (tmp / "key.json").write_text(_key_json(key, tmp / wheel.name, file_sha256(tmp / wheel.name), compiled))
        if log_text is not None:
            (tmp / "build.log").write_text(log_text, encoding="utf-8", errors="replace")
        for f in tmp.iterdir():
            os.chmod(f, 0o600)
        try:
            os.rename(tmp, final)
        except OSError:  # another process stored the same key first, or an entry that proves nothing is there
            if self.lookup(key) is None and os.path.lexists(final):
                old = Path(tempfile.mkdtemp(prefix=".tmp-old-", dir=self.dir))
                try:
                    os.rename(final, old / "entry")
                    os.rename(tmp, final)
                except OSError:
                    pass
                shutil.rmtree(old, ignore_errors=True)
            shutil.rmtree(tmp, ignore_errors=True)
        stored = self.lookup(key)
        if stored is None:
            from envtool.core.errors import EnvtoolError

            raise EnvtoolError(f"{final}: the built wheel could not be stored in the wheel cache ({self.find(key)[1]})")
        return stored

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
                out.append(Entry(digest=p.name, path=p, wheel=wheels[0] if wheels else None, key=read_key(p),
                                 size=sum(f.stat().st_size for f in files), mtime=p.stat().st_mtime,
                                 has_log=(p / "build.log").is_file()))
            except OSError:  # removed or unreadable meanwhile (another process pruning)
                continue
        return sorted(out, key=lambda e: -e.mtime)

    def prune(self, older_than: float, now: Optional[float] = None, dry_run: bool = False,
              kept: Optional[List[Entry]] = None) -> List[Entry]:
        """Delete entries not used for ``older_than`` seconds, incomplete entries, and leftovers of
        interrupted stores (``.tmp-*`` older than a day). Only what the current user owns is
        deleted: an entry (or leftover) of another user's is left as it is, and with ``kept`` given
        such entries are appended to it (the caller says so).

        Args:
            older_than: age in seconds (``0`` deletes every entry).
            now: the current time (seconds since the epoch; default ``time.time()``).
            dry_run: delete nothing; return what would be deleted.
            kept: when given, entries that would go but belong to another user are appended.
        Returns:
            the entries deleted (with ``dry_run``: those that would be).
        Raises:
            PermissionError: the cache is read-only.
        """
        if self.read_only:
            raise PermissionError(f"{self.root} is a read-only (site) wheel cache")
        now = time.time() if now is None else now
        gone = []
        for e in self.entries():
            if now - e.mtime >= older_than or e.wheel is None or e.key is None:
                if not own_directory(e.path):
                    if kept is not None:
                        kept.append(e)
                    continue
                if not dry_run:
                    shutil.rmtree(e.path, ignore_errors=True)
                gone.append(e)
        if dry_run:
            return gone
        try:
            for p in self.dir.glob(".tmp-*"):
                if now - p.lstat().st_mtime > 86400 and own_directory(p):
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


def chain(site_caches: Iterable[str] = (), group: Optional[str] = None) -> Tuple[WheelCache, ...]:
    """The caches a build consults, in order: the user's (writable), then :func:`site_roots` (read-only).

    Args:
        site_caches: the site file's ``build_caches``.
        group: the site file's ``build_cache_group`` (trusted to write a site cache).
    """
    return (WheelCache(),) + tuple(WheelCache(r, read_only=True, group=group) for r in site_roots(site_caches))


def lookup_chain(caches: Sequence[WheelCache], key: BuildKey, want_sha256: str = "",
                 skipped: Optional[List[Tuple[WheelCache, str]]] = None,
                 mark_used: bool = True) -> Tuple[Optional[Path], Optional[WheelCache]]:
    """The first cache of ``caches`` with a proven wheel for ``key`` (:meth:`WheelCache.find`).

    Args:
        caches: the caches, in order.
        key: the wanted build key.
        want_sha256: the SHA-256 the wheel must have (a lock's), or ``""``.
        skipped: when given, ``(cache, reason)`` is appended for each cache whose entry was not used.
        mark_used: see :meth:`WheelCache.find`.
    Returns:
        ``(wheel, cache)``, or ``(None, None)``.
    """
    for c in caches:
        wheel, reason = c.find(key, want_sha256, mark_used=mark_used)
        if wheel is not None:
            return wheel, c
        if reason and skipped is not None:
            skipped.append((c, reason))
    return None, None


def publish(entries: Sequence[Entry], to: Path, dry_run: bool = False) -> List[Dict]:
    """Copy cache entries into the site cache root ``to`` (``to/horovod-wheels/<digest>/``), each
    atomically (copied beside, then renamed), readable by the group and writable by the publisher
    alone (files ``0644`` less what the umask takes, then ``g+r``; directories it creates lose group
    and other write, then get ``g+rx``), so that users' envtool trusts it
    (:func:`envtool.core.paths.site_cache_problem`).

    Each entry's wheel is proven first: its ``key.json`` must record the wheel (file, size,
    SHA-256) and the wheel must match; an entry of an older envtool that records none gets the
    hash of its wheel recorded (it is the publisher's own cache). An entry already published and
    proven (same digest, same key, same wheel) is left as it is; a cache entry (a directory with a
    ``key.json``) under the same digest that does not prove itself is replaced; anything else there
    (a file, a symbolic link, a directory without ``key.json``: not an entry envtool made) is left
    alone and the entry skipped.

    Args:
        entries: the entries to publish (complete ones: a wheel and a readable key).
        to: the site cache root (created when missing, unless ``dry_run``).
        dry_run: change nothing; the statuses say what would happen (``would publish``,
            ``would replace``).
    Returns:
        one ``{"digest", "wheel", "status": "published"|"replaced"|"already there"|"skipped"|"would publish"|
        "would replace", "reason"?}`` per entry.
    ``to`` goes through envtool's rule for paths (:func:`envtool.core.paths.trusted_path`: no
    directory on the way that another user owns or can write, no link of another user's), and
    ``to`` and ``to/horovod-wheels``, when they exist, must be the publisher's and not writable by
    every user (:func:`_check_destination`). Only the directories publish creates get their mode
    set: an existing ``to`` keeps its own.

    Raises:
        OSError: ``to`` cannot be created or written.
        UsageError: ``to`` fails the rule above (exit 2, naming the component, its owner and mode).
    """
    dest_dir = Path(to) / "horovod-wheels"
    for d in (Path(to), dest_dir):
        _check_destination(d)
        if dry_run:
            continue
        try:
            os.mkdir(d) if d.parent.is_dir() else d.mkdir(parents=True)
        except FileExistsError:
            continue  # not envtool's: its mode is left as it is
        _check_destination(d)
        os.chmod(d, stat.S_IMODE(d.lstat().st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
        _group_readable(d)
    site = WheelCache(Path(to), read_only=True)
    out = []
    for e in entries:
        if e.wheel is None or e.key is None:
            out.append({"digest": e.digest, "wheel": None, "status": "skipped",
                        "reason": "incomplete entry (no wheel or no readable key.json)"})
            continue
        rec = _read_record(e.path)
        wheels = sorted(f.name for f in e.path.iterdir() if f.name.endswith(".whl"))
        if len(wheels) != 1 or (rec is not None and wheels != [rec.file]):
            out.append({"digest": e.digest, "wheel": e.wheel.name, "status": "skipped",
                        "reason": f"the entry holds {', '.join(wheels)}; expected exactly the wheel key.json names"})
            continue
        sha = file_sha256(e.wheel)
        if rec is not None and (sha != rec.sha256 or e.wheel.stat().st_size != rec.size):
            out.append({"digest": e.digest, "wheel": e.wheel.name, "status": "skipped",
                        "reason": f"its SHA-256 {sha} is not the {rec.sha256} key.json records"})
            continue
        if dest_dir.is_dir() and site.lookup(e.key, want_sha256=sha) is not None:
            out.append({"digest": e.digest, "wheel": e.wheel.name, "status": "already there"})
            continue
        final = dest_dir / e.digest
        stale = os.path.lexists(final)
        if stale and not (final.is_dir() and not final.is_symlink() and (final / "key.json").is_file()
                          and not (final / "key.json").is_symlink()):
            out.append({"digest": e.digest, "wheel": e.wheel.name, "status": "skipped",
                        "reason": f"{final} is not a cache entry envtool made (no key.json, or a file or link); "
                                  "left as it is"})
            continue
        if dry_run:
            out.append({"digest": e.digest, "wheel": e.wheel.name,
                        "status": "would replace" if stale else "would publish"})
            continue
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=dest_dir))
        try:
            for f in e.path.iterdir():
                if f.is_file() and not f.is_symlink() and f.name in (e.wheel.name, "build.log"):
                    shutil.copyfile(f, tmp / f.name)
            (tmp / "key.json").write_text(_key_json(e.key, tmp / e.wheel.name, sha))
            if file_sha256(tmp / e.wheel.name) != sha:
                raise OSError(f"{e.wheel} changed while it was copied")
            for f in tmp.iterdir():
                os.chmod(f, 0o644 & ~_umask())
                _group_readable(f)
            os.chmod(tmp, 0o755 & ~_umask())
            _group_readable(tmp)
            if stale:  # a stale or mismatching entry under this digest (checked above): replace it
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        out.append({"digest": e.digest, "wheel": e.wheel.name, "status": "replaced" if stale else "published"})
    return out


def _check_destination(d: Path) -> None:
    """Refuse a site cache directory ``d`` that ``cache publish`` would write (exit 2): the way to
    it must pass :func:`envtool.core.paths.trusted_path`; an existing ``d`` must be a directory of
    the publisher's (not a link) that every user cannot write (its group may: a site's group)."""
    from envtool.core.errors import UsageError
    from envtool.core.paths import owner_name, trusted_path

    instead = "publish into a directory of your own, reached through directories of yours or root's"
    st = trusted_path(d, "the site cache (--to)", instead)
    if st is None:
        if os.path.lexists(d):
            raise UsageError(f"the site cache (--to) {d}: not a directory ({instead})")
        return
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"the site cache (--to) {d}: not a directory ({instead})")
    if st.st_uid != os.geteuid():
        raise UsageError(f"the site cache (--to) {d}: owned by {owner_name(st.st_uid)} (mode {mode:04o}), not by "
                         f"you (uid {os.geteuid()}); envtool publishes only into a directory of yours ({instead})")
    if mode & stat.S_IWOTH:
        raise UsageError(f"the site cache (--to) {d}: writable by every user (mode {mode:04o}); envtool will not "
                         f"publish there (chmod o-w {d}, or {instead})")


def _umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _group_readable(path: Path) -> None:
    mode = path.stat().st_mode
    extra = stat.S_IRGRP | (stat.S_IXGRP if stat.S_ISDIR(mode) else 0)
    os.chmod(path, stat.S_IMODE(mode) | extra)
