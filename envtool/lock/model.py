"""Plain data for lockfiles, independent of conda-lock's pydantic models.

:mod:`envtool.lock.lockio` converts between these and conda-lock's models.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from envtool.core.platforms import Interpreter

#: Category (conda-lock "extra") of packages that envtool builds itself (Horovod): ``conda-lock
#: install`` and ``render`` leave them out unless asked (``-e envtool-build``), and ``create
#: --from-lock`` builds them with the normal build step instead of installing the URL.
BUILT_CATEGORY = "envtool-build"

#: Keys of conda-lock's ``metadata.custom_metadata`` that envtool writes.
META_SPEC = "envtool.spec"
META_SPEC_HASH = "envtool.spec_hash"
META_SITE = "envtool.site"
META_KIND = "envtool.kind"
META_ENGINE = "envtool.engine"
META_BUILT_PREFIX = "envtool.built."
#: ``cpython 3.11.7 linux-x86_64``: the interpreter a venv lock's pip part was resolved for.
META_PYTHON = "envtool.python"
#: JSON object: spec field → digest (:func:`envtool.lock.spec_hash.field_digests`), so that a
#: stale lock can name what changed.
META_SPEC_FIELDS = "envtool.spec_fields"
#: ``<count> sha256:<digest>`` over every entry (:func:`entries_digest`): a lock cut short or
#: edited by hand no longer matches and is refused.
META_PACKAGES = "envtool.packages"
#: custom_metadata key: the package indexes of pip entries that are not on PyPI, a JSON object
#: ``{project: public index URL}`` (the spec's ``index:`` pins), which ``create`` installs from.
META_PIP_INDEXES = "envtool.pip_indexes"
#: custom_metadata key of a layered environment's base (:class:`BaseSet`): a JSON object
#: ``{"kind": "venv"|"conda"|"system", "prefix": …, "records": "<count> sha256:<digest>"}``.
META_BASE = "envtool.base"
#: custom_metadata key: the base's packages, a JSON object ``{normalized name: version}``.
META_BASE_PACKAGES = "envtool.base_packages"


@dataclass(frozen=True)
class BaseSet:
    """The packages a layered environment sees from its base and does not hold (a venv with
    ``venv.system_site_packages``, a clone layered over another environment): not entries of
    the lock (nothing installs them), but recorded beside them, so a changed base can be told.

    Attributes:
        kind: ``venv``, ``conda`` or ``system`` (:attr:`envtool.engines.layer.SiteDirs.kind`).
        prefix: the base's prefix.
        packages: ``(normalized name, version)`` pairs, sorted.
        records: ``<count> sha256:<digest>`` over the packages' names, versions and ``RECORD``
            files (:func:`envtool.engines.layer.records_digest`).
    """

    kind: str
    prefix: str
    packages: Tuple[Tuple[str, str], ...]
    records: str


@dataclass(frozen=True)
class LockedPackage:
    """One locked package for one platform.

    Attributes:
        manager: ``conda`` or ``pip``.
        name: conda package name, or the pip distribution name as pip reports it.
        version: exact version (``2.13.0+cpu``).
        platform: ``linux-64``-style platform the entry is for.
        url: where the archive comes from (``https://…``, ``file://…``).
        sha256: archive SHA-256 (64 hex digits) or ``""`` when unknown.
        md5: archive MD5 (conda records; conda-lock requires it for conda packages) or ``""``.
        build: conda build string, ``""`` for pip.
        dependencies: ``(name, constraint)`` pairs (conda ``depends``; pip ``Requires-Dist``
            that apply on the platform).
        built: non-empty for a package envtool builds itself: the wheel-cache build key
            (snapshot of an env) or the requirement that is built (``horovod==0.28.1``, solve).
    """

    manager: str
    name: str
    version: str
    platform: str
    url: str
    sha256: str = ""
    md5: str = ""
    build: str = ""
    dependencies: Tuple[Tuple[str, str], ...] = ()
    built: str = ""

    @property
    def key(self) -> Tuple[str, str]:
        """``(manager, normalized name)``: how packages are matched across locks and prefixes."""
        return (self.manager, normalize(self.name, self.manager))


def normalize(name: str, manager: str) -> str:
    """Canonical name: PEP 503 normalization for pip, lower case for conda."""
    if manager == "pip":
        from packaging.utils import canonicalize_name

        return str(canonicalize_name(name))
    return name.lower()


@dataclass(frozen=True)
class LockData:
    """A whole lock.

    Attributes:
        packages: every entry, all platforms.
        platforms: the platforms it covers.
        channels: conda channels solved against, highest priority first (may be empty).
        content_hash: ``(platform, hash)`` pairs (:func:`envtool.lock.spec_hash.platform_hash`).
        spec: the spec's name, or ``""`` when unknown (a snapshot of a foreign prefix).
        spec_hash: :func:`envtool.lock.spec_hash.spec_hash` of the spec, or ``""``.
        site: the site the spec was resolved for, or ``""``.
        kind: ``solve`` (``envtool lock SPEC``) or ``snapshot`` (``lock --prefix``, ``create``).
        engine: ``venv`` or ``conda``.
        sources: spec files, relative to the lock's directory where possible.
        interpreter: the Python the pip part was resolved for (venv locks and snapshots), or None.
        spec_fields: ``(field, digest)`` pairs of the spec's lock-relevant fields, or ``()``.
        pip_indexes: ``(project, public index URL)`` pairs for pip entries served by an index
            other than PyPI (the spec's ``index:`` pins), or ``()``.
        base: what a layered environment sees from its base (:class:`BaseSet`), or None.
    """

    packages: Tuple[LockedPackage, ...]
    platforms: Tuple[str, ...]
    channels: Tuple[str, ...] = ()
    content_hash: Tuple[Tuple[str, str], ...] = ()
    spec: str = ""
    spec_hash: str = ""
    site: str = ""
    kind: str = "solve"
    engine: str = ""
    sources: Tuple[str, ...] = ()
    interpreter: Optional[Interpreter] = None
    spec_fields: Tuple[Tuple[str, str], ...] = ()
    pip_indexes: Tuple[Tuple[str, str], ...] = ()
    base: Optional[BaseSet] = None

    def for_platform(self, platform: str) -> List[LockedPackage]:
        """The entries for ``platform`` (conda first, then pip, in file order)."""
        return [p for p in self.packages if p.platform == platform]

    def built(self) -> Dict[str, str]:
        """Normalized name → build key or requirement of the packages envtool builds."""
        return {p.key[1]: p.built for p in self.packages if p.built}

    def by_key(self, platform: str) -> Dict[Tuple[str, str], LockedPackage]:
        """``(manager, normalized name)`` → entry, for ``platform``."""
        return {p.key: p for p in self.for_platform(platform)}


def pick_platform(lock: LockData, wanted: Optional[str], path: str) -> str:
    """The platform to use from ``lock``: ``wanted``, else this machine's, else the lock's only one.

    Raises:
        UsageError: the lock has no entry for that platform (exit 2).
    """
    from envtool.core.errors import UsageError
    from envtool.core.platforms import conda_platform

    if wanted:
        if wanted not in lock.platforms:
            raise UsageError(f"{path}: metadata.platforms: expected {wanted}, got {list(lock.platforms)}")
        return wanted
    here = conda_platform()
    if here in lock.platforms:
        return here
    raise UsageError(f"{path}: metadata.platforms: expected this machine's platform {here}, "
                     f"got {list(lock.platforms)}")



def entries_digest(packages: Sequence[LockedPackage]) -> str:
    """SHA-256 (64 hex digits) over every entry's identity: manager, name, version, platform, build,
    URL and hashes, in a canonical order. Written into a lock and checked when it is read, so a
    lock that lost entries (cut at a package boundary, still valid YAML) or was edited is refused.

    Args:
        packages: the lock's entries, any order.
    Returns:
        64 hex digits.
    """
    rows = sorted([p.manager, p.key[1], p.version, p.platform, p.build, p.url, p.sha256, p.md5] for p in packages)
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode("utf-8")).hexdigest()


def packages_stamp(packages: Sequence[LockedPackage]) -> str:
    """``<count> sha256:<digest>``: the value of :data:`META_PACKAGES`."""
    return f"{len(packages)} sha256:{entries_digest(packages)}"
