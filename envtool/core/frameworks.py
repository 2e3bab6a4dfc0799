"""The one table of deep-learning frameworks Horovod builds against, and all their names (core layer).

Each framework has one row: the name a spec uses (``horovod.frameworks``), the label
``horovodrun --check-build`` prints, the ``HOROVOD_WITH_<X>`` suffix, the module Python imports,
Horovod's binding module, the pip distribution names and the conda package names it ships under.

Sources: Horovod's build variables and check-build labels (horovod@v0.28.1:docs/install.rst,
horovod@v0.28.1:horovod/runner/launch.py ``check_build``; docs/reference/horovod.md);
conda package names from the Open-CE feedstocks (``pytorch-base``, ``tensorflow-base``:
open-ce/pytorch-feedstock, open-ce/tensorflow-feedstock) and conda-forge (``pytorch``,
``pytorch-cpu``, ``tensorflow``, ``tensorflow-cpu``, ``mxnet``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class Framework:
    """One framework's names.

    Attributes:
        name: the spec's name (``pytorch``).
        label: ``horovodrun --check-build``'s label (``PyTorch``).
        build_var: the ``HOROVOD_WITH_<X>``/``HOROVOD_WITHOUT_<X>`` suffix (``PYTORCH``).
        module: the Python import name (``torch``).
        binding: Horovod's binding module (``horovod.torch``).
        pip_names: pip distribution names, most common first.
        conda_names: conda package names, most common first.
    """

    name: str
    label: str
    build_var: str
    module: str
    binding: str
    pip_names: Tuple[str, ...]
    conda_names: Tuple[str, ...]

    @property
    def package_names(self) -> Tuple[str, ...]:
        """Every package name (pip and conda) this framework ships under."""
        return tuple(dict.fromkeys(self.pip_names + self.conda_names))


#: In the order ``horovodrun --check-build`` lists them.
FRAMEWORKS: Tuple[Framework, ...] = (
    Framework("tensorflow", "TensorFlow", "TENSORFLOW", "tensorflow", "horovod.tensorflow",
              ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"),
              ("tensorflow", "tensorflow-base", "tensorflow-cpu", "tensorflow-gpu")),
    Framework("pytorch", "PyTorch", "PYTORCH", "torch", "horovod.torch",
              ("torch",), ("pytorch", "pytorch-base", "pytorch-cpu", "pytorch-gpu")),
    Framework("mxnet", "MXNet", "MXNET", "mxnet", "horovod.mxnet", ("mxnet",), ("mxnet",)),
)

#: Spec names, in check-build order.
NAMES: Tuple[str, ...] = tuple(f.name for f in FRAMEWORKS)
#: check-build labels, in check-build order.
LABELS: Tuple[str, ...] = tuple(f.label for f in FRAMEWORKS)

_BY_NAME: Dict[str, Framework] = {f.name: f for f in FRAMEWORKS}
_BY_PACKAGE: Dict[str, Framework] = {n: f for f in FRAMEWORKS for n in f.package_names}


def get(name: str) -> Framework:
    """The framework a spec calls ``name``.

    Raises:
        KeyError: not one of :data:`NAMES`.
    """
    return _BY_NAME[name]


def by_label(label: str) -> Optional[Framework]:
    """The framework check-build calls ``label`` (``PyTorch``), or None."""
    return next((f for f in FRAMEWORKS if f.label == label), None)


def by_package(name: str) -> Optional[Framework]:
    """The framework a pip or conda package ``name`` belongs to (``pytorch-base`` → pytorch), or None."""
    return _BY_PACKAGE.get(name.lower())
