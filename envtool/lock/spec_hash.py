"""The spec's content hash: what a lock was solved from, so that a stale lock is detected.

Only fields that change which packages are installed (or how Horovod is built) take part:
engine, Python, CUDA, channels, package match specs and requirements, the Horovod section,
the site's name and modules. Provenance (marks, sources, notes), descriptions, ``expect`` and
exported variables are left out, as is the file's path (a lock made on one machine stays
valid on another).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any, Dict, List, Mapping, Optional

from envtool.spec.model import Spec

#: Version of the hashed form; bump when the fields below change.
HASH_FORMAT = 1


def spec_content(spec: Spec) -> Dict[str, Any]:
    """The lock-relevant content of ``spec`` as plain JSON-ready data.

    Args:
        spec: a resolved spec (``extends`` merged, site applied).
    Returns:
        a dict with keys ``format``, ``engine``, ``python``, ``cuda``, ``channels``,
        ``conda``, ``pip``, ``horovod``, ``site``; pins reduced to their values.
    """
    horovod = asdict(spec.horovod)
    horovod["version"] = spec.horovod.version.value if spec.horovod.version else None
    # build-only packages take part (they change how Horovod is built) only when there are some,
    # so that the hashes of specs without them (and their locks) stay as they were
    horovod.pop("build_packages")
    if spec.horovod.build_packages:
        horovod["build_packages"] = [p.value for p in spec.horovod.build_packages]
    return {
        "format": HASH_FORMAT,
        "engine": spec.engine,
        "python": spec.python.value if spec.python else None,
        "cuda": spec.cuda.value if spec.cuda else None,
        "channels": list(spec.channels),
        "conda": [p.value for p in spec.packages.conda],
        # a pin's index only when set, so that the hashes of specs without one stay as they were
        "pip": [p.value + (f" (index {p.index})" if p.index else "") for p in spec.packages.pip],
        "horovod": horovod,
        "site": {"name": spec.site.name, "modules": list(spec.site.modules)},
        # only when set, so that the hashes of specs without it (and their locks) stay as they were
        **({"venv": {"system_site_packages": True}} if spec.venv.system_site_packages else {}),
    }


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def field_digests(spec: Spec) -> Dict[str, str]:
    """Per-field digests of :func:`spec_content` (``engine``, ``pip``, ``horovod`` …): stored in a
    lock so that a stale lock names the fields that changed.

    Returns:
        field → 16 hex digits.
    """
    return {k: _digest(v)[:16] for k, v in spec_content(spec).items() if k != "format"}


def changed_fields(locked: Mapping[str, str], spec: Spec) -> List[str]:
    """The spec fields whose digest differs from the lock's ``locked`` digests (sorted), including
    fields present on one side only; empty when ``locked`` is empty (nothing to compare)."""
    if not locked:
        return []
    now = field_digests(spec)
    return sorted(k for k in set(now) | set(locked) if now.get(k) != locked.get(k))


def spec_hash(spec: Spec) -> str:
    """SHA-256 (64 hex digits) of :func:`spec_content`; platform independent."""
    return _digest(spec_content(spec))


def platform_hash(spec: Spec, platform: str, virtual_packages: Optional[Mapping[str, str]] = None) -> str:
    """The per-platform ``content_hash`` entry of conda-lock's metadata.

    Args:
        spec: the resolved spec.
        platform: ``linux-64``-style platform.
        virtual_packages: name → version of the virtual packages solved against
            (``__cuda``, ``__glibc``), or None.
    Returns:
        64 hex digits.
    """
    return _digest({"spec": spec_content(spec), "platform": platform,
                    "virtual_packages": dict(sorted((virtual_packages or {}).items()))})
