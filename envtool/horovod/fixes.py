"""Named build fixes: rules that patch a Horovod build only where a known breakage applies.

Each rule says which Horovod versions × framework versions it applies to, where the fact comes
from, and what it adds to the build environment. ``plan`` lists the rules that apply; the
Horovod build step evaluates them again against the installed framework versions.
"""
from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from packaging.version import Version

#: Framework name (spec spelling) → installed/pinned version.
FrameworkVersions = Mapping[str, Version]


@dataclass(frozen=True)
class FixRule:
    """One named fix.

    Attributes:
        id: stable id shown in plans and logs, and part of the wheel-cache key.
        title: one line for people.
        source: where the breakage and the fix are documented.
        applies: ``(horovod_version, framework_versions) -> bool``.
        prepare: ``(workdir, env) -> [(name, value), …]`` writes any helper files under
            ``workdir`` (a directory that outlives the build) and returns the variables to set.
    """

    id: str
    title: str
    source: str
    applies: Callable[[Optional[Version], FrameworkVersions], bool]
    prepare: Callable[[Path, Mapping[str, str]], List[Tuple[str, str]]]


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


def _torch_cxx17_applies(horovod: Optional[Version], frameworks: FrameworkVersions) -> bool:
    torch = frameworks.get("pytorch")
    if torch is None:
        return False
    # Every Horovod release up to 0.28.1 (the last, 2023-06) asks for C++14.
    return (horovod is None or horovod.release <= (0, 28, 1)) and torch.release >= (2, 1)


def _torch_cxx17_prepare(workdir: Path, env: Mapping[str, str]) -> List[Tuple[str, str]]:
    workdir.mkdir(parents=True, exist_ok=True)
    wrapper = workdir / "c++17-wrapper"
    wrapper.write_text(_CXX_WRAPPER)
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    real = env.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    if os.path.basename(real) == wrapper.name:
        real = shutil.which("g++") or "g++"
    return [("CXX", str(wrapper)), ("ENVTOOL_REAL_CXX", real)]


#: All rules, in the order they are applied.
RULES: Tuple[FixRule, ...] = (
    FixRule(
        id="horovod-torch-cxx17",
        title="compile Horovod's PyTorch extension as C++17 (a CXX wrapper turns -std=c++14 into -std=c++17)",
        source="horovod issues #3996/#4014, PR #3998 (master only); proven here: 0.28.1 + torch 2.13.0+cpu "
               "builds and runs a 2-rank Gloo allreduce (shared/reference/horovod.md)",
        applies=_torch_cxx17_applies,
        prepare=_torch_cxx17_prepare,
    ),
)


def applicable(horovod: Optional[Version], frameworks: FrameworkVersions) -> List[FixRule]:
    """The rules that apply to this Horovod version and these framework versions."""
    return [rule for rule in RULES if rule.applies(horovod, frameworks)]


_FRAMEWORK_NAMES = {"torch": "pytorch", "pytorch": "pytorch", "pytorch-base": "pytorch", "pytorch-cpu": "pytorch",
                    "tensorflow": "tensorflow", "tensorflow-base": "tensorflow", "tensorflow-gpu": "tensorflow",
                    "tensorflow-cpu": "tensorflow", "mxnet": "mxnet"}


def framework_versions_from_pins(pip: List[str], conda: List[str]) -> Dict[str, Version]:
    """Framework versions a spec pins to one version.

    Args:
        pip: pip requirements (``torch==2.13.0``), parsed with ``packaging``.
        conda: conda match specs (``pytorch-base 1.7.1.*``, ``pytorch==1.12.0``), parsed with
            py-rattler's ``MatchSpec``.
    Returns:
        ``{"pytorch": Version, "tensorflow": Version, "mxnet": Version}`` for the frameworks
        pinned to one version (``==X``, ``X``, ``X.*``); ranges are left out.
    """
    out: Dict[str, Version] = {}
    from packaging.requirements import InvalidRequirement, Requirement

    for text in pip:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        key = _FRAMEWORK_NAMES.get(req.name.lower())
        specs = list(req.specifier)
        if key and len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
            out.setdefault(key, Version(specs[0].version.split("+")[0]))
    if conda:
        from rattler import MatchSpec

        for text in conda:
            try:
                ms = MatchSpec(text)
            except Exception:  # rattler raises its own exception types
                continue
            key = _FRAMEWORK_NAMES.get(ms.name.normalized if ms.name else "")
            version = str(ms.version) if ms.version is not None else ""
            version = version.lstrip("=").removesuffix(".*")
            if key and version and not any(c in version for c in "<>!,|*"):
                try:
                    out.setdefault(key, Version(version))
                except Exception:
                    continue
    return out
