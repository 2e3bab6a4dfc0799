"""Writing a pack: conda-pack for a conda environment; envtool's tar or squashfs root for a venv
(:mod:`envtool.steps.pack`)."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from envtool.core.errors import CheckFailed, UsageError
from envtool.steps.pack.model import MANIFEST, UNPACK_SCRIPT, NotPackable


def unpack_script() -> str:
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


def pack_conda(prefix: Path, fmt: str, built: Path, dest: Optional[str], manifest: dict, extra: Dict[str, Path],
               work: Path) -> None:
    """conda-pack's :class:`CondaEnv` of ``prefix`` plus the manifest and ``extra`` files, written to ``built``.

    Raises:
        UsageError: conda-pack is not installed; NotPackable: conda-pack refuses the environment
            (its reason); CheckFailed: its mksquashfs failed.
    """
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
            files = [f for f in env.files if f.target not in extra and f.target != MANIFEST]
            files += [File(str(src), target, is_conda=False) for target, src in extra.items()]
            files.append(File(str(mpath), MANIFEST, is_conda=False))
            env = CondaEnv(env.prefix, files, env._excluded_files)
            env.pack(output=str(built), format=fmt, dest_prefix=dest, compress_level=4 if fmt == "squashfs" else 0,
                     n_threads=1)
        except conda_pack.CondaPackException as exc:
            raise NotPackable(f"{prefix}: conda-pack cannot pack it: {exc}") from None
        except subprocess.CalledProcessError as exc:
            raise CheckFailed(f"mksquashfs failed (exit {exc.returncode}) packing {prefix}") from None
    finally:
        tempfile.tempdir = old_tmp


def walk(prefix: Path) -> Iterator[Tuple[Path, str]]:
    """``(path, relative name)`` of everything under ``prefix``, directories before their contents."""
    for dirpath, dirnames, filenames in os.walk(prefix):
        dirnames.sort()
        for name in sorted(dirnames) + sorted(filenames):
            path = Path(dirpath) / name
            yield path, str(path.relative_to(prefix))


def relative_link(prefix: Path, path: Path) -> Optional[str]:
    """A relative target for an absolute symbolic link into ``prefix`` (None: keep it as it is)."""
    target = os.readlink(path)
    if os.path.isabs(target) and (target == str(prefix) or target.startswith(str(prefix) + os.sep)):
        return os.path.relpath(target, os.path.dirname(path))
    return None


def manifest_bytes(manifest: dict) -> bytes:
    """The manifest as written into a pack."""
    return (json.dumps(manifest, indent=1) + "\n").encode()


def venv_tar(prefix: Path, built: Path, manifest: dict, extra: Dict[str, Path]) -> None:
    """A venv as a tar (relocated where unpacked by ``.envtool/unpack.py``): the manifest first,
    the relocation script, ``extra``, then the environment (absolute links into it made relative)."""
    added = {MANIFEST, UNPACK_SCRIPT} | set(extra)
    with tarfile.open(built, "w", format=tarfile.PAX_FORMAT) as tar:
        def add_bytes(name: str, data: bytes, mode: int = 0o644) -> None:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), mode, int(time.time())
            tar.addfile(ti, io.BytesIO(data))

        add_bytes(MANIFEST, manifest_bytes(manifest))  # first: a reader finds it without reading the whole archive
        add_bytes(UNPACK_SCRIPT, unpack_script().encode())
        for name, src in extra.items():
            add_bytes(name, src.read_bytes())
        for path, rel in walk(prefix):
            if rel in added:
                continue
            ti = tar.gettarinfo(str(path), rel)
            if ti.issym():
                ti.linkname = relative_link(prefix, path) or ti.linkname
            if ti.isreg():
                with open(path, "rb") as fh:
                    tar.addfile(ti, fh)
            else:
                tar.addfile(ti)


def _copy_entry(prefix: Path, path: Path, target: Path, rewrite: Optional[Tuple[bytes, bytes]], link: bool) -> None:
    """One entry of the squashfs root: a link (made relative), a directory, a rewritten text file,
    or a file hard-linked (``link``: same file system) or copied."""
    if path.is_symlink():
        os.symlink(relative_link(prefix, path) or os.readlink(path), target)
    elif path.is_dir():
        target.mkdir()
    elif rewrite is not None:
        target.write_bytes(path.read_bytes().replace(*rewrite))
        shutil.copymode(path, target)
    elif path.is_file():
        try:
            if not link:
                raise OSError
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def venv_squashfs_root(prefix: Path, root: Path, dest: str, manifest: dict, extra: Dict[str, Path],
                       relocate: List[str], work: Path) -> None:
    """The directory tree of a venv's squashfs image at ``root``, relocated now to ``dest`` (the
    image is read-only once mounted): the files in ``relocate`` rewritten, the rest hard-linked
    when on the same file system, the manifest and ``extra`` added, directory modes and times kept."""
    root.mkdir()
    added = {MANIFEST, UNPACK_SCRIPT} | set(extra)
    pair = (str(prefix).encode(), str(dest).encode())
    same_dev = os.stat(prefix).st_dev == os.stat(work).st_dev
    rewrite = set(relocate)
    for path, rel in walk(prefix):
        if rel not in added:
            _copy_entry(prefix, path, root / rel, pair if rel in rewrite else None, same_dev)
    for name, src in extra.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, root / name)
    (root / MANIFEST).parent.mkdir(parents=True, exist_ok=True)
    (root / MANIFEST).write_bytes(manifest_bytes(manifest))
    for d, _ in walk(prefix):
        if d.is_dir() and not d.is_symlink():
            shutil.copystat(d, root / d.relative_to(prefix))
    shutil.copystat(prefix, root)
