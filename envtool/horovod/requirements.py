"""What a Horovod compile needs from the machine, found or not, and how to get what is missing.

Horovod's requirements (horovod/horovod@v0.28.1:docs/install.rst#L6-L14): a C++ compiler
(C++14; C++17 with newer frameworks, #L20), CMake 3.13 or newer, and, for the MPI controller,
an MPI implementation, which CMake finds through its compiler wrapper
(horovod/horovod@v0.28.1:CMakeLists.txt#L138, ``find_package(MPI)``). ``horovodrun`` starts
MPI jobs with ``mpirun`` (docs/install.rst#L123-L124), which validation runs.

Nothing here installs anything. :func:`probe` looks at the machine (``PATH`` and the
environment's ``bin``); :func:`fix_lines` says, for people, what to run: the site's
``module load`` line where the site file names modules, else the Debian/Ubuntu packages
(``apt-get install``) — and, for CMake, the ``cmake`` package from PyPI, which needs no root.
"""
from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple


@dataclass(frozen=True)
class BuildTool:
    """One tool a Horovod compile or its validation needs.

    Attributes:
        name: the program looked for (``c++``, ``cmake``, ``mpicxx``, ``mpirun``).
        purpose: what it is for, in words.
        found: its path, or "" when it was not found.
        debian: the Debian/Ubuntu package that provides it.
        pip: a PyPI distribution that provides it without root, or "".
    """

    name: str
    purpose: str
    found: str
    debian: str
    pip: str = ""


def _which(name: str, prefix: Optional[Path]) -> str:
    """``PREFIX/bin/NAME`` when it exists (pip puts a ``cmake`` package's program there), else
    the first ``NAME`` on ``PATH``, else ""."""
    if prefix is not None and (Path(prefix) / "bin" / name).exists():
        return str(Path(prefix) / "bin" / name)
    return shutil.which(name) or ""


def probe(controllers: Iterable[str], cxx: str = "", prefix: Optional[Path] = None) -> Tuple[BuildTool, ...]:
    """The tools a Horovod compile with ``controllers`` needs, each with where it was found.

    Args:
        controllers: the spec's ``horovod.controllers`` (``mpi``, ``gloo``).
        cxx: the C++ compiler the build uses (``CXX`` of the build, ``$CXX``); default ``c++``.
        prefix: the environment the build runs in (its ``bin`` is searched first), or None.
    Returns:
        the tools in the order a person would install them; ``found`` is "" for a missing one.
        Looks only at files (``PATH`` lookups); runs nothing.
    """
    cxx = cxx or os.environ.get("CXX") or "c++"
    tools = [BuildTool(cxx, "C++ compiler", _which(cxx, None), "g++"),
             BuildTool("cmake", "CMake, which Horovod's setup.py runs", _which("cmake", prefix), "cmake", pip="cmake")]
    if "mpi" in set(controllers):
        tools += [BuildTool("mpicxx", "MPI compiler wrapper, for Horovod's MPI controller", _which("mpicxx", None),
                            "libopenmpi-dev"),
                  BuildTool("mpirun", "MPI launcher, for horovodrun and validation", _which("mpirun", None),
                            "openmpi-bin")]
    return tuple(tools)


def missing(tools: Sequence[BuildTool]) -> Tuple[BuildTool, ...]:
    """The tools of ``tools`` that were not found."""
    return tuple(t for t in tools if not t.found)


def fix_lines(absent: Sequence[BuildTool], site_name: str = "", site_modules: Sequence[str] = (),
              build_modules: Sequence[str] = ()) -> List[str]:
    """Commands a person can paste to get ``absent`` (each shell-quoted).

    Args:
        absent: missing tools (:func:`missing`).
        site_name: the site the plan is for ("" or ``local``: this machine).
        site_modules: the modules the spec's site entry loads.
        build_modules: the site file's ``build_modules`` (the modules that provide a compiler,
            CMake and MPI on that site), if it names any.
    Returns:
        lines such as ``module load gcc cmake openmpi``, ``sudo apt-get install g++ cmake`` and
        ``uv tool install cmake``; empty when nothing is missing.
    """
    if not absent:
        return []
    lines: List[str] = []
    modules = list(build_modules) + [m for m in site_modules if m not in build_modules]
    if modules:
        lines.append("module load " + " ".join(shlex.quote(m) for m in modules)
                     + f"   # the modules site {site_name} names for building")
    packages = sorted({t.debian for t in absent})
    lines.append("sudo apt-get install " + " ".join(shlex.quote(p) for p in packages)
                 + "   # Debian/Ubuntu, as root")
    pips = sorted({t.pip for t in absent if t.pip})
    if pips:
        # not `pip install --user`: Debian 12 and Ubuntu 23.04+ refuse it (externally-managed-environment,
        # PEP 668: https://peps.python.org/pep-0668/); uv and pipx install a tool into a venv of its own
        # (https://docs.astral.sh/uv/guides/tools/), uv comes with envtool
        quoted = " ".join(shlex.quote(p) for p in pips)
        lines.append(f"uv tool install {quoted}   # no root needed (or: pipx install {quoted}); puts it in ~/.local/bin")
    return lines


def describe(absent: Sequence[BuildTool]) -> str:
    """``mpicxx (MPI compiler wrapper …), cmake (CMake …)`` for a message."""
    return ", ".join(f"{t.name} ({t.purpose})" for t in absent)
