"""This machine's platform and Python interpreters, in the terms locks and caches use (core layer).

* conda platforms (``linux-64``, ``linux-ppc64le`` …): the subdir names of conda channels
  (conda docs, "Channels and generating an index"; ``rattler.Platform`` knows the same list);
* an :class:`Interpreter`: implementation, version and platform tag of a Python, which decide
  which wheels pip may install (PEP 425 tags; ``sysconfig.get_platform()``).

Nothing here imports from the rest of envtool except :mod:`envtool.core.errors`.
"""
from __future__ import annotations

import json
import platform as _platform
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from typing import Optional

from envtool.core import external
from envtool.core.errors import EnvtoolError

#: ``platform.machine()`` → the arch part of a conda platform name.
_CONDA_ARCH = {"x86_64": "64", "AMD64": "64", "arm64": "arm64"}


def conda_platform() -> str:
    """This machine's conda platform.

    Returns:
        ``linux-64``, ``linux-ppc64le``, ``linux-aarch64``, ``osx-arm64`` … (``<system>-<arch>``).
    """
    machine = _platform.machine()
    system = {"Linux": "linux", "Darwin": "osx"}.get(_platform.system(), _platform.system().lower())
    return f"{system}-{_CONDA_ARCH.get(machine, machine)}"


@dataclass(frozen=True)
class Interpreter:
    """A Python interpreter as far as binary compatibility of wheels goes.

    Attributes:
        implementation: ``sys.implementation.name`` (``cpython``, ``pypy``).
        version: full ``X.Y.Z`` version.
        platform: ``sysconfig.get_platform()`` (``linux-x86_64``, ``linux-ppc64le``).
    """

    implementation: str
    version: str
    platform: str

    @property
    def major_minor(self) -> str:
        """``X.Y``: what wheel tags (``cp311``) and ``site-packages`` paths depend on."""
        return ".".join(self.version.split(".")[:2])

    def compatible_with(self, other: "Interpreter") -> bool:
        """True when wheels chosen for ``other`` install on this one: same implementation, same
        ``X.Y`` and same platform (the patch version does not change the ABI, PEP 384/425)."""
        return (self.implementation, self.major_minor, self.platform) == (
            other.implementation, other.major_minor, other.platform)

    def describe(self) -> str:
        """``cpython 3.11.7 (linux-x86_64)``."""
        return f"{self.implementation} {self.version} ({self.platform})"

    def to_text(self) -> str:
        """``cpython 3.11.7 linux-x86_64``: the form stored in a lock's metadata."""
        return f"{self.implementation} {self.version} {self.platform}"

    @classmethod
    def from_text(cls, text: str) -> "Interpreter":
        """Parse :meth:`to_text`'s form.

        Raises:
            ValueError: not three space-separated words.
        """
        parts = text.split()
        if len(parts) != 3:
            raise ValueError(f"expected 'IMPLEMENTATION VERSION PLATFORM', got {text!r}")
        return cls(*parts)


def current_interpreter() -> Interpreter:
    """The interpreter running envtool."""
    return Interpreter(sys.implementation.name, _platform.python_version(), sysconfig.get_platform())


_PROBE = ("import json, platform, sys, sysconfig; print(json.dumps([sys.implementation.name, "
          "platform.python_version(), sysconfig.get_platform()]))")


def probe_interpreter(python: str, timeout: float = 60.0) -> Interpreter:
    """Ask the interpreter at ``python`` what it is (one short subprocess; none for ``sys.executable``).

    Args:
        python: path of a Python executable.
        timeout: seconds.
    Returns:
        its :class:`Interpreter`.
    Raises:
        EnvtoolError: it cannot be run or does not answer.
    """
    if python == sys.executable:
        return current_interpreter()
    try:
        proc = external.run([python, "-c", _PROBE], timeout=timeout)
        impl, version, plat = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        raise EnvtoolError(f"cannot ask {python} which interpreter it is: {exc}") from None
    return Interpreter(impl, version, plat)


def optional_interpreter(text: Optional[str]) -> Optional[Interpreter]:
    """:meth:`Interpreter.from_text` of ``text``, or None for an empty or malformed value."""
    if not text:
        return None
    try:
        return Interpreter.from_text(text)
    except ValueError:
        return None
