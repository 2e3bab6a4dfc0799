"""Build small, real conda packages from the tests' own files into a local ``file://`` channel.

Each :class:`PackageDef` becomes a ``.tar.bz2`` conda package (or a ``.conda`` one, written by
conda-package-handling, where the caller asks: the site twin's large packages) (``info/index.json``,
``info/paths.json``, ``info/files``, ``info/has_prefix``, ``info/link.json`` for
``noarch: python``) laid out as conda-build lays them out; the channel is then indexed with
py-rattler's own indexer (:func:`rattler.index.index_fs`), so the repodata is what a real
channel serves. Package format facts follow the conda package specification
(https://docs.conda.io/projects/conda-build/en/stable/resources/package-spec.html):
``paths.json`` v1 entries carry ``_path``, ``path_type``, ``sha256``, ``size_in_bytes`` and,
for files that embed the build prefix, ``prefix_placeholder`` and ``file_mode``
(``text`` or ``binary``).

Usage::

    from helpers.conda_channel import PackageDef, build_channel, TEXT_PLACEHOLDER
    url = build_channel(tmp_path / "channel", [
        PackageDef("libfoo", "1.0", files={"lib/libfoo.txt": f"prefix={TEXT_PLACEHOLDER}\\n"}),
        PackageDef("foo", "2.1", depends=("libfoo >=1.0",)),
    ])

Placeholders: write :data:`TEXT_PLACEHOLDER` in a text file and :data:`BINARY_PLACEHOLDER` in a
file that contains NUL bytes; the builder finds them and records the right ``file_mode``.
The binary placeholder is long (like conda-build's ``_h_env_placehold…``) because binary
replacement pads and cannot grow a string.
"""
from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

#: conda-build's classic text placeholder (conda-build ``build.py``: ``/opt/anaconda1anaconda2anaconda3``).
TEXT_PLACEHOLDER = "/opt/anaconda1anaconda2anaconda3"
#: a long placeholder for binary files (conda-build uses ``…/_h_env_placehold_placehold…``, 255 chars).
BINARY_PLACEHOLDER = "/opt/conda-bld/_h_env_" + "placehold_" * 22

DEFAULT_PLATFORMS = ("linux-64", "linux-ppc64le", "noarch")


@dataclass(frozen=True)
class PackageDef:
    """One conda package to build.

    Attributes:
        name: package name (lower case).
        version: version string (``1.2.0``).
        build: build string (default ``<build_number>``-style ``h0_0``).
        build_number: build number.
        depends: conda match specs (``"libfoo >=1.0"``).
        files: path inside the prefix → content (str is UTF-8 encoded; bytes as is; a
            :class:`~pathlib.Path` is a file read when the archive is written, for large
            packages; it is scanned for placeholders like any other content).
        symlinks: path inside the prefix → link target (kept as a symlink).
        noarch: ``""`` (arch-specific: built once per platform), ``"generic"`` or ``"python"``
            (files under ``site-packages/`` are installed into the env's site-packages).
        entry_points: for ``noarch: python``: ``"name = module:func"`` console scripts.
        subdirs: platforms to build an arch-specific package for; empty: every non-noarch
            platform given to :func:`build_channel`.
        python_site_packages_path: for a ``python`` package: its ``python_site_packages_path``
            index field (CEP-17), or ``""``.
    """

    name: str
    version: str
    build: str = ""
    build_number: int = 0
    depends: Tuple[str, ...] = ()
    files: Mapping[str, Union[str, bytes, Path]] = field(default_factory=dict)
    symlinks: Mapping[str, str] = field(default_factory=dict)
    noarch: str = ""
    entry_points: Tuple[str, ...] = ()
    subdirs: Tuple[str, ...] = ()
    python_site_packages_path: str = ""

    @property
    def build_string(self) -> str:
        return self.build or f"h0_{self.build_number}"

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.build_string}.tar.bz2"


def _tarinfo(name: str, data: bytes, mode: int = 0o644, mtime: float = 0.0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = int(mtime)
    return info


def _mode_for(path: str, data: bytes) -> int:
    if path.startswith("bin/") or data.startswith(b"#!"):
        return 0o755
    return 0o644


def build_package(pkg: PackageDef, subdir: str, out_dir: Path, compresslevel: int = 9,
                  fmt: str = ".tar.bz2") -> Path:
    """Write one conda package for ``subdir`` into ``out_dir``.

    Args:
        pkg: the package definition.
        subdir: ``linux-64``, ``linux-ppc64le`` or ``noarch``.
        out_dir: the channel's subdir directory (created).
        compresslevel: bzip2 level 1–9 (1 is much faster for large benchmark packages); for
            ``.conda``, the zstd level.
        fmt: ``.tar.bz2`` (written here with :mod:`tarfile`) or ``.conda`` (the v2 format, zstd
            inside a zip: written by conda-package-handling, ``conda_package_handling.api.create``,
            from the package's files laid out in a scratch directory). The twin's 714 MB PyTorch
            package: written in 82 s as ``.tar.bz2`` at level 1 and 23 s as ``.conda`` at level 3,
            extracted by py-rattler in 24 s and 12 s (benchmarks/bench_package_format.py, load 2.5).
    Returns:
        the path of the archive.
    Raises:
        ValueError: ``fmt`` is neither.
    """
    if fmt not in (".tar.bz2", ".conda"):
        raise ValueError(f"fmt: expected .tar.bz2 or .conda, got {fmt!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    now = time.time()
    entries: List[dict] = []
    has_prefix: List[str] = []
    payload: List[Tuple[tarfile.TarInfo, Union[None, bytes, Path]]] = []
    for path, content in sorted(pkg.files.items()):
        data = content.read_bytes() if isinstance(content, Path) else (
            content.encode() if isinstance(content, str) else bytes(content))
        entry = {"_path": path, "path_type": "hardlink", "sha256": hashlib.sha256(data).hexdigest(),
                 "size_in_bytes": len(data)}
        if b"\0" in data and BINARY_PLACEHOLDER.encode() in data:
            entry.update(prefix_placeholder=BINARY_PLACEHOLDER, file_mode="binary")
            has_prefix.append(f"{BINARY_PLACEHOLDER} binary {path}")
        elif b"\0" not in data and TEXT_PLACEHOLDER.encode() in data:
            entry.update(prefix_placeholder=TEXT_PLACEHOLDER, file_mode="text")
            has_prefix.append(f"{TEXT_PLACEHOLDER} text {path}")
        entries.append(entry)
        mode = (content.stat().st_mode & 0o755 | 0o644) if isinstance(content, Path) else _mode_for(path, data)
        payload.append((_tarinfo(path, data, mode, now), content if isinstance(content, Path) else data))
        del data
    for path, target in sorted(pkg.symlinks.items()):
        entries.append({"_path": path, "path_type": "softlink", "size_in_bytes": 0})
        info = tarfile.TarInfo(path)
        info.type = tarfile.SYMTYPE
        info.linkname = target
        info.mtime = int(now)
        payload.append((info, None))
    index = {"name": pkg.name, "version": pkg.version, "build": pkg.build_string,
             "build_number": pkg.build_number, "depends": list(pkg.depends), "license": "BSD-3-Clause",
             "subdir": subdir, "timestamp": int(now * 1000)}
    if subdir != "noarch":
        index["platform"], index["arch"] = subdir.split("-", 1)[0], {"64": "x86_64"}.get(
            subdir.split("-", 1)[1], subdir.split("-", 1)[1])
    if pkg.noarch:
        index["noarch"] = pkg.noarch
    if pkg.python_site_packages_path:
        index["python_site_packages_path"] = pkg.python_site_packages_path
    info_files: Dict[str, bytes] = {
        "info/index.json": json.dumps(index, indent=2).encode(),
        "info/paths.json": json.dumps({"paths": entries, "paths_version": 1}, indent=2).encode(),
        "info/files": ("\n".join(e["_path"] for e in entries) + "\n").encode(),
    }
    if has_prefix:
        info_files["info/has_prefix"] = ("\n".join(has_prefix) + "\n").encode()
    if pkg.noarch == "python":
        info_files["info/link.json"] = json.dumps({"noarch": {"type": "python", "entry_points": list(pkg.entry_points)},
                                                    "package_metadata_version": 1}).encode()
    if fmt == ".conda":
        return _write_conda(out_dir / (pkg.filename[:-len(".tar.bz2")] + ".conda"), info_files, payload,
                            compresslevel)
    archive = out_dir / pkg.filename
    with tarfile.open(archive, "w:bz2", compresslevel=compresslevel) as tar:
        for name, data in info_files.items():
            tar.addfile(_tarinfo(name, data, 0o644, now), io.BytesIO(data))
        for info, data in payload:
            if isinstance(data, Path):
                with open(data, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return archive


def _write_conda(archive: Path, info_files: Mapping[str, bytes],
                 payload: Sequence[Tuple[tarfile.TarInfo, Union[None, bytes, Path]]], level: int) -> Path:
    """Lay the package's files out in a scratch directory and pack them with conda-package-handling.

    The scratch directory sits beside the channel's subdirs (``CHANNEL/.stage-*``, never indexed);
    ones a killed run left are removed first. The archive is written there and renamed into
    place, so a killed run never leaves a truncated ``.conda`` under its final name. Returns
    ``archive``.
    """
    from conda_package_handling import api  # only here: most channels are .tar.bz2

    channel = archive.parent.parent
    for old in channel.glob(".stage-*"):
        shutil.rmtree(old, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=channel, prefix=".stage-") as tmp:
        stage = Path(tmp) / "pkg"
        names = []
        for name, data in info_files.items():
            (stage / name).parent.mkdir(parents=True, exist_ok=True)
            (stage / name).write_bytes(data)
            os.chmod(stage / name, 0o644)
            names.append(name)
        for info, data in payload:
            dest = stage / info.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if info.issym():
                os.symlink(info.linkname, dest)
            else:
                if isinstance(data, Path):
                    shutil.copyfile(data, dest)
                else:
                    dest.write_bytes(data or b"")
                os.chmod(dest, info.mode)
            names.append(info.name)
        made = Path(tmp) / archive.name
        api.create(str(stage), names, str(made), compression_level=level)
        os.replace(made, archive)
    return archive


def index_channel(root: Path) -> None:
    """Index every subdir of the channel at ``root`` with py-rattler (writes ``repodata.json``)."""
    from rattler.index import index_fs

    (root / "noarch").mkdir(parents=True, exist_ok=True)
    result = index_fs(root, write_zst=False, write_shards=False, force=True)
    if asyncio.iscoroutine(result):
        asyncio.run(result)


def build_channel(root: Path, packages: Sequence[PackageDef],
                  platforms: Iterable[str] = DEFAULT_PLATFORMS, compresslevel: int = 9) -> str:
    """Build ``packages`` into a channel directory and index it.

    Arch-specific packages are built once for each non-noarch platform in ``platforms`` (or
    only for ``pkg.subdirs``); ``noarch`` packages once, under ``noarch/``. Every platform in
    ``platforms`` gets a ``repodata.json``, empty or not.

    Args:
        root: channel directory (created; existing archives with the same name are replaced).
        packages: what to build.
        platforms: subdirs to create (``noarch`` is always created).
        compresslevel: bzip2 level for the archives (1–9).
    Returns:
        the channel's ``file://`` URL (no trailing slash).
    """
    root = Path(root).resolve()
    subdirs = [p for p in dict.fromkeys(list(platforms) + ["noarch"])]
    for sd in subdirs:
        (root / sd).mkdir(parents=True, exist_ok=True)
    for pkg in packages:
        if pkg.noarch:
            build_package(pkg, "noarch", root / "noarch", compresslevel)
            continue
        for sd in (pkg.subdirs or [s for s in subdirs if s != "noarch"]):
            build_package(pkg, sd, root / sd, compresslevel)
    index_channel(root)
    return root.as_uri()


def python_package(version: str = "", interpreter: str = "", system_site_packages: bool = False,
                   build: str = "h0_0_cpython") -> PackageDef:
    """A ``python`` conda package that wraps the test's own interpreter as a venv.

    It installs ``bin/python`` and ``bin/python3`` as symlinks to ``interpreter`` plus a
    ``pyvenv.cfg`` naming its home, so ``<prefix>/bin/python`` is a real Python whose
    ``sys.prefix`` is the env and whose site-packages is ``lib/pythonX.Y/site-packages``
    (``noarch: python`` packages land there). Standard-library ``venv`` semantics (PEP 405).

    Args:
        version: the package version (default: this interpreter's ``X.Y.Z``).
        interpreter: the real interpreter (default: ``sys.executable`` resolved).
        system_site_packages: let the env see the interpreter's own packages (its ``pip``
            among them, so ``<prefix>/bin/python -m pip`` works offline).
        build: the build string (use different ones to have both variants in one channel).
    Returns:
        the :class:`PackageDef` (arch-specific).
    """
    import os
    import sys

    exe = interpreter or os.path.realpath(sys.executable)
    ver = version or "%d.%d.%d" % sys.version_info[:3]
    mm = ".".join(ver.split(".")[:2])
    cfg = (f"home = {os.path.dirname(exe)}\n"
           f"include-system-site-packages = {'true' if system_site_packages else 'false'}\nversion = {ver}\n")
    return PackageDef("python", ver, build=build, files={
        "pyvenv.cfg": cfg, f"lib/python{mm}/site-packages/README.txt": "site-packages of the test python\n"},
        symlinks={"bin/python": exe, "bin/python3": exe, f"bin/python{mm}": exe})
