"""Clone a (read-only) conda environment, or layer on a module-provided Python.

What ``conda create --clone`` leaves out, this does (issue 4):

1. install exactly the source's package records (``conda-meta/*.json``: same builds, same
   URLs) with py-rattler, taking extracted packages from existing package caches first —
   read-only caches are *copied* into envtool's writable cache, never handed to the installer,
   because as root py-rattler would write ``.lock`` files into them and hard-link their files
   (measured with py-rattler 0.28) — and from the record's URL otherwise;
2. copy what conda does not track (pip-installed packages, files users added) with the old
   prefix replaced by the new one in text files; binary files that embed the old prefix are
   copied and listed as warnings;
3. carry ``conda-meta/pinned`` and ``conda-meta/history`` (with a clone entry appended);
   ``etc/conda/activate.d`` scripts come with their packages or as untracked files;
4. verify: the target's records equal the source's, the source is unchanged (fingerprint
   before and after: sha256 of every file, or ``stat`` data including ctime, which any write
   or link changes — ``chmod a-w`` does not stop root), and ``importlib.metadata`` sees the
   same distributions in both.

A venv-style source (a module's Python with no ``conda-meta``) is cloned as a layer
(``python -m venv --system-site-packages``, NERSC's documented way to extend its ``pytorch``
module: docs.nersc.gov, "Installing libraries you need in addition to the provided PyTorch")
or as a full copy with prefixes rewritten.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from envtool.core import external
from envtool.core.errors import EnvtoolError, UsageError
from envtool.core.prefix import CONDA_META, PrefixData

_CHUNK = 1 << 20


# --------------------------------------------------------------------------- source lookup
def envs_dirs() -> List[Path]:
    """Directories that hold named conda envs, in lookup order.

    ``$CONDA_ENVS_PATH`` and ``$CONDA_ENVS_DIRS`` (colon-separated; conda's documented
    variables), ``~/.conda/envs``, ``$CONDA_ROOT/envs``, the root of ``$CONDA_EXE``
    (``<root>/bin/conda`` → ``<root>/envs``), and ``<root>/envs`` of ``$CONDA_PREFIX``'s root.
    """
    out: List[Path] = []
    for var in ("CONDA_ENVS_PATH", "CONDA_ENVS_DIRS"):
        out += [Path(p) for p in os.environ.get(var, "").split(os.pathsep) if p]
    out.append(Path.home() / ".conda" / "envs")
    if os.environ.get("CONDA_ROOT"):
        out.append(Path(os.environ["CONDA_ROOT"]) / "envs")
    if os.environ.get("CONDA_EXE"):
        out.append(Path(os.environ["CONDA_EXE"]).resolve().parent.parent / "envs")
    seen, uniq = set(), []
    for p in out:
        if str(p) not in seen:
            seen.add(str(p))
            uniq.append(p)
    return uniq


def resolve_source(source: str) -> Path:
    """The prefix of clone source ``source``.

    Args:
        source: ``""`` (the active env, ``$CONDA_PREFIX``), a prefix (contains ``/`` or is an
            existing directory), or an env name looked up in :func:`envs_dirs` (and ``base``:
            ``$CONDA_ROOT`` / the root of ``$CONDA_EXE``).
    Returns:
        the absolute prefix (not resolved through symlinks).
    Raises:
        UsageError: nothing found, or the directory is neither a conda env nor a Python prefix.
    """
    if not source:
        active = os.environ.get("CONDA_PREFIX")
        if not active:
            raise UsageError("no clone source: give one (--clone SOURCE), set the spec's site.base_env, "
                             "or load the module that provides the environment ($CONDA_PREFIX is unset)")
        prefix = Path(active)
    elif "/" in source or Path(source).is_dir():
        prefix = Path(os.path.abspath(os.path.expanduser(source)))
    else:
        candidates = [d / source for d in envs_dirs()]
        if source == "base":
            root = os.environ.get("CONDA_ROOT") or (os.path.dirname(os.path.dirname(os.environ["CONDA_EXE"]))
                                                    if os.environ.get("CONDA_EXE") else "")
            if root:
                candidates.insert(0, Path(root))
        found = [c for c in candidates if PrefixData(c).is_conda]
        if not found:
            raise UsageError(f"clone source {source!r}: no conda env of that name in "
                             + ", ".join(str(d) for d in envs_dirs())
                             + " (set CONDA_ENVS_PATH, or give the env's prefix)")
        prefix = found[0]
    if not prefix.is_dir():
        raise UsageError(f"clone source {prefix}: no such directory")
    if source_kind(prefix) is None:
        raise UsageError(f"clone source {prefix}: neither a conda env (no conda-meta/) nor a Python prefix "
                         "(no bin/python)")
    return prefix


def source_kind(prefix: Path) -> Optional[str]:
    """``conda`` (has ``conda-meta/``), ``venv`` (a Python prefix without it), or None."""
    data = PrefixData(Path(prefix))
    if data.is_conda:
        return "conda"
    return "venv" if data.find_python() is not None else None


# --------------------------------------------------------------------------- fingerprints
def fingerprint(root: Path, content: bool = True) -> Dict[str, tuple]:
    """What a directory tree is, file by file, to prove it did not change.

    Args:
        root: the tree (symlinks are recorded, not followed).
        content: True: ``(type, mode, size, sha256)`` per file (reads every byte). False:
            ``(type, mode, size, mtime_ns, ctime_ns, nlink, inode)`` — ctime moves on any write,
            chmod or new hard link, even by root, so this is a cheap but strict check.
    Returns:
        relative path → tuple (``"."`` is the root itself).
    """
    root = Path(root)
    if not content and shutil.which("find"):
        return _stat_fingerprint_find(root)
    out: Dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [""] + dirnames + filenames if dirpath == str(root) else dirnames + filenames:
            path = os.path.join(dirpath, name) if name else dirpath
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            kind = "l" if stat.S_ISLNK(st.st_mode) else "d" if stat.S_ISDIR(st.st_mode) else "f"
            if not content:
                out[rel] = (kind, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_nlink, st.st_ino)
            elif kind == "l":
                out[rel] = (kind, os.readlink(path))
            elif kind == "d":
                out[rel] = (kind, st.st_mode)
            else:
                h = hashlib.sha256()
                with open(path, "rb") as fh:
                    for chunk in iter(lambda: fh.read(_CHUNK), b""):
                        h.update(chunk)
                out[rel] = (kind, st.st_mode, st.st_size, h.hexdigest())
    return out


def _stat_fingerprint_find(root: Path) -> Dict[str, tuple]:
    """The ``content=False`` fingerprint read with one GNU ``find -printf`` (about 5x faster than os.walk).

    Fields: type, mode (octal), size, mtime and ctime (seconds with nanoseconds), link count, inode.
    """
    import subprocess

    proc = subprocess.run(["find", str(root), "-printf", r"%P\0%y %m %s %T@ %C@ %n %i\0"],
                          capture_output=True, check=True)
    parts = proc.stdout.split(b"\0")
    out: Dict[str, tuple] = {}
    for name, fields in zip(parts[0::2], parts[1::2]):
        out[os.fsdecode(name) or "."] = tuple(fields.decode().split())
    return out


def fingerprint_diff(before: Dict[str, tuple], after: Dict[str, tuple], limit: int = 20) -> List[str]:
    """Paths added, removed or changed between two :func:`fingerprint` results (at most ``limit``)."""
    out = [f"+ {p}" for p in sorted(set(after) - set(before))]
    out += [f"- {p}" for p in sorted(set(before) - set(after))]
    out += [f"~ {p}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    return out[:limit]


# --------------------------------------------------------------------------- package caches
def dist_name(record) -> str:
    """``name-version-build``: the directory name of an extracted package in a conda/rattler cache."""
    return f"{record.name.normalized}-{record.version}-{record.build}"


def source_pkgs_dirs(source: Path, records: Sequence[Any]) -> List[Path]:
    """Package caches that may hold the source's extracted packages, in lookup order.

    The parents of each record's ``extracted_package_dir`` (conda and py-rattler write it),
    ``$CONDA_PKGS_DIRS``, ``<source>/pkgs``, ``<root>/pkgs`` for a source under
    ``<root>/envs/``, and ``~/.conda/pkgs``. Only existing directories this user can reach are
    returned (a shared environment's records name the admin's cache, often private to them).
    """
    cands: List[Path] = []
    for r in records:
        d = getattr(r, "extracted_package_dir", None)
        if d:
            cands.append(Path(d).parent)
    cands += [Path(p) for p in os.environ.get("CONDA_PKGS_DIRS", "").split(os.pathsep) if p]
    cands.append(Path(source) / "pkgs")
    if Path(source).parent.name == "envs":
        cands.append(Path(source).parent.parent / "pkgs")
    cands.append(Path.home() / ".conda" / "pkgs")
    out, seen = [], set()
    for c in cands:
        try:
            usable = c.is_dir() and os.access(c, os.R_OK | os.X_OK)
        except OSError:  # a parent this user may not enter (PermissionError)
            usable = False
        if str(c) not in seen and usable:
            seen.add(str(c))
            out.append(c)
    return out


def _valid_extracted(path: Path, record) -> bool:
    """``path`` is an extracted copy of ``record`` (its ``info/index.json`` names the same build)."""
    import json

    try:
        index = json.loads((path / "info" / "index.json").read_text())
    except (OSError, ValueError):
        return False
    return (index.get("name") == record.name.normalized and str(index.get("version")) == str(record.version)
            and index.get("build") == str(record.build))


@dataclass
class SeedReport:
    """What :func:`seed_cache` did.

    Attributes:
        cached: packages already in the writable cache.
        copied: packages copied from another (read-only) cache: dist name → source directory.
        missing: packages found in no cache (py-rattler fetches them from their URL).
        bytes_copied: bytes copied.
        stale_removed: staging directories of dead envtool processes that were removed.
    """

    cached: List[str] = field(default_factory=list)
    copied: Dict[str, str] = field(default_factory=dict)
    missing: List[str] = field(default_factory=list)
    bytes_copied: int = 0
    stale_removed: List[str] = field(default_factory=list)


def _parallel_cp(sources: Sequence[Path], dest: Path, jobs: int) -> None:
    """``cp -a`` ``sources`` into ``dest`` with ``jobs`` concurrent ``cp`` processes (round-robin batches).

    Raises:
        EnvtoolError: a ``cp`` failed (its stderr is in the message).
    """
    import subprocess

    from envtool.core import procs as children

    jobs = max(1, min(jobs, len(sources)))
    batches = [list(sources[i::jobs]) for i in range(jobs)]
    running = []
    try:
        for batch in batches:
            for j in range(0, len(batch), 500):
                running.append(children.popen(["cp", "-a", *[str(c) for c in batch[j:j + 500]], str(dest)],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
                if len(running) >= jobs:
                    _wait_cp(running.pop(0), dest)
        while running:
            _wait_cp(running.pop(0), dest)
    except BaseException:  # an error or a signal: no cp may outlive us
        for p in running:
            children.kill_group(p)
        raise


def _wait_cp(proc, dest: Path) -> None:
    from envtool.core import procs as children

    _, err = proc.communicate()
    children.forget(proc)
    if proc.returncode != 0:
        raise EnvtoolError(f"copying packages into the cache {dest.parent} failed: {external.decode(err).strip()}")


def seed_cache(records: Sequence[Any], cache_dir: Path, pkgs_dirs: Sequence[Path],
               jobs: Optional[int] = None) -> SeedReport:
    """Copy the records' extracted packages from other caches into the writable ``cache_dir``.

    Other caches are only read (one ``cp -a`` for all packages, into a staging directory of
    ``cache_dir``; then ``chmod -R u+w`` on the copies, so a read-only source cache does not make
    the clone read-only, and a rename of each package into place). A package already in
    ``cache_dir`` is left as is (py-rattler validates it when it links).

    Args:
        records: the records to install.
        cache_dir: envtool's writable package cache.
        pkgs_dirs: caches to read from, in order.
        jobs: concurrent ``cp`` processes (default: CPU count, at most 4).
    Returns:
        a :class:`SeedReport`.
    Raises:
        EnvtoolError: ``cp`` failed (disk full, unreadable cache).
    """

    jobs = jobs or min(4, os.cpu_count() or 1)
    from envtool.core.paths import ensure_dir

    cache_dir = ensure_dir(Path(cache_dir))
    report = SeedReport()
    todo: List[Tuple[str, Path]] = []
    own_cache = cache_dir.resolve()
    for r in records:
        dist = dist_name(r)
        own = cache_dir / dist
        if own.is_dir() and _valid_extracted(own, r):
            report.cached.append(dist)
            continue
        for pkgs in pkgs_dirs:
            cand = Path(pkgs) / dist
            if Path(pkgs).resolve() != own_cache and _valid_extracted(cand, r):
                todo.append((dist, cand))
                break
        else:
            report.missing.append(dist)
    from envtool.core import procs as children

    for stale in children.remove_stale(cache_dir, ".envtool-seed-"):
        report.stale_removed.append(str(stale))
    if not todo:
        return report
    staging = cache_dir / f".envtool-seed-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    with children.scratch(staging):
        _seed_from(todo, staging, cache_dir, jobs, report)
    return report


def _seed_from(todo: List[Tuple[str, Path]], staging: Path, cache_dir: Path, jobs: int, report: SeedReport) -> None:
    """Copy ``todo`` (dist name, source directory) through ``staging`` into ``cache_dir`` (see :func:`seed_cache`)."""
    import subprocess

    try:
        _parallel_cp([c for _, c in todo], staging, jobs=jobs)
        subprocess.run(["chmod", "-R", "u+w", str(staging)], check=True, capture_output=True)
        for dist, cand in todo:
            own = cache_dir / dist
            if own.exists():
                shutil.rmtree(own, ignore_errors=True)
            os.rename(staging / dist, own)
            report.copied[dist] = str(cand)
            for dirpath, _, filenames in os.walk(own):
                for n in filenames:
                    report.bytes_copied += os.lstat(os.path.join(dirpath, n)).st_size
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --------------------------------------------------------------------------- untracked files
def tracked_paths(records: Iterable[Any]) -> Set[str]:
    """Paths (relative to the prefix) that the records installed (``files`` of each record)."""
    out: Set[str] = set()
    for r in records:
        out.update(str(p) for p in r.files)
    return out


@dataclass
class CopyReport:
    """What :func:`copy_untracked` did (paths relative to the prefix).

    Attributes:
        copied: untracked files and symlinks copied.
        rewritten: text files whose old prefix was replaced.
        binaries: binary files that still embed the old prefix (warnings: they break if the
            source moves or goes away).
        carried: ``conda-meta`` files carried (``pinned``, ``history``).
    """

    copied: List[str] = field(default_factory=list)
    rewritten: List[str] = field(default_factory=list)
    binaries: List[str] = field(default_factory=list)
    carried: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"copied": len(self.copied), "rewritten": self.rewritten, "binaries": self.binaries,
                "carried": self.carried}


def _old_prefixes(source: Path) -> List[bytes]:
    """The spellings of the source prefix to replace: as given and resolved (longest first)."""
    names = {str(source), os.path.realpath(source)}
    return sorted((os.fsencode(n) for n in names), key=len, reverse=True)


def copy_untracked(source: Path, target: Path, new_prefix: Path, tracked: Set[str],
                   max_text_bytes: int = 8 << 20) -> CopyReport:
    """Copy files of ``source`` that no record tracks into ``target``.

    ``conda-meta/`` is skipped (see :func:`carry_meta`); files already present in ``target``
    are left alone. In text files (no NUL byte, at most ``max_text_bytes``) every spelling of
    the source prefix becomes ``new_prefix``; absolute symlinks into the source are re-pointed
    into ``new_prefix``.

    Args:
        source: the source prefix (only read).
        target: the directory being built.
        new_prefix: the prefix the clone will live at (may differ from ``target``).
        tracked: :func:`tracked_paths` of the source's records.
        max_text_bytes: bigger files are copied as is (and listed as binaries if they embed it).
    Returns:
        a :class:`CopyReport`.
    """
    source, target = Path(source), Path(target)
    olds = _old_prefixes(source)
    new_b = os.fsencode(str(new_prefix))
    report = CopyReport()
    for dirpath, dirnames, filenames in os.walk(source):
        rel_dir = os.path.relpath(dirpath, source)
        if rel_dir == CONDA_META or rel_dir.startswith(CONDA_META + os.sep):
            dirnames[:] = []
            continue
        for name in sorted(filenames) + sorted(d for d in dirnames if os.path.islink(os.path.join(dirpath, d))):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if rel in tracked:
                continue
            src = os.path.join(dirpath, name)
            dst = target / rel
            if os.path.lexists(dst):
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            if os.path.islink(src):
                link = os.readlink(src)
                for old in olds:
                    if os.fsencode(link).startswith(old):
                        link = os.fsdecode(new_b + os.fsencode(link)[len(old):])
                        break
                os.symlink(link, dst)
                report.copied.append(rel)
                continue
            st = os.stat(src)
            if st.st_size > max_text_bytes:  # large: copied as is, scanned in overlapping chunks
                shutil.copyfile(src, dst)
                os.chmod(dst, stat.S_IMODE(st.st_mode) | stat.S_IWUSR)
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
                if _file_contains(src, olds):
                    report.binaries.append(rel)
                report.copied.append(rel)
                continue
            with open(src, "rb") as fh:
                data = fh.read()
            hit = next((o for o in olds if o in data), None)
            if hit is not None and b"\0" not in data and len(data) <= max_text_bytes:
                for old in olds:
                    data = data.replace(old, new_b)
                report.rewritten.append(rel)
            elif hit is not None:
                report.binaries.append(rel)
            with open(dst, "wb") as out:
                out.write(data)
            os.chmod(dst, stat.S_IMODE(st.st_mode) | stat.S_IWUSR)
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
            report.copied.append(rel)
    # directories users added (empty ones too)
    for dirpath, dirnames, _ in os.walk(source):
        rel_dir = os.path.relpath(dirpath, source)
        if rel_dir.split(os.sep)[0] == CONDA_META:
            dirnames[:] = []
            continue
        (target / rel_dir).mkdir(parents=True, exist_ok=True)
    return report


def _file_contains(path: str, needles: Sequence[bytes]) -> bool:
    """Whether the file at ``path`` contains any of ``needles`` (read in 1 MiB chunks)."""
    keep = max(len(n) for n in needles)
    tail = b""
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            buf = tail + chunk
            if any(n in buf for n in needles):
                return True
            tail = buf[-keep:]
    return False


def carry_meta(source: Path, target: Path, source_label: str, new_prefix: Path, report: CopyReport) -> None:
    """Carry ``conda-meta/pinned`` and ``conda-meta/history`` (plus a clone entry) to ``target``.

    The history entry follows conda's format (``==> YYYY-MM-DD HH:MM:SS <==`` then ``# cmd:``
    lines; conda/history.py).
    """
    smeta, tmeta = PrefixData(Path(source)).conda_meta, PrefixData(Path(target)).conda_meta
    tmeta.mkdir(parents=True, exist_ok=True)
    if (smeta / "pinned").is_file():
        shutil.copyfile(smeta / "pinned", tmeta / "pinned")
        report.carried.append("conda-meta/pinned")
    history = (smeta / "history").read_text(errors="replace") if (smeta / "history").is_file() else ""
    if history and not history.endswith("\n"):
        history += "\n"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    history += (f"==> {stamp} <==\n# cmd: envtool clone {source_label} --prefix {new_prefix}\n"
                f"# envtool: cloned from {source}\n")
    (tmeta / "history").write_text(history)
    report.carried.append("conda-meta/history")


# --------------------------------------------------------------------------- verification
def pip_view(prefix: Path) -> Dict[str, str]:
    """``importlib.metadata``'s view of ``prefix``'s site-packages: name → version."""
    from envtool.core.prefix import PrefixData

    return PrefixData(prefix).versions()


@dataclass
class VerifyReport:
    """The clone's checks. Each list is empty when the check passed."""

    records: List[str] = field(default_factory=list)
    source_changed: List[str] = field(default_factory=list)
    pip_view: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.records or self.source_changed or self.pip_view)

    def to_dict(self) -> Dict[str, Any]:
        return {"ok": self.ok, "records": self.records, "source_changed": self.source_changed,
                "pip_view": self.pip_view}


def compare_records(source_records: Sequence[Any], target_records: Sequence[Any]) -> List[str]:
    """Differences between two record lists (name, version, build, URL): ``- …`` only in source, ``+ …`` only in target."""
    from envtool.engines.rattler_api import record_key

    a = {record_key(r) for r in source_records}
    b = {record_key(r) for r in target_records}
    return [f"- {' '.join(k[:3])} ({k[3]})" for k in sorted(a - b)] + \
           [f"+ {' '.join(k[:3])} ({k[3]})" for k in sorted(b - a)]


def compare_pip_views(a: Dict[str, str], b: Dict[str, str]) -> List[str]:
    """Distributions that differ: ``name: source-version != target-version`` (``-`` when absent)."""
    return [f"{n}: {a.get(n, '-')} != {b.get(n, '-')}" for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
