"""What is installed in a prefix, as a modulefile lists it: the prefix's kind, its packages and
versions, and the names ``--extensions spec`` keeps.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from envtool.spec.model import Pin, Spec

#: Packages whose versions go into a whatis line, in display order (pip and conda names).
KEY_PACKAGES = ("python", "torch", "pytorch", "pytorch-base", "tensorflow", "tensorflow-gpu", "tensorflow-cpu",
                "tensorflow-base", "mxnet", "horovod", "cudatoolkit", "cuda-version", "cudnn", "nccl", "mpi4py",
                "openmpi", "mpich", "numpy")


#: Package names (conda and pip) of the frameworks and Horovod, always listed under ``spec``.
FRAMEWORK_NAMES = ("torch", "pytorch", "pytorch-base", "pytorch-cpu", "tensorflow", "tensorflow-gpu",
                   "tensorflow-cpu", "tensorflow-base", "mxnet", "horovod")


#: Package names and versions listed in ``extensions(...)`` (a comma-separated list that Lmod
#: splits itself; anything else is left out rather than escaped).
EXT_RE = re.compile(r"[A-Za-z0-9_.+!-]+")

def prefix_kind(prefix: Path) -> str:
    """``conda`` (``conda-meta/`` exists), ``venv`` (``pyvenv.cfg`` exists) or ``prefix``
    (:attr:`envtool.core.prefix.PrefixData.kind`)."""
    from envtool.core.prefix import PrefixData

    return PrefixData(Path(prefix)).kind


def installed_packages(prefix: Path) -> List[Tuple[str, str]]:
    """``(name, version)`` of the packages in ``prefix``, sorted by name, one entry per name.

    Conda records (``conda-meta/*.json``, read as JSON: the ``name`` and ``version`` fields
    every record has, per conda's PrefixRecord) come first and win over a pip distribution of
    the same name; both come from :class:`~envtool.core.prefix.PrefixData`.
    A venv's Python version is read from ``pyvenv.cfg`` (``version``, written by ``venv`` since
    Python 3.11; ``version_info`` by virtualenv).
    """
    from envtool.core.prefix import PrefixData

    data = PrefixData(Path(prefix))
    found: Dict[str, str] = dict(data.conda_versions())
    if "python" not in found:
        cfg = data.venv_config()
        version = cfg.get("version") or cfg.get("version_info")
        if version:
            found["python"] = version
    for name, version in data.versions().items():
        found.setdefault(name, version)
    return sorted(found.items())


def pin_package_name(pin: Pin, ecosystem: str) -> Optional[str]:
    """The package name ``pin`` names, as written (not yet canonicalised), or None when it names none
    or cannot be read.

    The one place in :mod:`envtool.modules` that reads a :class:`~envtool.spec.model.Pin`'s
    ``value``: a conda match spec is read with py-rattler's ``MatchSpec``
    (https://conda.github.io/rattler/py-rattler/), a pip requirement with pypa ``packaging``'s
    ``Requirement`` (PEP 508). When ``Pin`` carries its parsed value, this becomes one line.

    Args:
        pin: a pin of ``spec.packages.conda`` or ``spec.packages.pip``.
        ecosystem: ``conda`` or ``pip``.
    Returns:
        the name, or None.
    """
    if ecosystem == "conda":
        from rattler import MatchSpec  # lazy: heavy import

        try:
            ms = MatchSpec(pin.value)
        except Exception:  # noqa: BLE001 - the spec loader already checked the pin
            return None
        return ms.name.normalized if ms.name is not None else None
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(pin.value).name
    except InvalidRequirement:
        return None


def extension_names(spec: Optional[Spec]) -> Set[str]:
    """The package names ``--extensions spec`` keeps: every package the spec names
    (:func:`pin_package_name`), the frameworks and Horovod (:data:`FRAMEWORK_NAMES`). Names are
    compared canonicalised (PEP 503).

    Args:
        spec: the spec, or None (then only the frameworks and Horovod).
    Returns:
        a set of canonical names.
    """
    from packaging.utils import canonicalize_name

    names: Set[str] = {canonicalize_name(n) for n in FRAMEWORK_NAMES}
    if spec is None:
        return names
    for ecosystem, pins in (("conda", spec.packages.conda), ("pip", spec.packages.pip)):
        for pin in pins:
            name = pin_package_name(pin, ecosystem)
            if name is not None:
                names.add(canonicalize_name(name))
    return names
