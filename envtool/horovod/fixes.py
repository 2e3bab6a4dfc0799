"""Named build fixes: rules that patch a Horovod build only where a known breakage applies.

Each rule says which Horovod versions × framework versions it applies to, where the fact comes
from, and what it adds to the build environment. ``plan`` lists the rules that apply; the
Horovod build step evaluates them again against the installed framework versions.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from packaging.version import Version

from envtool.core import external
from envtool.core.paths import ensure_dir

#: Framework name (spec spelling) → installed/pinned version.
FrameworkVersions = Mapping[str, Version]


@dataclass(frozen=True)
class Toolchain:
    """The build tools a Horovod build will use, as far as fix rules care.

    Attributes:
        cmake: CMake version (``cmake --version``), or None when unknown / not found.
        cxx_family: ``gnu``, ``clang`` or ``""`` (unknown), from ``$CXX --version``.
        cxx_version: the C++ compiler's version, or None.
    """

    cmake: Optional[Version] = None
    cxx_family: str = ""
    cxx_version: Optional[Version] = None

    def describe(self) -> str:
        """``cmake 3.25.1, gnu c++ 12.2.0`` (unknown parts left out)."""
        parts = []
        if self.cmake is not None:
            parts.append(f"cmake {self.cmake}")
        if self.cxx_version is not None:
            parts.append(f"{self.cxx_family or 'c++'} c++ {self.cxx_version}")
        return ", ".join(parts) or "toolchain unknown"


#: a tool's version number as it prints it: ASCII digits and dots, each part at most 9 digits
_VERSION_WORD = r"([0-9]{1,9}(?:\.[0-9]{1,9}){0,5})(?![0-9])"


def _tool_version(text: str) -> Optional[Version]:
    """``Version(text)``, or None when packaging does not read it (never raises)."""
    try:
        return Version(text)
    except ValueError:  # InvalidVersion is a ValueError
        return None


def parse_cmake_version(text: str) -> Optional[Version]:
    """``cmake version 4.4.3`` (first line of ``cmake --version``) → ``Version('4.4.3')``, or None."""
    m = re.search(r"cmake version " + _VERSION_WORD, text or "")
    return _tool_version(m.group(1)) if m else None


def parse_cxx_version(text: str) -> Tuple[str, Optional[Version]]:
    """Family and version from ``c++ --version`` output.

    ``c++ (Debian 12.2.0-14+deb12u1) 12.2.0`` and ``g++ (GCC) 13.3.0`` → ``("gnu", 13.3.0)``
    (GNU prints "Free Software Foundation" in its copyright line; the version is the last word
    of the first line); ``clang version 17.0.6`` (and ``Apple clang``) → ``("clang", 17.0.6)``.
    Returns ``("", None)`` when neither is recognised.
    """
    text = text or ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    m = re.search(r"clang version " + _VERSION_WORD, text)
    if m and _tool_version(m.group(1)) is not None:
        return "clang", _tool_version(m.group(1))
    if "Free Software Foundation" in text or re.match(r"\S*(g\+\+|c\+\+|gcc)\b", first):
        m = re.search(r"(?<![0-9])([0-9]{1,9}\.[0-9]{1,9}(?:\.[0-9]{1,9})?)\s*$", first)
        if m and _tool_version(m.group(1)) is not None:
            return "gnu", _tool_version(m.group(1))
    return "", None


def _version_output(argv: List[str]) -> str:
    """What ``argv`` (a ``--version`` call) prints, decoded by :func:`envtool.core.external.run`;
    "" when it fails, cannot start or takes over 30 s. Run once per process for each ``argv``
    (``plan`` asks the compiler's version twice: the toolchain and the build key)."""
    exe = shutil.which(argv[0]) if argv else None
    try:
        st = os.stat(exe) if exe else None
    except OSError:
        st = None
    # the program found now, as it is now (a test or a module load may change PATH between calls)
    return _version_output_of(tuple(argv), exe, (st.st_ino, st.st_size, st.st_mtime_ns) if st else None,
                              tuple(sorted((k, v) for k, v in os.environ.items() if k in ("PATH", "LD_LIBRARY_PATH"))))


@functools.lru_cache(maxsize=32)
def _version_output_of(argv: Tuple[str, ...], exe, stamp, env) -> str:
    try:
        proc = external.run(list(argv), timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (proc.stdout or proc.stderr) if proc.returncode == 0 else ""


def version_line(argv: List[str]) -> Optional[str]:
    """The first line :func:`_version_output` gives for ``argv`` (stripped), or None when it gives nothing."""
    text = _version_output(argv).strip()
    return text.splitlines()[0].strip() if text else None


def probe_toolchain(prefix: Optional[Path] = None, cxx: Optional[str] = None) -> Toolchain:
    """The CMake and C++ compiler a Horovod build in ``prefix`` will find.

    Horovod's ``setup.py`` runs the first ``cmake`` on PATH (a ``cmake`` pip package in the
    environment's ``bin`` counts: pip puts it there), so ``PREFIX/bin/cmake`` is tried first.

    Args:
        prefix: the environment the build runs in, or None (PATH only).
        cxx: the C++ compiler (default ``$CXX``, else ``c++``).
    Returns:
        a :class:`Toolchain`; fields stay None for tools that are missing or print nothing known.
        Runs two ``--version`` commands (about 10 ms each); nothing else.
    """
    cmake = None
    if prefix is not None and (Path(prefix) / "bin" / "cmake").exists():
        cmake = str(Path(prefix) / "bin" / "cmake")
    cmake = cmake or shutil.which("cmake")
    cmake_v = parse_cmake_version(_version_output([cmake, "--version"])) if cmake else None
    cxx = cxx or os.environ.get("CXX") or "c++"
    family, cxx_v = parse_cxx_version(_version_output([cxx, "--version"])) if shutil.which(cxx) else ("", None)
    return Toolchain(cmake=cmake_v, cxx_family=family, cxx_version=cxx_v)


@dataclass(frozen=True)
class FixRule:
    """One named fix.

    Attributes:
        id: stable id shown in plans and logs, and part of the wheel-cache key.
        title: one line for people.
        source: where the breakage and the fix are documented.
        applies: ``(horovod_version, framework_versions, toolchain) -> bool``; ``toolchain`` is a
            :class:`Toolchain` (fields None when unknown: a rule that needs one does not apply).
        variables: ``(workdir, env) -> [(name, value), …]``: the variables to set, given the
            build variables so far; pure (``plan`` shows them without running anything).
        write_files: ``(workdir) -> None`` writes the helper files the variables point to under
            ``workdir`` (a directory that outlives the build), or None when there are none.
    """

    id: str
    title: str
    source: str
    applies: Callable[[Optional[Version], FrameworkVersions, "Toolchain"], bool]
    variables: Callable[[Path, Mapping[str, str]], List[Tuple[str, str]]]
    write_files: Optional[Callable[[Path], None]] = None

    def prepare(self, workdir: Path, env: Mapping[str, str]) -> List[Tuple[str, str]]:
        """Write the helper files (if any) and return :attr:`variables` — what a build does."""
        if self.write_files is not None:
            self.write_files(workdir)
        return self.variables(workdir, env)


_CXX_WRAPPER = """#!/bin/sh
# envtool fix rule horovod-torch-cxx17: Horovod <= 0.28.1 compiles its PyTorch extension as
# C++14; PyTorch >= 2.1 headers need C++17 (horovod issues #3996, #4014; fixed by PR #3998,
# unreleased). Rewrite -std=c++14 / gnu++14 to the C++17 spelling, pass everything else on.
real="${ENVTOOL_REAL_CXX:-c++}"
for arg in "$@"; do
  shift
  case "$arg" in
    -std=c++14) set -- "$@" -std=c++17 ;;
    -std=gnu++14) set -- "$@" -std=gnu++17 ;;
    *) set -- "$@" "$arg" ;;
  esac
done
exec "$real" "$@"
"""


def _torch_cxx17_applies(horovod: Optional[Version], frameworks: FrameworkVersions, toolchain: Toolchain) -> bool:
    torch = frameworks.get("pytorch")
    if torch is None:
        return False
    # Every Horovod release up to 0.28.1 (the last, 2023-06) asks for C++14.
    return (horovod is None or horovod.release <= (0, 28, 1)) and torch.release >= (2, 1)


def _torch_cxx17_write(workdir: Path) -> None:
    ensure_dir(workdir)
    wrapper = workdir / "c++17-wrapper"
    wrapper.write_text(_CXX_WRAPPER)
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def default_cxx() -> str:
    """The C++ compiler on ``PATH`` when the build names none: ``c++``, else ``g++`` (absolute
    paths), else ``c++``. A probe (``shutil.which``): ``plan`` runs it once, before composing."""
    return shutil.which("c++") or shutil.which("g++") or "c++"


#: The key of a fix rule's ``env`` that carries :func:`default_cxx` as probed before planning
#: (never set in a build's environment).
PROBED_CXX = "envtool:probed-c++"


def _torch_cxx17_variables(workdir: Path, env: Mapping[str, str]) -> List[Tuple[str, str]]:
    wrapper = workdir / "c++17-wrapper"
    real = env.get("CXX") or env.get(PROBED_CXX) or default_cxx()
    if os.path.basename(real) == wrapper.name:
        real = shutil.which("g++") or "g++"
    return [("CXX", str(wrapper)), ("ENVTOOL_REAL_CXX", real)]


def _upto_0281(horovod: Optional[Version]) -> bool:
    # Horovod 0.28.1 (2023-06) is the last release: the fixes below are only on master.
    return horovod is None or horovod.release <= (0, 28, 1)


def _cmake4_applies(horovod: Optional[Version], frameworks: FrameworkVersions, toolchain: Toolchain) -> bool:
    return _upto_0281(horovod) and toolchain.cmake is not None and toolchain.cmake.release >= (4,)


def _cmake4_variables(workdir: Path, env: Mapping[str, str]) -> List[Tuple[str, str]]:
    return [("CMAKE_POLICY_VERSION_MINIMUM", "3.5")]


def _gcc13_applies(horovod: Optional[Version], frameworks: FrameworkVersions, toolchain: Toolchain) -> bool:
    return (_upto_0281(horovod) and toolchain.cxx_family == "gnu" and toolchain.cxx_version is not None
            and toolchain.cxx_version.release >= (13,))


_GCC13_INCLUDES = "-include cstdint -include string -include stdexcept"


def _gcc13_variables(workdir: Path, env: Mapping[str, str]) -> List[Tuple[str, str]]:
    current = env.get("CXXFLAGS", os.environ.get("CXXFLAGS", "")).strip()
    if _GCC13_INCLUDES in current:
        return []
    return [("CXXFLAGS", (current + " " + _GCC13_INCLUDES).strip())]


#: All rules, in the order they are applied.
RULES: Tuple[FixRule, ...] = (
    FixRule(
        id="horovod-torch-cxx17",
        title="compile Horovod's PyTorch extension as C++17 (a CXX wrapper turns -std=c++14 into -std=c++17)",
        source="horovod issues #3996/#4014, PR #3998 (master only); proven here: 0.28.1 + torch 2.13.0+cpu "
               "builds and runs a 2-rank Gloo allreduce (docs/reference/horovod.md)",
        applies=_torch_cxx17_applies,
        variables=_torch_cxx17_variables,
        write_files=_torch_cxx17_write,
    ),
    FixRule(
        id="horovod-cmake4-policy",
        title="let CMake >= 4 configure Gloo's cmake_minimum_required(VERSION 2.8.12) "
              "(CMAKE_POLICY_VERSION_MINIMUM=3.5)",
        source="CMake 4.0 release notes (compatibility with CMake < 3.5 removed; the "
               "CMAKE_POLICY_VERSION_MINIMUM variable); horovod 0.28.1 third_party/gloo/CMakeLists.txt; "
               "proven on an H100 with cmake 4.4.3 (docs/gpu-proof.md, run 2)",
        applies=_cmake4_applies,
        variables=_cmake4_variables,
    ),
    FixRule(
        id="horovod-gcc13-includes",
        title="force-include <cstdint>, <string>, <stdexcept> for GNU C++ >= 13 "
              "(CXXFLAGS=" + _GCC13_INCLUDES + ")",
        source="horovod PR #3957 (master only; docs/reference/horovod.md); gcc 13 porting notes (libstdc++ "
               "headers no longer include <cstdint>); proven on an H100 with gcc 13.3 (docs/gpu-proof.md, run 2)",
        applies=_gcc13_applies,
        variables=_gcc13_variables,
    ),
)


def applicable(horovod: Optional[Version], frameworks: FrameworkVersions,
               toolchain: Optional[Toolchain] = None) -> List[FixRule]:
    """The rules that apply to this Horovod version, these framework versions and this toolchain.

    Args:
        horovod: the Horovod version to build, or None (unknown: every Horovod release counts).
        frameworks: ``{"pytorch": Version, …}``.
        toolchain: what :func:`probe_toolchain` found; None: unknown (toolchain rules do not apply).
    Returns:
        the rules in :data:`RULES` order.
    """
    tc = toolchain or Toolchain()
    return [rule for rule in RULES if rule.applies(horovod, frameworks, tc)]


def _framework_of(package: str) -> str:
    from envtool.core import frameworks

    fw = frameworks.by_package(package)
    return fw.name if fw else ""


def framework_versions_from_pins(pins) -> Dict[str, Version]:
    """Framework versions a spec pins to one version.

    Args:
        pins: :class:`~envtool.spec.model.Pin` objects (pip and conda), parsed at load time.
    Returns:
        ``{"pytorch": Version, "tensorflow": Version, "mxnet": Version}`` for the frameworks
        pinned to one exact version (``==X``, a bare ``X``); ranges and wildcards are left out.
    """
    out: Dict[str, Version] = {}
    for pin in pins:
        key = _framework_of(pin.name or "")
        # parsed_version: kept by envtool.spec.load; None for a conda version PEP 440 cannot read
        if not key or pin.wildcard or pin.parsed_version is None:
            continue
        out.setdefault(key, Version(pin.parsed_version.public))  # the local label (+cpu) left out
    return out
