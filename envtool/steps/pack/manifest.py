"""A pack's manifest (``.envtool/pack.json``), read back without unpacking the pack
(:mod:`envtool.steps.pack`): what ``jobscript --stage`` reads."""
from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Optional, Tuple

from envtool.core import external
from envtool.core.errors import UsageError, echo
from envtool.steps.pack.model import MANIFEST


def _squashfs_text(path: Path) -> Optional[str]:
    """The manifest of a squashfs image (``unsquashfs -cat``), or None when it has none."""
    if shutil.which("unsquashfs") is None:
        raise UsageError(f"--stage {path}: a squashfs image, and unsquashfs (squashfs-tools) is not here "
                         f"to read its manifest")
    proc = subprocess.run(["unsquashfs", "-cat", str(path), MANIFEST], capture_output=True, timeout=120)
    return external.decode(proc.stdout) if proc.returncode == 0 else None


def _tar_text(path: Path) -> Optional[str]:
    """The manifest of a tar archive, or None when it has none."""
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                if member.name.lstrip("./") == MANIFEST or member.name == MANIFEST:
                    content = tar.extractfile(member)
                    return content.read(1 << 20).decode(errors="replace") if content else None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise UsageError(f"--stage {path}: not a tar archive or squashfs image ({exc})") from None
    return None


def _member_problem(member: tarfile.TarInfo, dest: str) -> Optional[str]:
    """Why a job must not unpack the tar member ``member`` (into the empty directory ``dest``), or
    None: anything but a regular file, directory, symbolic or hard link (a device node or FIFO); a
    set-user-ID or set-group-ID file; a name (or a hard link's target) leaving the directory. Names
    go through :func:`tarfile.data_filter` (https://docs.python.org/3/library/tarfile.html#tarfile.data_filter,
    Python 3.12, 3.11.4, 3.10.12, 3.9.17) where this Python has it; a symbolic link's target is
    not judged here: ``pack`` judged it (an absolute link to the venv's base interpreter, links kept
    by ``--allow-outside-links``)."""
    import stat

    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        return "a device node, FIFO or other special file"
    if member.isreg() and member.mode & (stat.S_ISUID | stat.S_ISGID):
        return f"set-user-ID or set-group-ID, mode {member.mode & 0o7777:04o}"
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is None:  # an older Python: the same test of the names, by hand
        names = [member.name] + ([member.linkname] if member.islnk() else [])
        if any(n.startswith("/") or ".." in n.split("/") for n in names):
            return "a name leaving the directory it is unpacked in"
        return None
    try:
        data_filter(member.replace(linkname=".", deep=False) if member.issym() else member, dest)
    except tarfile.FilterError as exc:
        return str(exc)
    return None


def check_members(path: Path) -> None:
    """Refuse a tar pack a job must not unpack (run as root, ``tar`` makes device nodes and keeps
    owners and set-user-ID bits): every member is looked at (:func:`_member_problem`), and a member
    whose name passes through a symbolic link member (``lib/out -> /tmp``, then ``lib/out/x``:
    unpacked through the link, out of the directory, or a failed unpack in the job) is refused;
    ``envtool pack`` writes no such member.

    Raises:
        UsageError: naming the file, up to five members and what was expected (exit 2).
    """
    import tempfile

    bad = []
    links = set()  # names of the symbolic links met so far
    dest = tempfile.mkdtemp(prefix="envtool-stage-check-")
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                why = _member_problem(member, dest)
                name = posixpath.normpath(member.name.lstrip("/"))
                parts = name.split("/")
                through = next((p for p in ("/".join(parts[:i]) for i in range(1, len(parts))) if p in links), None)
                if why is None and through is not None:  # tar would write through the link, out of the pack
                    why = f"below {echo(through)}, a symbolic link in the pack: unpacking writes through it"
                if why is not None:
                    bad.append(f"{echo(member.name)} ({why})")
                if member.issym():
                    links.add(name)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise UsageError(f"--stage {path}: not a readable tar archive ({exc})") from None
    finally:
        os.rmdir(dest)
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise UsageError(f"--stage {path}: expected only regular files, directories and links inside the pack, "
                         f"without set-user-ID or set-group-ID bits (what 'envtool pack' writes); found "
                         + ", ".join(bad[:5]) + more + ": make the pack again with 'envtool pack'")


def _manifest_text(path: Path) -> Tuple[str, Optional[str]]:
    """``(format, manifest text or None)`` of the pack file at ``path``."""
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic in (b"hsqs", b"sqsh"):
        return "squashfs", _squashfs_text(path)
    return "tar", _tar_text(path)


def read_manifest(path: Path) -> dict:
    """The manifest (``.envtool/pack.json``) of a pack file, read without unpacking it.

    Raises:
        UsageError: not a readable pack made by ``envtool pack`` (names the file), or a tar with a
            member a job must not unpack (:func:`check_members`).
    """
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--stage {path}: no such file (make one with 'envtool pack')")
    fmt, text = _manifest_text(path)
    if text is None:
        raise UsageError(f"--stage {path}: has no {MANIFEST}: not made by 'envtool pack'")
    try:
        data = json.loads(text)
    except ValueError:
        raise UsageError(f"--stage {path}: {MANIFEST} is not JSON") from None
    if not isinstance(data, dict) or data.get("format") != fmt or data.get("kind") not in ("conda", "venv"):
        raise UsageError(f"--stage {path}: {MANIFEST} does not describe a {fmt} pack")
    check_manifest(path, data)
    if fmt == "tar":
        check_members(path)
    return data


def _bad_path(value) -> bool:
    from envtool.spec.names import CONTROL_RE

    return not isinstance(value, str) or not value.startswith("/") or bool(CONTROL_RE.search(value))


def _bad_words(unpack) -> bool:
    from envtool.spec.names import CONTROL_RE

    return not isinstance(unpack, list) or not all(isinstance(w, str) and w and not CONTROL_RE.search(w)
                                                   for w in unpack)


def check_manifest(path: Path, data: dict) -> None:
    """The manifest's values reach a job script: refuse what is not what ``pack`` writes.

    Raises:
        UsageError: a lock hash that is not 64 hex digits, a prefix that is not an absolute path
            without control characters, unpack words that are not strings (names the field).
    """
    def bad(field_name: str, expected: str) -> UsageError:
        return UsageError(f"--stage {path}: {MANIFEST} field {field_name}: expected {expected}")

    if not re.fullmatch(r"[0-9a-f]{64}", str(data.get("lock_sha256", ""))):
        raise bad("lock_sha256", "a sha256 (64 hex digits)")
    kib = data.get("unpacked_kib", 0)
    if not isinstance(kib, int) or kib < 0:
        raise bad("unpacked_kib", "a size in KiB (an integer)")
    if _bad_path(data.get("source_prefix")):
        raise bad("source_prefix", "an absolute path without control characters")
    if data.get("dest_prefix") is not None and _bad_path(data.get("dest_prefix")):
        raise bad("dest_prefix", "an absolute path without control characters")
    if _bad_words(data.get("unpack") or []):
        raise bad("unpack", "a list of words")
