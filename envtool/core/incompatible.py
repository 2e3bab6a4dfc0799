"""Known incompatibilities: Horovod versions × package versions that cannot work together (core layer).

One table, :data:`KNOWN`: each row names the Horovod releases affected, the framework Horovod
must be built with for the row to matter, the packages whose versions decide it and the
versions that break, the upstream issue, and where each fact comes from. A new breakage is one
more row.

Two places use it, before anything is compiled:

* the spec rules (:func:`envtool.spec.rules.check`, run when a spec is loaded, so ``plan`` and
  ``create`` stop with exit 2) ask :func:`pin_only_broken` whether a package pin admits only
  broken versions (``tensorflow-cpu==2.17.0``, ``>=2.16``, ``==2.17.*``); a pin that admits a
  working version (``<2.16``, ``>=2.10``) or no pin at all is not refused there;
* the Horovod build step asks :func:`installed_hits` about the versions actually installed
  (a ``--clone`` of a base environment, an unpinned TensorFlow) and fails before compiling;
  ``plan`` notes that check where the pins leave it open (:func:`pins_exclude`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Mapping, Optional, Tuple

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envtool.core import frameworks


@dataclass(frozen=True)
class Incompatibility:
    """One known incompatibility.

    Attributes:
        id: stable id shown in errors (``horovod-tf216``).
        horovod: the Horovod versions affected, a PEP 440 specifier (``<=0.28.1``); a Horovod
            of unknown version (a ``horovod.source`` URL) counts as affected.
        framework: the framework Horovod must be built with (a name in ``horovod.frameworks``).
        packages: the pip/conda package names whose versions decide the row.
        versions: the broken versions of ``packages``, a PEP 440 specifier (``>=2.16.0.dev0``:
            the 2.16 pre-releases included).
        broken_text: the broken versions for people (``TensorFlow >= 2.16``).
        expected: what to pin instead, in words (shown as "expected …").
        reason: one line for people: what breaks.
        url: the upstream issue.
        source: every public source of the row's facts.
    """

    id: str
    horovod: str
    framework: str
    packages: Tuple[str, ...]
    versions: str
    broken_text: str
    expected: str
    reason: str
    url: str
    source: str

    def affects_horovod(self, version: Optional[Version]) -> bool:
        """Whether Horovod ``version`` (None: unknown) is among :attr:`horovod`."""
        return version is None or SpecifierSet(self.horovod).contains(version, prereleases=True)

    def broken(self, version: Version) -> bool:
        """Whether a package at ``version`` is among :attr:`versions` (a local label such as
        ``+cpu`` is ignored, as PEP 440 ordering does)."""
        return SpecifierSet(self.versions).contains(Version(version.public), prereleases=True)

    def explain(self) -> str:
        """``known incompatibility ID: REASON; upstream: URL`` (for errors)."""
        return f"known incompatibility {self.id}: {self.reason}; upstream: {self.url}"


#: Horovod 0.28.1 is the last release (https://pypi.org/project/horovod/0.28.1/; tag v0.28.1 of
#: https://github.com/horovod/horovod, 2023-06-12, is its newest tag), and master has no fix for
#: either row (https://github.com/horovod/horovod/pull/4317, "Fix #4290", was withdrawn unmerged).
KNOWN: Tuple[Incompatibility, ...] = (
    Incompatibility(
        id="horovod-tf216",
        horovod="<=0.28.1",
        framework="tensorflow",
        packages=frameworks.get("tensorflow").package_names,
        versions=">=2.16.0.dev0",
        broken_text="TensorFlow >= 2.16",
        expected="TensorFlow < 2.16 (e.g. tensorflow-cpu==2.15.1)",
        reason="no Horovod release (0.28.1 is the last) works with TensorFlow >= 2.16: "
               "AttributeError: 'Variable' object has no attribute 'ref' (TensorFlow 2.16 brings Keras 3)",
        url="https://github.com/horovod/horovod/issues/4290",
        source="horovod/horovod#4290 \"Doesn't Horovod support TensorFlow >= 2.16.1 ?\" (open, 2025-05: "
               "TensorFlow 2.16.1 + Horovod 0.28.1); TensorFlow 2.16.1 release notes (Keras 3 is the default "
               "Keras: https://github.com/tensorflow/tensorflow/releases/tag/v2.16.1)",
    ),
    Incompatibility(
        id="horovod-keras3",
        horovod="<=0.28.1",
        framework="tensorflow",
        packages=("keras",),
        versions=">=3.0.0.dev0",
        broken_text="Keras >= 3",
        expected="Keras < 3 (e.g. keras==2.15.0 with TensorFlow 2.15)",
        reason="horovod.tensorflow.keras calls Variable.ref() (horovod/_keras/__init__.py@v0.28.1), "
               "which Keras 3 variables do not have (https://github.com/keras-team/keras/issues/19970): "
               "the error of horovod#4290",
        url="https://github.com/horovod/horovod/issues/4290",
        source="horovod@v0.28.1:horovod/_keras/__init__.py (var.ref()); keras-team/keras#19970 \"keras.Variable "
               "no longer has ref method\"; horovod/horovod#4290 (the same AttributeError with TensorFlow 2.16.1, "
               "whose default Keras is 3: TensorFlow 2.16.1 release notes); no Horovod issue about Keras 3 "
               "itself was found",
    ),
)


# -- pins ------------------------------------------------------------------------------------------

#: A version number inside a conda version spec (``>=2.16,<2.18``, ``2.14.1.*``): only used to
#: pick test points (:func:`_admits`); py-rattler decides what the spec admits.
_CONDA_NUMBER = re.compile(r"\d+(?:\.\d+)*")


def _version(text: str) -> Optional[Version]:
    """``text`` as a Version (a trailing ``.*`` of a specifier left out), or None."""
    try:
        return Version(text[:-2] if text.endswith(".*") else text)
    except InvalidVersion:
        return None


def _test_points(boundaries: Iterable[Version]) -> List[Version]:
    """Versions that stand for every interval the boundaries cut the version line into: ``0``,
    a very large version, and each boundary, a version just above it and one just below it
    (``2.16`` → ``2.16``, ``2.16.0.0.0.1``, ``2.15.99999``)."""
    points = [Version("0"), Version("99999")]
    for b in boundaries:
        release = list(b.release)
        points += [b, Version(".".join(map(str, release + [0, 0, 0, 1])))]
        nonzero = [i for i, n in enumerate(release) if n]
        if nonzero:
            i = nonzero[-1]
            below = release[:i] + [release[i] - 1, 99999]
            points.append(Version(".".join(map(str, below))))
    return points


def _admits(admits: Callable[[Version], bool], boundaries: Iterable[Version],
            bad: SpecifierSet) -> Tuple[bool, bool]:
    """Whether a version constraint admits a version ``bad`` contains, and one it does not.

    Both are unions of intervals whose ends are among ``boundaries`` (the constraint's
    versions and ``bad``'s), so it is enough to try one version in each interval
    (:func:`_test_points`).

    Returns:
        ``(admits a broken version, admits a working version)``.
    """
    bounds = list(boundaries) + [v for v in (_version(s.version) for s in bad) if v is not None]
    admitted = [v for v in _test_points(bounds) if admits(v)]
    broken = [bad.contains(v, prereleases=True) for v in admitted]
    return any(broken), not all(broken)


def pin_admits(row: Incompatibility, pin) -> Optional[Tuple[bool, bool]]:
    """What a spec pin on one of the row's packages admits.

    Args:
        row: the incompatibility.
        pin: a :class:`~envtool.spec.model.Pin` as loaded (``requirement`` for pip, ``match_spec``
            for conda).
    Returns:
        None when the pin names none of :attr:`Incompatibility.packages`; else ``(admits a
        broken version, admits a working version)``: ``(True, False)`` for ``tensorflow-cpu==2.17.0``,
        ``>=2.16``, ``==2.17.*``, conda ``tensorflow-base 2.17.*``; ``(False, True)`` for ``==2.15.1``,
        ``<2.16``, conda ``1.14.*``; ``(True, True)`` for ``>=2.10``, a bare name, or versions
        that cannot be read.
    """
    if (pin.name or "").lower() not in row.packages:
        return None
    bad = SpecifierSet(row.versions)
    if pin.requirement is not None and len(pin.requirement.specifier):
        specifier = pin.requirement.specifier
        bounds = [v for v in (_version(s.version) for s in specifier) if v is not None]
        return _admits(lambda v: specifier.contains(v, prereleases=True), bounds, bad)
    text = pin.match_spec.version if pin.match_spec is not None else None
    if text:
        from rattler import Version as CondaVersion, VersionSpec  # conda's version rules

        try:
            spec = VersionSpec(str(text))
        except Exception:  # noqa: BLE001 - py-rattler raises its own error types
            return True, True
        bounds = [v for v in (_version(n) for n in _CONDA_NUMBER.findall(str(text))) if v is not None]
        return _admits(lambda v: spec.matches(CondaVersion(str(v))), bounds, bad)
    return True, True


def pin_only_broken(row: Incompatibility, pin) -> bool:
    """Whether a spec pin names one of the row's packages and admits only broken versions
    (:func:`pin_admits` is ``(True, False)``): what the spec rule refuses."""
    return pin_admits(row, pin) == (True, False)


def pins_exclude(row: Incompatibility, pins: Iterable[Any]) -> bool:
    """Whether some pin on one of the row's packages admits no broken version (``==2.15.1``,
    ``<2.16``, conda ``1.14.*``): then the row cannot apply to what gets installed."""
    return any((pin_admits(row, p) or (True, True))[0] is False for p in pins)


def spec_hits(horovod: Optional[Version], built_with: Iterable[str],
              pins: Iterable[Tuple[Any, Any]]) -> List[Tuple[Incompatibility, Any, Any]]:
    """The rows a spec's pins break.

    Args:
        horovod: the spec's Horovod version, or None (a source URL: every release counts).
        built_with: ``horovod.frameworks``.
        pins: ``(key, Pin)`` for each package pin; ``key`` is the caller's (where the pin is).
    Returns:
        ``[(row, key, pin)]`` in :data:`KNOWN` order, then pin order.
    """
    built_with = set(built_with)
    pins = list(pins)
    out = []
    for row in KNOWN:
        if row.framework not in built_with or not row.affects_horovod(horovod):
            continue
        out += [(row, key, pin) for key, pin in pins if pin_only_broken(row, pin)]
    return out


def installed_hits(horovod: Optional[Version], built_with: Iterable[str],
                   installed: Mapping[str, str]) -> List[Tuple[Incompatibility, str, str]]:
    """The rows the installed package versions break.

    Args:
        horovod: the Horovod version to build, or None (unknown: every release counts).
        built_with: the frameworks Horovod is built with (spec names).
        installed: package name → installed version (``{"tensorflow-cpu": "2.17.0"}``).
    Returns:
        ``[(row, package, version)]`` in :data:`KNOWN` order; an unreadable version is skipped.
    """
    built_with = set(built_with)
    out = []
    for row in KNOWN:
        if row.framework not in built_with or not row.affects_horovod(horovod):
            continue
        for package, text in installed.items():
            version = _version(text)
            if package.lower() in row.packages and version is not None and row.broken(version):
                out.append((row, package, text))
    return out
