"""Locks already read, remembered between runs (``<cache>/locks/<path digest>.json``).

Reading a lock goes through conda-lock's own parser and models (:func:`envtool.lock.lockio.read_lock`),
and importing ``conda_lock.lockfile`` costs about 0.5 s (pydantic, requests; issue 45). ``plan`` and
``create`` read the same committed lock on every run, so what a read gave is remembered, keyed by
everything it depends on (:func:`inputs_key`), as :mod:`envtool.spec.matrix_cache` does for
``specs``; a run whose lock and code are the ones remembered imports no conda-lock.

The key covers: the lock file's bytes (SHA-256) and path; envtool's version and the interpreter's;
the size and modification time of each source file of :mod:`envtool.lock` and of the code that
parses (conda-lock's ``lockfile`` package, pydantic, PyYAML). Only a lock that was read without
error is remembered: a bad lock is parsed, and reported, on every run. The file is used only when
it is a regular file of the current user that nobody else can write, opened without following a
link, and holds what :func:`write` writes; anything else is ignored and the lock is parsed as
before. Failing to write it changes nothing but the next run's speed.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from envtool.lock.model import BaseSet, LockData, LockedPackage

#: bump when what :func:`write` stores changes.
FORMAT = 1
#: the directory below the cache root.
SUBDIR = "locks"
#: the largest file :func:`read` reads (bytes); a lock of some thousand packages is ~2 MB.
MAX_BYTES = 32 << 20


def _code_stamps() -> List[str]:
    """``path size mtime_ns`` of the source files a lock is read with (see the module); found
    without importing conda-lock (``find_spec`` of a top-level package does not run it)."""
    import importlib.util

    here = Path(__file__).resolve().parent  # envtool/lock
    files = sorted(here.glob("*.py")) + [here.parent / "core" / "platforms.py"]
    for name in ("conda_lock", "pydantic", "yaml"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin:
            continue
        files.append(Path(spec.origin))
        if name == "conda_lock" and spec.submodule_search_locations:
            pkg = Path(list(spec.submodule_search_locations)[0])
            files += sorted((pkg / "lockfile").rglob("*.py"))
    out = []
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        out.append(f"{f} {st.st_size} {st.st_mtime_ns}")
    return out


def inputs_key(path: Path, content: bytes) -> str:
    """A SHA-256 hex digest of everything reading the lock at ``path`` (holding ``content``) depends on."""
    from envtool import __version__

    h = hashlib.sha256()
    for part in (f"format {FORMAT}", f"envtool {__version__}", f"python {sys.version}", *_code_stamps(),
                 f"path {os.path.abspath(path)}"):
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    h.update(hashlib.sha256(content).digest())
    return h.hexdigest()


def _file(path: Path) -> Path:
    from envtool.core.paths import cache_root

    name = hashlib.sha256(os.fsencode(os.path.abspath(path))).hexdigest()[:32]
    return cache_root() / SUBDIR / f"{name}.json"


def to_json(data: LockData) -> Dict[str, Any]:
    """``data`` as a JSON-ready mapping (:func:`from_json` reads it back)."""
    return {
        "packages": [[p.manager, p.name, p.version, p.platform, p.url, p.sha256, p.md5, p.build,
                      [list(d) for d in p.dependencies], p.built] for p in data.packages],
        "platforms": list(data.platforms), "channels": list(data.channels),
        "content_hash": [list(x) for x in data.content_hash], "spec": data.spec, "spec_hash": data.spec_hash,
        "site": data.site, "kind": data.kind, "engine": data.engine, "sources": list(data.sources),
        "interpreter": data.interpreter.to_text() if data.interpreter is not None else None,
        "spec_fields": [list(x) for x in data.spec_fields], "pip_indexes": [list(x) for x in data.pip_indexes],
        "base": None if data.base is None else {"kind": data.base.kind, "prefix": data.base.prefix,
                                                 "packages": [list(x) for x in data.base.packages],
                                                 "records": data.base.records},
    }


def _pairs(items) -> tuple:
    return tuple((str(a), str(b)) for a, b in items)


def from_json(d: Dict[str, Any]) -> LockData:
    """The :class:`LockData` :func:`to_json` wrote.

    Raises:
        KeyError, TypeError, ValueError: not what :func:`to_json` writes.
    """
    from envtool.core.platforms import optional_interpreter

    def strs(items) -> tuple:
        if not all(isinstance(x, str) for x in items):
            raise TypeError("expected strings")
        return tuple(items)

    packages = []
    for row in d["packages"]:
        manager, name, version, platform, url, sha256, md5, build, deps, built = row
        packages.append(LockedPackage(manager=manager, name=name, version=version, platform=platform, url=url,
                                      sha256=sha256, md5=md5, build=build, dependencies=_pairs(deps), built=built))
        if not all(isinstance(v, str) for v in (manager, name, version, platform, url, sha256, md5, build, built)):
            raise TypeError("expected strings")
    b = d["base"]
    base = None if b is None else BaseSet(kind=str(b["kind"]), prefix=str(b["prefix"]),
                                          packages=_pairs(b["packages"]), records=str(b["records"]))
    interp = d["interpreter"]
    return LockData(packages=tuple(packages), platforms=strs(d["platforms"]), channels=strs(d["channels"]),
                    content_hash=_pairs(d["content_hash"]), spec=str(d["spec"]), spec_hash=str(d["spec_hash"]),
                    site=str(d["site"]), kind=str(d["kind"]), engine=str(d["engine"]), sources=strs(d["sources"]),
                    interpreter=optional_interpreter(interp) if isinstance(interp, str) else None,
                    spec_fields=_pairs(d["spec_fields"]), pip_indexes=_pairs(d["pip_indexes"]), base=base)


def read(path: Path, key: str) -> Optional[LockData]:
    """The lock remembered for ``path`` under ``key`` (:func:`inputs_key`), or None (none, another
    key, not trusted, malformed)."""
    try:
        fd = os.open(_file(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022 \
                or st.st_size > MAX_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = json.loads(f.read(MAX_BYTES + 1))
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
            return None
        return from_json(data["lock"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    finally:
        os.close(fd)


def write(path: Path, key: str, lock: LockData) -> bool:
    """Remember ``lock`` as read from ``path`` under ``key`` (written beside, then renamed: a reader
    sees the old file or the new one). Returns whether it was written; never raises."""
    from envtool.core.errors import EnvtoolError
    from envtool.core.paths import cache_dir

    try:
        d = cache_dir(SUBDIR)
        final = _file(path)
        tmp = d / f".{final.name}.tmp-{os.getpid()}"
        payload = json.dumps({"format": FORMAT, "key": key, "lock": to_json(lock)})
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(payload)
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return True
    except (OSError, EnvtoolError, ValueError):
        return False
