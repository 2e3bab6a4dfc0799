"""Read and write locks through conda-lock's own models (``conda_lock.lockfile``).

Writing builds a ``conda_lock.lockfile.v2prelim.models.Lockfile`` and hands it to
``conda_lock.lockfile.write_conda_lock_file``, which stores the v1 schema (``version: 1``,
one entry per package, platform and category) that ``conda-lock install`` and ``conda-lock
render`` read. Reading goes through ``conda_lock.lockfile.parse_conda_lock_file``.
(conda-lock 4.0.3: ``conda_lock/lockfile/__init__.py``, ``lockfile/v1/models.py``.)
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from envtool.core.atomic import umask_mode
from envtool.core.errors import UsageError
from envtool.core.inputs import check_input
from envtool.lock.model import (BUILT_CATEGORY, META_BASE, META_BASE_PACKAGES, META_BUILT_PREFIX, META_ENGINE, META_KIND, META_PACKAGES,
                                META_PIP_INDEXES, META_PYTHON, META_SITE, META_SPEC, META_SPEC_FIELDS, META_SPEC_HASH, BaseSet,
                                LockData, LockedPackage, packages_stamp)
from envtool.core.platforms import optional_interpreter

#: Archive suffixes of conda packages (conda docs, "Package naming conventions").
CONDA_ARCHIVES = (".conda", ".tar.bz2")


def to_conda_lock(data: LockData):
    """``data`` as a ``conda_lock.lockfile.v2prelim.models.Lockfile``.

    Packages envtool builds itself go into the :data:`~envtool.lock.model.BUILT_CATEGORY`
    category (optional in the v1 file); everything else is ``main``.

    Raises:
        UsageError: conda-lock's model rejects an entry (e.g. a conda package without MD5).
    """
    from conda_lock.lockfile.v2prelim.models import HashModel, LockedDependency, Lockfile, LockMeta
    from pydantic import ValidationError

    custom: Dict[str, str] = {META_KIND: data.kind}
    for key, value in ((META_SPEC, data.spec), (META_SPEC_HASH, data.spec_hash), (META_SITE, data.site),
                       (META_ENGINE, data.engine)):
        if value:
            custom[key] = value
    if data.interpreter is not None:
        custom[META_PYTHON] = data.interpreter.to_text()
    if data.spec_fields:
        custom[META_SPEC_FIELDS] = json.dumps(dict(data.spec_fields), sort_keys=True, separators=(",", ":"))
    if data.pip_indexes:
        custom[META_PIP_INDEXES] = json.dumps(dict(data.pip_indexes), sort_keys=True, separators=(",", ":"))
    if data.base is not None:
        custom[META_BASE] = json.dumps({"kind": data.base.kind, "prefix": data.base.prefix,
                                        "records": data.base.records}, sort_keys=True, separators=(",", ":"))
        custom[META_BASE_PACKAGES] = json.dumps(dict(data.base.packages), sort_keys=True, separators=(",", ":"))
    custom[META_PACKAGES] = packages_stamp(data.packages)
    packages = []
    try:
        for p in data.packages:
            if p.built:
                custom[META_BUILT_PREFIX + p.key[1]] = p.built
            packages.append(LockedDependency(
                name=p.name, version=p.version, manager=p.manager, platform=p.platform,
                dependencies=dict(p.dependencies), url=p.url,
                hash=HashModel(md5=p.md5 or None, sha256=p.sha256 or None),
                build=p.build or None, categories={BUILT_CATEGORY if p.built else "main"}))
        meta = LockMeta(content_hash=dict(data.content_hash), channels=list(data.channels),
                        platforms=list(data.platforms), sources=list(data.sources), custom_metadata=custom)
    except ValidationError as exc:
        raise UsageError(f"cannot express the lock in conda-lock's model: {exc}") from None
    return Lockfile(package=packages, metadata=meta)


def write_lock(data: LockData, path: Path) -> Path:
    """Write ``data`` to ``path`` (atomically: a temporary sibling, then a rename), with the mode a
    new file gets under the process's umask (``0644`` under umask 022), not ``mkstemp``'s ``0600``.

    Returns:
        ``path``.
    Raises:
        UsageError: see :func:`to_conda_lock`.
    """
    from conda_lock.lockfile import write_conda_lock_file

    path = Path(path)
    content = to_conda_lock(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:  # name the lock asked for, not the temporary file
        exc.filename = str(path)
        raise
    os.close(fd)
    try:
        tmp_path = Path(tmp)
        write_conda_lock_file(content, tmp_path, metadata_choices=None, include_help_text=False)
        tmp_path.write_text(header(data, path.name) + tmp_path.read_text())
        os.chmod(tmp_path, umask_mode())  # mkstemp made it 0600: a lock is as readable as a new file
        os.replace(tmp_path, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None or str(exc.filename) == tmp:
            exc.filename = str(path)
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def header(data: LockData, name: str) -> str:
    """The comment block at the top of a lock written by envtool (how to use it)."""
    what = f"spec {data.spec}" if data.spec else "an environment"
    lines = [f"Lock of {what} ({data.kind}), written by envtool in the conda-lock v1 format. Do not edit.",
             "Recreate the environment (packages exactly as locked, Horovod built by envtool):",
             f"    envtool create {data.spec or 'SPEC'} --lock {name} --prefix PREFIX",
             "pip entries install by name, version and SHA-256 through the installing machine's pip configuration.",
             *(["Packages not on PyPI come from the index named in metadata.custom_metadata."
                f"{META_PIP_INDEXES} (or a mirror of it: envtool config set index_mirrors 'PUBLIC=MIRROR')."]
               if data.pip_indexes else []),
             f"conda-lock reads it too: conda-lock render --kind explicit {name}; conda-lock install -n ENV {name}"]
    if any(p.built for p in data.packages):
        lines.append(f"Packages in the optional category {BUILT_CATEGORY} (Horovod) are built by envtool with the "
                     "spec's build flags;")
        lines.append("conda-lock leaves them out unless given -e " + BUILT_CATEGORY + ".")
    lines.append(f"Check it against drift: envtool diff --prefix PREFIX --lock {name}")
    return "".join(f"# {line}\n" for line in lines)


def read_lock(path: Path) -> LockData:
    """Read a conda-lock file (v1, or conda-lock's prerelease v2) into :class:`LockData`.

    Args:
        path: the ``conda-lock.yml``.
    Returns:
        the lock; entries of several categories are merged (one per platform and name).
    Raises:
        UsageError: missing file, not YAML, no or unknown ``version``, or an entry that
            conda-lock's model rejects (exit 2; the message names the file).
    """
    import yaml
    from conda_lock.lockfile import MissingLockfileVersion, UnknownLockfileVersion, parse_conda_lock_file
    from pydantic import ValidationError

    path = Path(path)
    check_input(path, "lock file")  # a FIFO or a device: exit 2 at once, never read
    if not path.is_file():
        raise UsageError(f"{path}: expected an existing conda-lock file")
    try:
        lock = parse_conda_lock_file(path)
    except MissingLockfileVersion:
        raise UsageError(f"{path}: version: expected 1 (a conda-lock file), got none") from None
    except UnknownLockfileVersion as exc:
        raise UsageError(f"{path}: version: expected 1: {exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: expected YAML: {exc}") from None
    except AssertionError:
        # conda-lock asserts while merging entries of one package (conda_lock/lockfile/__init__.py)
        raise UsageError(f"{path}: package: a package is listed twice for one platform with conflicting "
                         "entries (expected one entry per package, platform and category)") from None
    except (ValidationError, AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:
        detail = f"unexpected value for {exc}" if isinstance(exc, KeyError) else str(exc)
        raise UsageError(f"{path}: not a valid conda-lock file: {detail[:500]}") from None
    custom = dict(lock.metadata.custom_metadata or {})
    packages: List[LockedPackage] = []
    seen: Dict[tuple, LockedPackage] = {}
    for d in lock.package:
        name_key = LockedPackage(manager=d.manager, name=d.name, version="", platform="", url="").key[1]
        built = custom.get(META_BUILT_PREFIX + name_key, "") if BUILT_CATEGORY in d.categories else ""
        entry = LockedPackage(
            manager=d.manager, name=d.name, version=d.version, platform=d.platform, url=d.url,
            sha256=d.hash.sha256 or "", md5=d.hash.md5 or "", build=d.build or "",
            dependencies=tuple(d.dependencies.items()), built=built)
        where = f"{path}: package {d.manager} {d.name} {d.version} ({d.platform})"
        other = seen.get((entry.platform,) + entry.key)
        if other is not None:
            raise UsageError(f"{where}: expected one entry per package and platform, but {d.name} is listed "
                             f"twice ({other.version} and {entry.version})")
        seen[(entry.platform,) + entry.key] = entry
        _check_entry(entry, where)
        packages.append(entry)
    meta = lock.metadata
    _check_complete(path, packages, custom.get(META_PACKAGES, ""))
    try:
        spec_fields = tuple(sorted(json.loads(custom.get(META_SPEC_FIELDS) or "{}").items()))
    except (ValueError, AttributeError, RecursionError):
        raise UsageError(f"{path}: metadata.custom_metadata.{META_SPEC_FIELDS}: expected a JSON object") from None
    pip_indexes = _pip_indexes(path, custom.get(META_PIP_INDEXES))
    base = _base_set(path, custom.get(META_BASE), custom.get(META_BASE_PACKAGES))
    return LockData(
        packages=tuple(packages), platforms=tuple(meta.platforms),
        channels=tuple(c.url for c in meta.channels), content_hash=tuple(sorted(meta.content_hash.items())),
        spec=custom.get(META_SPEC, ""), spec_hash=custom.get(META_SPEC_HASH, ""), site=custom.get(META_SITE, ""),
        kind=custom.get(META_KIND, ""), engine=custom.get(META_ENGINE, ""), sources=tuple(meta.sources),
        interpreter=optional_interpreter(custom.get(META_PYTHON)), spec_fields=spec_fields, pip_indexes=pip_indexes,
        base=base)


def _base_set(path: Path, head, packages) -> Optional[BaseSet]:
    """``metadata.custom_metadata.envtool.base`` and ``envtool.base_packages`` as a :class:`BaseSet`,
    or None when the lock has neither (an environment that is not layered).

    Raises:
        UsageError: one is there without the other, or either is not the JSON object
            :func:`to_conda_lock` writes (names the field and what was expected).
    """
    import re

    if head is None and packages is None:
        return None
    field = f"{path}: metadata.custom_metadata"
    try:
        meta = json.loads(head) if isinstance(head, str) and len(head) <= 65536 else None
    except (ValueError, RecursionError):
        meta = None
    if not (isinstance(meta, dict) and meta.get("kind") in ("venv", "conda", "system")
            and isinstance(meta.get("prefix"), str) and isinstance(meta.get("records"), str)
            and re.fullmatch(r"[0-9]+ sha256:[0-9a-f]{64}", meta["records"])):
        raise UsageError(f"{field}.{META_BASE}: expected a JSON object with kind (venv, conda or system), "
                         "prefix and records ('<count> sha256:<64 hex digits>')")
    try:
        pkgs = json.loads(packages) if isinstance(packages, str) and len(packages) <= 4 * 1024 * 1024 else None
    except (ValueError, RecursionError):
        pkgs = None
    if not (isinstance(pkgs, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in pkgs.items())):
        raise UsageError(f"{field}.{META_BASE_PACKAGES}: expected a JSON object of package names to versions")
    if int(meta["records"].split(" ", 1)[0]) != len(pkgs):
        raise UsageError(f"{field}.{META_BASE_PACKAGES}: {META_BASE} records {meta['records'].split(' ', 1)[0]} "
                         f"base packages but {len(pkgs)} are listed: the lock was edited; write it again")
    return BaseSet(kind=meta["kind"], prefix=meta["prefix"], packages=tuple(sorted(pkgs.items())),
                   records=meta["records"])


def _pip_indexes(path: Path, text) -> tuple:
    """``metadata.custom_metadata.envtool.pip_indexes`` as ``((project, https URL), …)``. ``create``
    hands these URLs to the installer and prints them, so the value must be a JSON object of
    normalized project names (PEP 503: lower case letters, digits, ``-``, ``_``, ``.``) to ``https://``
    URLs without credentials, query, fragment or control characters, as a spec's ``index:`` (at most
    256 entries); anything else is refused (exit 2, naming the field)."""
    if not text:
        return ()
    import re
    from urllib.parse import urlsplit

    field = f"{path}: metadata.custom_metadata.{META_PIP_INDEXES}"
    try:
        data = json.loads(text) if len(text) <= 65536 else None
    except (ValueError, TypeError, RecursionError):
        data = None
    if not isinstance(data, dict) or len(data) > 256:
        raise UsageError(f"{field}: expected a JSON object of project names to index URLs")

    def good(name, url) -> bool:
        if not (isinstance(name, str) and re.fullmatch(r"[a-z0-9]([a-z0-9._-]{0,200}[a-z0-9])?", name)
                and isinstance(url, str) and len(url) <= 2048):
            return False
        if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
            return False
        try:
            parts = urlsplit(url)
        except ValueError:
            return False
        return (parts.scheme == "https" and bool(parts.hostname) and not parts.username and not parts.password
                and not parts.query and not parts.fragment)

    for name, url in data.items():
        if not good(name, url):
            raise UsageError(f"{field}: expected normalized project names and https:// index URLs without "
                             f"credentials, query or fragment, got {ascii(name)[:100]}: {ascii(url)[:300]}")
    return tuple(sorted(data.items()))


def _check_entry(p: LockedPackage, where: str) -> None:
    """Refuse an entry that no installer could use (exit 2, naming it).

    Conda entries must have a URL ``<channel>/<subdir>/<file>`` whose subdir is the entry's
    platform or ``noarch`` and whose file is a conda archive (``.conda``, ``.tar.bz2``); pip
    entries must have a SHA-256 (installs are ``--require-hashes``) unless envtool builds them.

    Raises:
        UsageError: the entry fails one of those.
    """
    import re

    if p.sha256 and not re.fullmatch(r"[0-9a-f]{64}", p.sha256):
        raise UsageError(f"{where}: hash.sha256: expected 64 hex digits, got {p.sha256[:80]!r}")
    if p.md5 and not re.fullmatch(r"[0-9a-f]{32}", p.md5):
        raise UsageError(f"{where}: hash.md5: expected 32 hex digits, got {p.md5[:80]!r}")
    if p.manager == "conda":
        parts = p.url.rsplit("/", 2)
        if len(parts) != 3 or "://" not in parts[0] or parts[1] not in (p.platform, "noarch") \
                or not parts[2].endswith(CONDA_ARCHIVES):
            raise UsageError(f"{where}: url: expected <channel>/{p.platform} or <channel>/noarch followed by a "
                             f".conda or .tar.bz2 file, got {p.url[:200]!r}")
    elif p.manager == "pip":
        if not p.sha256 and not p.built:
            raise UsageError(f"{where}: hash.sha256: expected a SHA-256 (pip installs locked packages with "
                             "--require-hashes)")
    else:
        raise UsageError(f"{where}: manager: expected conda or pip, got {p.manager[:50]!r}")


def _check_complete(path: Path, packages: List[LockedPackage], stamp: str) -> None:
    """Compare the entries with the lock's own :data:`META_PACKAGES` stamp.

    Locks written by other tools (no stamp) are taken as they are.

    Raises:
        UsageError: the stamp does not match (entries lost or edited).
    """
    if not stamp:
        return
    now = packages_stamp(packages)
    if now != stamp:
        declared = stamp.split(" ", 1)[0]
        raise UsageError(f"{path}: package: the lock declares {declared} entries with digest "
                         f"{stamp.split(':')[-1][:12]} (metadata.custom_metadata.{META_PACKAGES}) but holds "
                         f"{len(packages)} with digest {now.split(':')[-1][:12]}: it is incomplete or was edited; "
                         "write it again with 'envtool lock'")
