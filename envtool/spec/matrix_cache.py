"""``envtool specs``'s release matrix, remembered between runs (``<cache>/specs/matrix.json``).

Reading the catalog means parsing every spec and site file (PyYAML) and every pin (py-rattler's
``MatchSpec``, pypa ``packaging``): about 0.3 s of a 0.4 s run on a quiet machine, most of it
importing those libraries. The rows depend only on inputs that can be named, so a run whose
inputs are the ones the remembered table was made from prints that table and imports none of
them — as CPython reuses a ``.pyc`` whose source is unchanged (PEP 3147,
https://peps.python.org/pep-3147/). The inputs (:func:`inputs_key`):

* the content (SHA-256) of every spec and site file found, with its name and path;
* every ``ENVTOOL_*`` environment variable (but the run's own marker, :data:`RUN_VARIABLES`);
* envtool's version and the interpreter's, and the size and modification time of each source
  file of :mod:`envtool.spec` and :mod:`envtool.core` and of the libraries that parse the files
  (py-rattler, ``packaging``, PyYAML): another envtool or library reads the files anew.

A table is remembered only when every file loaded (a bad file is reported on every run). The file
is used only when it is a regular file of the current user that nobody else can write, reached
without following a link, and holds what :func:`write` writes; anything else is ignored and the
catalog is read as before. Failing to write it changes nothing but the next run's speed.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

#: bump when what :func:`write` stores changes.
FORMAT = 1
#: the file, below the cache root.
SUBDIR, NAME = "specs", "matrix.json"
#: the largest file :func:`read` reads (bytes): a catalog of some hundred specs is ~100 kB.
MAX_BYTES = 8 << 20
#: ``ENVTOOL_*`` variables that are not inputs: each run's own marker (:data:`envtool.core.procs.BUILD_MARKER`,
#: set by the CLI in every run; not imported here, that module is not light).
RUN_VARIABLES = frozenset({"ENVTOOL_BUILD"})
#: libraries whose parsing decides whether a file loads and what its row says.
LIBRARIES = ("rattler", "packaging", "yaml")


def _code_stamps() -> List[str]:
    """``path size mtime_ns`` of each source file the rows are computed with (see the module)."""
    import importlib.util

    here = Path(__file__).resolve().parent          # envtool/spec
    files = sorted(list(here.rglob("*.py")) + list((here.parent / "core").glob("*.py")))
    for name in LIBRARIES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin:
            files.append(Path(spec.origin))
    out = []
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        out.append(f"{f} {st.st_size} {st.st_mtime_ns}")
    return out


def inputs_key(spec_files: Mapping[str, Path], site_files: Mapping[str, Path]) -> str:
    """A SHA-256 hex digest of everything the matrix of ``spec_files`` and ``site_files`` depends on.

    Args:
        spec_files: spec name → file (:func:`envtool.spec.search.available`).
        site_files: site name → file (the same, for ``sites``).
    Returns:
        64 hex digits.
    Raises:
        OSError: a file cannot be read (the caller reads the catalog as before, which reports it).
    """
    from envtool import __version__

    h = hashlib.sha256()
    for part in (f"format {FORMAT}", f"envtool {__version__}", f"python {sys.version}", *_code_stamps(),
                 *(f"env {k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("ENVTOOL_") and k not in RUN_VARIABLES)):
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    for kind, files in (("spec", spec_files), ("site", site_files)):
        for name, path in sorted(files.items()):
            h.update(f"{kind} {name} {path}".encode("utf-8", "surrogateescape") + b"\0")
            h.update(hashlib.sha256(Path(path).read_bytes()).digest())
    return h.hexdigest()


def _path() -> Path:
    from envtool.core.paths import cache_root

    return cache_root() / SUBDIR / NAME


def read(key: str, fields: Iterable[str]) -> Optional[Tuple[List[Dict[str, str]], Dict[str, Optional[str]]]]:
    """The remembered ``(rows, retired)`` for ``key``, or None (none, another key, not trusted, malformed).

    Args:
        key: :func:`inputs_key` of this run.
        fields: the names every row must have (``envtool.spec.table.Row``'s fields).
    Returns:
        rows as ``{field: str}`` mappings in table order, and site name → retirement line or None.
    """
    try:
        fd = os.open(_path(), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022 \
                or st.st_size > MAX_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = json.loads(f.read(MAX_BYTES + 1))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    want = set(fields)
    try:
        if data.get("format") != FORMAT or data.get("key") != key:
            return None
        rows, retired = data["rows"], data["retired"]
        if not (isinstance(rows, list) and isinstance(retired, dict)):
            return None
        if not all(isinstance(r, dict) and set(r) == want and all(isinstance(v, str) for v in r.values())
                   for r in rows):
            return None
        if not all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in retired.items()):
            return None
    except (AttributeError, KeyError, TypeError):
        return None
    return rows, retired


def write(key: str, rows: List[Dict[str, str]], retired: Mapping[str, Optional[str]]) -> bool:
    """Remember ``rows`` and ``retired`` for ``key`` (written beside, then renamed: a reader sees
    the old file or the new one). Returns whether it was written; never raises."""
    from envtool.core.errors import EnvtoolError
    from envtool.core.paths import cache_dir

    try:
        d = cache_dir(SUBDIR)
        tmp = d / f".{NAME}.tmp-{os.getpid()}"
        payload = json.dumps({"format": FORMAT, "key": key, "rows": rows, "retired": dict(retired)})
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(payload)
            os.replace(tmp, d / NAME)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return True
    except (OSError, EnvtoolError):
        return False


def rows_for_json(rows: List[Dict[str, str]], retired: Mapping[str, Optional[str]]) -> List[Dict[str, Any]]:
    """``specs --json``'s list: each row with ``site_retired`` (the first of its sites that is retired)."""
    return [{**r, "site_retired": next((retired[n] for n in r["site"].split(",") if retired.get(n)), None)}
            for r in rows]
