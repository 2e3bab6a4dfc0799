"""``envtool pack``: one file (a tar archive or a squashfs image) from an environment, carrying its
lockfile and SBOM, for staging to node-local storage at job start (issue 25, item 1).

What is packable, and how:

* **A conda environment** (``conda-meta/`` with package records, as py-rattler makes them) goes
  through conda-pack (https://conda.github.io/conda-pack/, PyPI ``conda-pack``), which reads
  ``conda-meta`` and knows which files hold the build prefix. A tar is relocated where it is
  unpacked by conda-pack's ``bin/conda-unpack``; a squashfs image is read-only once mounted, so it
  is relocated while packing to the directory it will be mounted at (conda-pack's
  ``dest_prefix``). conda-pack refuses an environment whose files do not match its records
  (its message is passed on).
* **A venv** (PEP 405: ``pyvenv.cfg``, https://peps.python.org/pep-0405/) is packed by envtool:
  the text files that name the prefix (script ``#!`` lines, ``bin/activate*``, ``pyvenv.cfg``) are
  listed in the pack's manifest and rewritten by ``.envtool/unpack.py`` where the tar is unpacked,
  or while packing for a squashfs image (mounted at ``dest_prefix``); absolute symbolic links into
  the prefix become relative ones. A venv has no interpreter of its own: ``bin/python`` leads to
  the base interpreter named by ``pyvenv.cfg`` (``home``, and ``executable`` since Python 3.11;
  https://docs.python.org/3/library/venv.html), which must exist **at the same path on every
  compute node** (a module's Python, or a Python installed on a file system every node mounts).
  The base must exist here; its path is recorded in the manifest (``base_python``). Refused, with
  the reason (exit 2): a venv whose base interpreter is missing, one that also imports the base's
  own site-packages (``include-system-site-packages = true``: those are not in the pack), one with
  a binary file naming the prefix (an RPATH or compiled-in path cannot be rewritten), one whose
  ``.pth`` file adds a directory outside the prefix (an editable install: its source is not in
  the pack).

Every pack holds ``.envtool/pack.json`` (the manifest: kind, format, source prefix, lockfile and
its sha256, SBOM, base interpreter, what to run after unpacking), the environment's lockfile
(``conda-lock.yml`` as the prefix has it; a snapshot made now, :func:`envtool.lock.build.lock_prefix`,
when it has none) and a CycloneDX SBOM (``.envtool/sbom.cdx.json``, :mod:`envtool.sbom`). The lock
hash is the sha256 of that lockfile, the same hash ``validate``'s pre-flight compares on every node.

Nothing half-written is left: the file is built under a private directory beside the output
(``.NAME.envtool-pack-PID``, removed on the way out, and by the next pack when the process was
killed) and renamed into place only when complete.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from envtool.core import procs, squashfs
from envtool.core.errors import CheckFailed, UsageError
from envtool.core.prefix import PYTHON, PrefixData

FORMATS = ("tar", "squashfs")
#: where the manifest, the SBOM and the relocation script live inside a pack
MANIFEST = ".envtool/pack.json"
SBOM = ".envtool/sbom.cdx.json"
UNPACK_SCRIPT = ".envtool/unpack.py"
LOCK_NAMES = ("conda-lock.yml", ".envtool/conda-lock.yml")
_TMP_PREFIX = ".envtool-pack-"

Progress = Callable[[str], None]


class NotPackable(UsageError):
    """The environment cannot be packed; the message says why (exit 2)."""


@dataclass
class PackResult:
    """What :func:`pack` made.

    Attributes:
        path: the pack file (absolute).
        format: ``tar`` or ``squashfs``.
        kind: ``conda`` or ``venv``.
        lock_sha256: sha256 (hex) of the lockfile inside the pack.
        size: size of the file (bytes).
        seconds: wall-clock time the pack took (s).
        prefix: the source environment.
        lock: the lockfile's path inside the pack; lock_source: ``prefix`` (the environment's own)
            or ``snapshot`` (made by this pack).
        base_python: a venv's base interpreter, which must exist at this path on the compute
            nodes; None for a conda environment.
        dest_prefix: the directory a squashfs image must be mounted at (None for a tar).
        unpack: the command to run in the unpacked directory after a tar is unpacked (words,
            paths relative to it), [] when none is needed.
        notes: what the user must know (the base interpreter requirement …).
    """

    path: Path
    format: str
    kind: str
    lock_sha256: str
    size: int
    seconds: float
    prefix: Path
    lock: str = "conda-lock.yml"
    lock_source: str = "prefix"
    base_python: Optional[str] = None
    dest_prefix: Optional[str] = None
    unpack: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready fields (paths as strings)."""
        d = asdict(self)
        d["path"], d["prefix"] = str(self.path), str(self.prefix)
        d["seconds"] = round(self.seconds, 3)
        return d


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def kind_of(prefix: Path) -> str:
    """``conda`` (``conda-meta/`` holds package records) or ``venv`` (``pyvenv.cfg`` without them).

    Raises:
        NotPackable: neither, or not a directory.
    """
    prefix = Path(prefix)
    if not prefix.is_dir():
        raise NotPackable(f"{prefix}: no such environment (not a directory)")
    data = PrefixData(prefix)
    if data.has_conda_records:
        return "conda"
    if data.is_venv:
        return "venv"
    raise NotPackable(f"{prefix}: not an environment envtool can pack: neither a conda environment "
                      f"(conda-meta/*.json) nor a venv (pyvenv.cfg)")


def _site_packages(prefix: Path) -> List[Path]:
    return sorted(p for p in (prefix / "lib").glob("python*/site-packages") if p.is_dir())


def _names_prefix(path: Path, needle: bytes) -> Tuple[bool, bool]:
    """(names the prefix, is binary) of one file, read in chunks with overlap."""
    binary, tail = False, b""
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                return False, binary
            binary = binary or b"\0" in chunk
            window = tail + chunk
            if needle in window:
                if not binary:  # a text file: read on for a NUL byte
                    for rest in iter(lambda: fh.read(1 << 20), b""):
                        if b"\0" in rest:
                            return True, True
                return True, binary
            tail = window[-(len(needle) - 1):]


def _record(rel: str) -> bool:
    """A file that records the source environment (its lockfile, ``.envtool/``): never rewritten (a
    rewritten lockfile would change its hash)."""
    return rel == "conda-lock.yml" or rel.startswith(".envtool/")


def scan_venv(prefix: Path) -> Tuple[List[str], List[str]]:
    """Files of a venv that name its prefix: ``(text files, binary files)``, paths relative to it.

    ``.pyc`` files (source paths for tracebacks only) and the environment's records (lockfile,
    ``.envtool/``) are not counted.
    """
    needle = str(prefix).encode()
    text: List[str] = []
    binary: List[str] = []
    for dirpath, dirnames, filenames in os.walk(prefix):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = str(path.relative_to(prefix))
            if name.endswith(".pyc") or _record(rel) or path.is_symlink() or not path.is_file():
                continue
            try:
                found, is_binary = _names_prefix(path, needle)
            except OSError:
                continue
            if found:
                (binary if is_binary else text).append(rel)
    return text, binary


def check_venv(prefix: Path) -> Tuple[str, List[str]]:
    """Whether a venv can be packed: its base interpreter, and the text files to relocate.

    Returns:
        ``(base interpreter path, text files naming the prefix)``.
    Raises:
        NotPackable: the reason (see the module docstring).
    """
    cfg = PrefixData(prefix).venv_config()
    home = cfg.get("home")
    if not home:
        raise NotPackable(f"{prefix / 'pyvenv.cfg'}: no 'home' (the base interpreter's directory): not a venv "
                          f"envtool can pack")
    exe = cfg.get("executable") or ""
    candidates = [exe] if exe else []
    link = PrefixData(prefix).python
    if link.is_symlink():
        candidates.append(os.path.realpath(link))
    candidates += [os.path.join(home, n) for n in ("python3", "python")]
    base = next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)
    if base is None:
        raise NotPackable(f"{prefix}: the venv's base interpreter is missing ({exe or home}, from pyvenv.cfg): "
                          f"a venv runs only where its base interpreter exists at that path; re-create the venv "
                          f"from a Python that every compute node has (a module's Python)")
    if os.path.realpath(base).startswith(str(Path(prefix).resolve()) + os.sep):
        base = os.path.realpath(base)
    if cfg.get("include-system-site-packages", "false").lower() == "true":
        raise NotPackable(f"{prefix}: the venv also imports the base interpreter's own site-packages "
                          f"(include-system-site-packages = true in pyvenv.cfg): those packages are not in the "
                          f"pack and may differ on the compute nodes; re-create it without "
                          f"--system-site-packages")
    for sp in _site_packages(prefix):
        for pth in sorted(sp.glob("*.pth")):
            for line in pth.read_text(errors="replace").splitlines():
                entry = line.strip()
                if not entry or entry.startswith(("#", "import ", "import\t")):
                    continue
                full = Path(entry) if os.path.isabs(entry) else sp / entry
                if not str(os.path.normpath(full)).startswith(str(prefix) + os.sep):
                    raise NotPackable(f"{pth}: adds {entry} to sys.path, outside the environment (an editable "
                                      f"install?): its files are not in the pack; install the package normally")
    text, binary = scan_venv(prefix)
    if binary:
        more = f" and {len(binary) - 5} more" if len(binary) > 5 else ""
        raise NotPackable(f"{prefix}: binary file(s) name the prefix and cannot be rewritten for another "
                          f"location: {', '.join(binary[:5])}{more}")
    return base, text


def _unpack_script() -> str:
    """``.envtool/unpack.py``: rewrite the source prefix to where the pack was unpacked, in the
    files the manifest lists (run with the environment's own Python, no envtool needed)."""
    return '''"""Written by envtool pack: relocate this unpacked venv (run once, after unpacking)."""
import json, os, sys

here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(here, ".envtool", "pack.json")) as fh:
    manifest = json.load(fh)
old, new = manifest["source_prefix"].encode(), here.encode()
for rel in manifest["relocate"]:
    path = os.path.join(here, rel)
    with open(path, "rb") as fh:
        data = fh.read()
    if old in data:
        tmp = path + ".unpack-tmp"
        with open(tmp, "wb") as fh:
            fh.write(data.replace(old, new))
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
'''


def _lock_for(prefix: Path, work: Path, progress: Progress) -> Tuple[Path, str, str]:
    """The environment's lockfile: ``(file to put in the pack, path inside the pack, source)``."""
    for name in LOCK_NAMES:
        if (prefix / name).is_file():
            return prefix / name, name, "prefix"
    from envtool.lock import build, lockio

    progress("no lockfile in the environment: snapshotting one")
    data = build.lock_prefix(prefix, lookup=False, progress=progress)
    out = work / "conda-lock.yml"
    lockio.write_lock(data, out)
    return out, "conda-lock.yml", "snapshot"


@contextmanager
def _workdir(out: Path) -> Iterator[Path]:
    """A private directory beside ``out`` (same file system: the final rename is atomic); leftovers
    of killed packs (their PID gone) are removed first."""
    stem = f".{out.name}{_TMP_PREFIX}"
    procs.remove_stale(out.parent, stem)
    work = out.parent / f"{stem}{os.getpid()}"
    procs.remove_path(work)
    work.mkdir(mode=0o700)
    with procs.scratch(work):
        try:
            yield work
        finally:
            procs.remove_path(work)


def unpacked_kib(prefix: Path) -> int:
    """Room the environment takes once unpacked: its files' sizes rounded up to 4 KiB blocks, plus
    one block per directory and symbolic link (KiB). Hard links count once."""
    total, seen = 0, set()
    for dirpath, dirnames, filenames in os.walk(prefix):
        total += 4 * (1 + len([d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]))
        for name in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += 4 * max(1, -(-st.st_size // 4096))
    return total


def default_output(prefix: Path, fmt: str) -> Path:
    """``./<prefix name>.tar`` or ``./<prefix name>.squashfs``."""
    return Path.cwd() / f"{Path(prefix).name}.{fmt}"


def output_path(prefix: Path, fmt: str, output: Optional[Path] = None, force: bool = False) -> Path:
    """The file :func:`pack` would write, checked as it checks it before packing (also what
    ``pack --dry-run`` reports).

    Args:
        prefix: the environment (absolute).
        fmt: ``tar`` or ``squashfs``.
        output: the file asked for (default :func:`default_output`).
        force: an existing file may be replaced.
    Returns:
        the absolute path.
    Raises:
        UsageError: its directory does not exist, it is a directory, it exists without ``force``,
            or it lies inside the environment (exit 2).
    """
    out = Path(os.path.abspath(output)) if output else default_output(prefix, fmt)
    if not out.parent.is_dir():
        raise UsageError(f"-o {out}: the directory {out.parent} does not exist")
    if out.is_dir():
        raise UsageError(f"-o {out}: is a directory; expected a file name")
    if (out.exists() or out.is_symlink()) and not force:
        raise UsageError(f"-o {out}: exists; remove it or give --force to replace it")
    if str(out).startswith(str(prefix) + os.sep):
        raise UsageError(f"-o {out}: inside the environment being packed; write it elsewhere")
    return out


def pack(prefix: Path, fmt: str, output: Optional[Path] = None, dest_prefix: Optional[str] = None,
         force: bool = False, progress: Progress = lambda s: None) -> PackResult:
    """Pack the environment at ``prefix`` into one file (see the module docstring).

    Args:
        prefix: the environment (a conda environment or a venv).
        fmt: ``tar`` (uncompressed, unpacked and relocated on the node) or ``squashfs`` (mounted
            read-only with squashfuse; relocated now to ``dest_prefix``).
        output: the file to write (default :func:`default_output`).
        dest_prefix: for ``squashfs``, the absolute directory it will be mounted at (default: the
            source prefix itself); ignored for ``tar``.
        force: replace an existing ``output``.
        progress: called with one line per phase.
    Returns:
        a :class:`PackResult`.
    Raises:
        NotPackable: the environment cannot be packed (the reason; exit 2).
        UsageError: a bad format, output or destination (exit 2).
        CheckFailed: conda-pack or mksquashfs failed (exit 1).
    """
    started = time.monotonic()
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    prefix = Path(os.path.abspath(prefix))
    kind = kind_of(prefix)
    out = output_path(prefix, fmt, output, force)
    dest = None
    if fmt == "squashfs":
        if shutil.which("mksquashfs") is None:
            raise UsageError("--format squashfs needs mksquashfs (Debian/Ubuntu: apt-get install squashfs-tools)")
        dest = os.path.normpath(dest_prefix) if dest_prefix else str(prefix)
        if not os.path.isabs(dest):
            raise UsageError(f"--dest-prefix {dest_prefix}: expected an absolute path (where the image is mounted)")
    base: Optional[str] = None
    relocate: List[str] = []
    if kind == "venv":
        progress(f"checking venv {prefix}")
        base, relocate = check_venv(prefix)
    with _workdir(out) as work:
        lock_file, lock_name, lock_source = _lock_for(prefix, work, progress)
        lock_sha = _sha256(lock_file)
        progress("writing the SBOM")
        from envtool.sbom import render, build_bom

        sbom = work / "sbom.cdx.json"
        sbom.write_text(render(build_bom(prefix)))
        from envtool import __version__

        manifest: Dict[str, Any] = {"manifest_version": 1, "envtool": __version__, "kind": kind, "format": fmt,
                                    "source_prefix": str(prefix), "dest_prefix": dest, "lock": lock_name,
                                    "lock_sha256": lock_sha,
                                    "lock_source": lock_source, "sbom": SBOM, "base_python": base,
                                    "relocate": relocate if fmt == "tar" else [],
                                    "unpack": [], "unpacked_kib": unpacked_kib(prefix),
                                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        extra: Dict[str, Path] = {SBOM: sbom}
        if lock_source == "snapshot":
            extra[lock_name] = lock_file
        built = work / f"pack.{fmt}"
        progress(f"packing {kind} environment {prefix} as {fmt}")
        if kind == "conda":
            manifest["unpack"] = [PYTHON, "bin/conda-unpack"] if fmt == "tar" else []
            _pack_conda(prefix, fmt, built, dest, manifest, extra, work)
        else:
            if fmt == "tar" and relocate:
                manifest["unpack"] = [PYTHON, UNPACK_SCRIPT]
            _pack_venv(prefix, fmt, built, dest, manifest, extra, relocate, work)
        os.chmod(built, 0o644 & ~_umask())
        os.replace(built, out)
    notes = []
    if base:
        notes.append(f"the venv's base interpreter {base} must exist at that path on every compute node")
    if dest:
        notes.append(f"mount the image at {dest}: its files name that directory")
    return PackResult(path=out, format=fmt, kind=kind, lock_sha256=lock_sha, size=out.stat().st_size,
                      seconds=time.monotonic() - started, prefix=prefix, lock=lock_name, lock_source=lock_source,
                      base_python=base, dest_prefix=dest, unpack=list(manifest["unpack"]), notes=notes)


def _umask() -> int:
    from envtool.core.atomic import umask_mode

    return 0o666 & ~umask_mode(0o666)


def _pack_conda(prefix: Path, fmt: str, built: Path, dest: Optional[str], manifest: dict, extra: Dict[str, Path],
                work: Path) -> None:
    """conda-pack's :class:`CondaEnv` of ``prefix`` plus the manifest and ``extra`` files."""
    try:
        import conda_pack
        from conda_pack.core import CondaEnv, File
    except ImportError:
        raise UsageError("packing a conda environment needs conda-pack (pip install conda-pack; envtool's "
                         "dependencies include it)") from None
    mpath = work / "pack.json"
    mpath.write_text(json.dumps(manifest, indent=1) + "\n")
    old_tmp = tempfile.tempdir
    tempfile.tempdir = str(work)  # conda-pack's own temporary file and squashfs staging: inside ours
    try:
        try:
            env = CondaEnv.from_prefix(str(prefix))
        except conda_pack.CondaPackException as exc:
            raise NotPackable(f"{prefix}: conda-pack cannot pack it: {exc}") from None
        files = [f for f in env.files if f.target not in extra and f.target != MANIFEST]
        files += [File(str(src), target, is_conda=False) for target, src in extra.items()]
        files.append(File(str(mpath), MANIFEST, is_conda=False))
        env = CondaEnv(env.prefix, files, env._excluded_files)
        try:
            env.pack(output=str(built), format=fmt, dest_prefix=dest, compress_level=4 if fmt == "squashfs" else 0,
                     n_threads=1)
        except conda_pack.CondaPackException as exc:
            raise NotPackable(f"{prefix}: conda-pack cannot pack it: {exc}") from None
        except subprocess.CalledProcessError as exc:
            raise CheckFailed(f"mksquashfs failed (exit {exc.returncode}) packing {prefix}") from None
    finally:
        tempfile.tempdir = old_tmp


def _walk(prefix: Path) -> Iterator[Tuple[Path, str]]:
    """``(path, relative name)`` of everything under ``prefix``, directories before their contents."""
    for dirpath, dirnames, filenames in os.walk(prefix):
        dirnames.sort()
        for name in sorted(dirnames) + sorted(filenames):
            path = Path(dirpath) / name
            yield path, str(path.relative_to(prefix))


def _relative_link(prefix: Path, path: Path) -> Optional[str]:
    """A relative target for an absolute symbolic link into ``prefix`` (None: keep it as it is)."""
    target = os.readlink(path)
    if os.path.isabs(target) and (target == str(prefix) or target.startswith(str(prefix) + os.sep)):
        return os.path.relpath(target, os.path.dirname(path))
    return None


def _pack_venv(prefix: Path, fmt: str, built: Path, dest: Optional[str], manifest: dict, extra: Dict[str, Path],
               relocate: List[str], work: Path) -> None:
    """A venv as a tar (relocated where unpacked) or a squashfs image (relocated to ``dest`` now)."""
    mdata = (json.dumps(manifest, indent=1) + "\n").encode()
    added = {MANIFEST, UNPACK_SCRIPT} | set(extra)
    if fmt == "tar":
        with tarfile.open(built, "w", format=tarfile.PAX_FORMAT) as tar:
            def add_bytes(name: str, data: bytes, mode: int = 0o644) -> None:
                ti = tarfile.TarInfo(name)
                ti.size, ti.mode, ti.mtime = len(data), mode, int(time.time())
                tar.addfile(ti, io.BytesIO(data))

            add_bytes(MANIFEST, mdata)  # first: a reader finds it without reading the whole archive
            add_bytes(UNPACK_SCRIPT, _unpack_script().encode())
            for name, src in extra.items():
                add_bytes(name, src.read_bytes())
            for path, rel in _walk(prefix):
                if rel in added:
                    continue
                ti = tar.gettarinfo(str(path), rel)
                if ti.issym():
                    ti.linkname = _relative_link(prefix, path) or ti.linkname
                if ti.isreg():
                    with open(path, "rb") as fh:
                        tar.addfile(ti, fh)
                else:
                    tar.addfile(ti)
        return
    root = work / "root"
    root.mkdir()
    needle, new = str(prefix).encode(), str(dest).encode()
    same_dev = os.stat(prefix).st_dev == os.stat(work).st_dev
    rewrite = set(relocate)
    for path, rel in _walk(prefix):
        if rel in added:
            continue
        target = root / rel
        if path.is_symlink():
            os.symlink(_relative_link(prefix, path) or os.readlink(path), target)
        elif path.is_dir():
            target.mkdir()
        elif rel in rewrite:
            target.write_bytes(path.read_bytes().replace(needle, new))
            shutil.copymode(path, target)
        elif path.is_file():
            try:
                if not same_dev:
                    raise OSError
                os.link(path, target)
            except OSError:
                shutil.copy2(path, target)
    for name, src in extra.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, root / name)
    (root / MANIFEST).parent.mkdir(parents=True, exist_ok=True)
    (root / MANIFEST).write_bytes(mdata)
    for d, _ in _walk(prefix):
        if d.is_dir() and not d.is_symlink():
            shutil.copystat(d, root / d.relative_to(prefix))
    shutil.copystat(prefix, root)
    argv = squashfs.mksquashfs_argv(root, built)
    proc = procs.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text, _ = proc.communicate()
    finally:
        procs.forget(proc)
    if proc.returncode != 0:
        raise CheckFailed(f"mksquashfs failed (exit {proc.returncode}): {text.strip()[-500:]}")


def read_manifest(path: Path) -> dict:
    """The manifest (``.envtool/pack.json``) of a pack file, read without unpacking it.

    Raises:
        UsageError: not a readable pack made by ``envtool pack`` (names the file).
    """
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--stage {path}: no such file (make one with 'envtool pack')")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    text = None
    if magic in (b"hsqs", b"sqsh"):
        if shutil.which("unsquashfs") is None:
            raise UsageError(f"--stage {path}: a squashfs image, and unsquashfs (squashfs-tools) is not here "
                             f"to read its manifest")
        proc = subprocess.run(["unsquashfs", "-cat", str(path), MANIFEST], capture_output=True, timeout=120)
        text = proc.stdout.decode(errors="replace") if proc.returncode == 0 else None
        fmt = "squashfs"
    else:
        fmt = "tar"
        try:
            with tarfile.open(path, "r:*") as tar:
                for member in tar:
                    if member.name.lstrip("./") == MANIFEST or member.name == MANIFEST:
                        content = tar.extractfile(member)
                        text = content.read(1 << 20).decode(errors="replace") if content else None
                        break
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise UsageError(f"--stage {path}: not a tar archive or squashfs image ({exc})") from None
    if text is None:
        raise UsageError(f"--stage {path}: has no {MANIFEST}: not made by 'envtool pack'")
    try:
        data = json.loads(text)
    except ValueError:
        raise UsageError(f"--stage {path}: {MANIFEST} is not JSON") from None
    if not isinstance(data, dict) or data.get("format") != fmt or data.get("kind") not in ("conda", "venv"):
        raise UsageError(f"--stage {path}: {MANIFEST} does not describe a {fmt} pack")
    _check_manifest(path, data)
    return data


def _check_manifest(path: Path, data: dict) -> None:
    """The manifest's values reach a job script: refuse what is not what ``pack`` writes.

    Raises:
        UsageError: a lock hash that is not 64 hex digits, a prefix that is not an absolute path
            without control characters, unpack words that are not strings.
    """
    import re

    from envtool.spec.names import CONTROL_RE

    def bad(field_name: str, expected: str) -> UsageError:
        return UsageError(f"--stage {path}: {MANIFEST} field {field_name}: expected {expected}")

    if not re.fullmatch(r"[0-9a-f]{64}", str(data.get("lock_sha256", ""))):
        raise bad("lock_sha256", "a sha256 (64 hex digits)")
    if not isinstance(data.get("unpacked_kib", 0), int) or data.get("unpacked_kib", 0) < 0:
        raise bad("unpacked_kib", "a size in KiB (an integer)")
    for key, required in (("source_prefix", True), ("dest_prefix", False)):
        value = data.get(key)
        if value is None and not required:
            continue
        if not isinstance(value, str) or not value.startswith("/") or CONTROL_RE.search(value):
            raise bad(key, "an absolute path without control characters")
    unpack = data.get("unpack") or []
    if not isinstance(unpack, list) or not all(isinstance(w, str) and w and not CONTROL_RE.search(w) for w in unpack):
        raise bad("unpack", "a list of words")
