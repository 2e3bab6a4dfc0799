"""The tests' conda package writer (tests/helpers/conda_channel.py): a package written as ``.conda``
(conda-package-handling, what the site twin uses) installs with py-rattler exactly as the same
package written as ``.tar.bz2``: the same files, modes, symlinks and prefix replacement."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from envtool.engines.rattler_api import install_records, solve_records
from helpers.conda_channel import TEXT_PLACEHOLDER, PackageDef, build_package, index_channel


def _tree(prefix: Path) -> dict:
    """path -> (kind, mode, content or link target) for everything the package put in ``prefix``."""
    out = {}
    for p in sorted(prefix.rglob("*")):
        rel = p.relative_to(prefix).as_posix()
        if rel.startswith("conda-meta") or rel == "CACHEDIR.TAG":  # written by the installer, not the package
            continue
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_file():
            out[rel] = ("file", stat.S_IMODE(p.stat().st_mode), p.read_bytes().replace(str(prefix).encode(), b"PREFIX"))
    return out


@pytest.mark.parametrize("fmt", [".tar.bz2", ".conda"])
def test_a_package_installs_the_same_in_either_format(tmp_path, fmt):
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(1 << 20))  # a file given as a Path, read when the archive is written
    pkg = PackageDef("fmtpkg", "1.0", files={
        "bin/tool": "#!/bin/sh\necho hi\n",
        "etc/fmtpkg.conf": f"prefix={TEXT_PLACEHOLDER}\n",
        "share/fmtpkg/big.bin": big,
    }, symlinks={"lib/libfmt.so": "libfmt.so.1", "lib/libfmt.so.1": "../share/fmtpkg/big.bin"})
    channel = tmp_path / "channel"
    archive = build_package(pkg, "noarch", channel / "noarch", compresslevel=3, fmt=fmt)
    assert archive.name == f"fmtpkg-1.0-h0_0{fmt}" and archive.is_file()
    assert [p.name for p in channel.iterdir()] == ["noarch"]  # no scratch directory left beside it
    index_channel(channel)
    records = solve_records([channel.as_uri()], ["fmtpkg"], "linux-64", cache_dir=tmp_path / "repodata")
    assert [r.file_name for r in records] == [archive.name]
    prefix = tmp_path / "env"
    install_records(records, prefix, tmp_path / "pkgs")
    tree = _tree(prefix)
    assert tree["bin/tool"][1] == 0o755 and tree["etc/fmtpkg.conf"][1] == 0o644
    assert tree["etc/fmtpkg.conf"][2] == b"prefix=PREFIX\n"  # the placeholder became the prefix
    assert tree["share/fmtpkg/big.bin"][2] == big.read_bytes()
    assert tree["lib/libfmt.so"] == ("link", "libfmt.so.1")
    assert tree["lib/libfmt.so.1"] == ("link", "../share/fmtpkg/big.bin")
    assert set(tree) == {"bin/tool", "etc/fmtpkg.conf", "share/fmtpkg/big.bin", "lib/libfmt.so", "lib/libfmt.so.1"}


def test_an_unknown_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match="fmt"):
        build_package(PackageDef("x", "1"), "noarch", tmp_path, fmt=".zip")
