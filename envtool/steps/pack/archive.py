"""Writing a pack: conda-pack for a conda environment; envtool's tar or squashfs root for a venv
(:mod:`envtool.steps.pack`)."""
from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from envtool.core.errors import CheckFailed, UsageError
from envtool.steps.pack.contents import Entry, changed, open_entry
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


def relative_link(prefix: Path, path: str, target: str) -> Optional[str]:
    """A relative target for the absolute symbolic link ``path`` (text ``target``) into ``prefix``
    (None: keep it as it is)."""
    if os.path.isabs(target) and (target == str(prefix) or target.startswith(str(prefix) + os.sep)):
        return os.path.relpath(target, os.path.dirname(path))
    return None


def _same_kind(entry: Entry, ti: Optional[tarfile.TarInfo]) -> bool:
    """Whether the tar header ``ti`` (read now) is still the directory or link ``entry`` was judged."""
    if ti is None:  # a socket is there now (tarfile has no header for one)
        return False
    if stat.S_ISDIR(entry.st.st_mode):
        return ti.isdir()
    return ti.issym() and ti.linkname == entry.link


def manifest_bytes(manifest: dict) -> bytes:
    """The manifest as written into a pack."""
    return (json.dumps(manifest, indent=1) + "\n").encode()


def venv_tar(prefix: Path, built: Path, manifest: dict, extra: Dict[str, Path], entries: Iterable[Entry]) -> None:
    """A venv as a tar (relocated where unpacked by ``.envtool/unpack.py``): the manifest first,
    the relocation script, ``extra``, then ``entries`` (:meth:`envtool.steps.pack.contents.Judge.entries`:
    the environment, judged as it is written; absolute links into it made relative). A regular
    file's header and data come from the one descriptor :func:`open_entry` opened (no set-user-ID
    or set-group-ID bit ever written).

    Raises:
        CheckFailed: an entry changed since it was judged (exit 1).
    """
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
        for entry in entries:
            if entry.rel in added:
                continue
            if stat.S_ISREG(entry.st.st_mode):
                with open_entry(entry) as fh:
                    ti = tar.gettarinfo(arcname=entry.rel, fileobj=fh)
                    ti.mode &= ~(stat.S_ISUID | stat.S_ISGID)
                    tar.addfile(ti, fh if ti.isreg() else None)  # a hard link to a member before: no data
                continue
            ti = tar.gettarinfo(entry.path, entry.rel)
            if ti is None or not _same_kind(entry, ti):
                raise changed(entry.path, "another kind of file, or another link, is there now")
            if ti.issym() and entry.link is not None:
                ti.linkname = relative_link(prefix, entry.path, entry.link) or entry.link
            tar.addfile(ti)


def _copy_file(entry: Entry, target: Path, rewrite: Optional[Tuple[bytes, bytes]], link: bool) -> None:
    """A regular file of the squashfs root: rewritten, hard-linked (``link``: same file system;
    the new name checked to be the very file judged) or copied, from the descriptor
    :func:`open_entry` opened; its mode without set-user-ID and set-group-ID bits."""
    with open_entry(entry) as fh:
        if rewrite is None and link:
            try:
                os.link(entry.path, target, follow_symlinks=False)
            except OSError:
                pass  # no hard links there after all: copy it
            else:
                st = os.lstat(target)
                if (st.st_dev, st.st_ino) == (entry.st.st_dev, entry.st.st_ino):
                    return
                os.unlink(target)
                raise changed(entry.path, "another file is there now")
        with open(target, "wb") as out:
            if rewrite is not None:
                out.write(fh.read().replace(*rewrite))
            else:
                shutil.copyfileobj(fh, out, 1 << 20)
    os.chmod(target, stat.S_IMODE(entry.st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
    os.utime(target, ns=(entry.st.st_atime_ns, entry.st.st_mtime_ns))


def venv_squashfs_root(prefix: Path, root: Path, dest: str, manifest: dict, extra: Dict[str, Path],
                       relocate: List[str], work: Path, entries: Iterable[Entry]) -> None:
    """The directory tree of a venv's squashfs image at ``root``, relocated now to ``dest`` (the
    image is read-only once mounted), from ``entries`` (as :func:`venv_tar`): the files in
    ``relocate`` rewritten, the rest hard-linked when on the same file system, links made relative,
    the manifest and ``extra`` added, directory modes and times kept.

    Raises:
        CheckFailed: an entry changed since it was judged (exit 1).
    """
    root.mkdir()
    added = {MANIFEST, UNPACK_SCRIPT} | set(extra)
    pair = (str(prefix).encode(), str(dest).encode())
    same_dev = os.stat(prefix).st_dev == os.stat(work).st_dev
    rewrite = set(relocate)
    dirs: List[Entry] = []
    for entry in entries:
        if entry.rel in added:
            continue
        target = root / entry.rel
        if entry.link is not None:
            os.symlink(relative_link(prefix, entry.path, entry.link) or entry.link, target)
        elif stat.S_ISDIR(entry.st.st_mode):
            target.mkdir()
            dirs.append(entry)
        else:
            _copy_file(entry, target, pair if entry.rel in rewrite else None, same_dev)
    for name, src in extra.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, root / name)
    (root / MANIFEST).parent.mkdir(parents=True, exist_ok=True)
    (root / MANIFEST).write_bytes(manifest_bytes(manifest))
    for entry in reversed(dirs):  # deepest first: a directory's time is set after its contents are in
        os.chmod(root / entry.rel, stat.S_IMODE(entry.st.st_mode))
        os.utime(root / entry.rel, ns=(entry.st.st_atime_ns, entry.st.st_mtime_ns))
    shutil.copystat(prefix, root)
