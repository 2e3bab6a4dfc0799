"""A CycloneDX SBOM of an environment prefix, for a site's security office.

Built with the CycloneDX Python library (``cyclonedx-python-lib``; imported inside the
functions, so that CLI start-up does not pay for it) and ``packageurl-python``:

* every conda package record (``conda-meta/*.json``: conda's PrefixRecord, fields ``name``,
  ``version``, ``build``, ``channel``, ``subdir``, ``url``, ``md5``, ``sha256``) becomes a
  component with a ``pkg:conda/<name>@<version>?build=…&channel=…&subdir=…`` purl (the
  ``conda`` type of the purl spec: package-url/purl-spec ``PURL-TYPES.rst``) and its MD5 and
  SHA-256 hashes;
* every pip distribution in site-packages that conda did not install (``INSTALLER`` is not
  ``conda``) becomes a ``pkg:pypi/<name>@<version>`` component (PEP 503 name), with the
  archive hash pip recorded in ``direct_url.json`` (PEP 610) when there is one;
* the Horovod component carries how envtool built it, read from ``PREFIX/.envtool/create.json``:
  one ``envtool:horovod:env:<VAR>`` property per ``HOROVOD_*`` variable of the build, one
  ``envtool:horovod:fix-rule`` per fix rule applied, and the wheel cache key.

The environment itself is the BOM's metadata component (``application``), and every package is
registered as its dependency.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from envtool import __version__
from envtool.core.errors import UsageError
from envtool.core.prefix import PrefixData

#: ``--format`` choices.
FORMATS = ("cyclonedx-json",)
#: CycloneDX specification version written.
SPEC_VERSION = "1.6"


def _conda_records(prefix: Path) -> List[Dict]:
    """The conda records of ``prefix`` as conda wrote them (:class:`~envtool.core.prefix.PrefixData`)."""
    return [dict(d) for d in PrefixData(prefix).conda_record_dicts]


def _pip_dists(prefix: Path) -> List[Tuple[str, str, Optional[Dict]]]:
    """``(canonical name, version, direct_url or None)`` of the distributions not installed by conda
    (a conda package's record is its component), from :class:`~envtool.core.prefix.PrefixData`."""
    return [(d.name, d.version, d.direct or None) for d in PrefixData(prefix).distributions if d.installer != "conda"]


def _channel_name(channel: str) -> str:
    """``https://conda.anaconda.org/conda-forge`` → ``conda-forge``; other URLs as they are."""
    channel = channel.rstrip("/")
    for host in ("https://conda.anaconda.org/", "http://conda.anaconda.org/"):
        if channel.startswith(host):
            return channel[len(host):]
    return channel


def horovod_build(prefix: Path) -> Optional[Dict]:
    """How envtool built Horovod in ``prefix``, from ``PREFIX/.envtool/create.json``.

    Returns:
        ``{"env": {HOROVOD_*: value}, "fixes": [rule ids], "cache_key": str or None}``, or None
        when the prefix has no record of a Horovod build step.
    """
    path = prefix / ".envtool" / "create.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    step = next((s for s in data.get("steps", []) if isinstance(s, dict) and s.get("id") == "build-horovod"), None)
    if step is None:
        return None
    result = (data.get("results") or {}).get("build-horovod") or {}
    env = {k: str(v) for k, v in (step.get("env") or {}).items() if k.startswith("HOROVOD_")}
    return {"env": env, "fixes": list(result.get("fixes") or []), "cache_key": result.get("cache_key")}


#: Files of a distribution's metadata directory that the SBOM reads (core metadata: PEP 566; the
#: installer: PEP 376; the archive hash: PEP 610), when present.
_DIST_FILES = ("METADATA", "PKG-INFO", "INSTALLER", "direct_url.json")


def first_unreadable(prefix: Path) -> Optional[Tuple[Path, str]]:
    """The first place of ``prefix`` that an SBOM reads and this user cannot: the prefix itself,
    ``conda-meta/`` and its records, ``lib/``, each ``lib/python*/site-packages`` and each
    ``*.dist-info`` / ``*.egg-info`` in it with its metadata files, ``.envtool/create.json``.

    Each is opened (directories listed), not judged from its mode, so ACLs and root count as
    the kernel counts them. A directory that cannot be listed would otherwise look empty and
    its packages would silently be left out.

    Returns:
        ``(path, reason in words)``, or None when everything can be read.
    """
    import os

    def cannot(path: Path, directory: bool) -> Optional[str]:
        try:
            if directory:
                os.listdir(path)
            else:
                with open(path, "rb") as fh:
                    fh.read(1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return exc.strerror or type(exc).__name__
        return None

    def entries(path: Path) -> List[str]:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    todo: List[Tuple[Path, bool]] = [(prefix, True)]
    meta = PrefixData(prefix).conda_meta
    if meta.is_dir() or os.path.lexists(meta):
        todo.append((meta, True))
        todo += [(meta / n, False) for n in entries(meta) if n.endswith(".json")]
    lib = prefix / "lib"
    if os.path.lexists(lib):
        todo.append((lib, True))
        for n in entries(lib):
            if n.startswith("python"):
                sp = lib / n / "site-packages"
                todo += [(lib / n, True), (sp, True)]
                for d in entries(sp):
                    if d.endswith((".dist-info", ".egg-info")) and (sp / d).is_dir():
                        todo.append((sp / d, True))
                        todo += [(sp / d / f, False) for f in _DIST_FILES]
    todo.append((prefix / ".envtool" / "create.json", False))
    for path, directory in todo:
        why = cannot(path, directory)
        if why:
            return path, why
    return None


def build_bom(prefix: Path, name: Optional[str] = None, version: Optional[str] = None,
              label_prefix: Optional[str] = None):
    """The CycloneDX :class:`~cyclonedx.model.bom.Bom` of the environment at ``prefix``.

    Args:
        prefix: an environment prefix (conda env or venv).
        name, version: the metadata component's name and version (default: the prefix's
            directory name, and no version).
        label_prefix: the path the SBOM names as the environment's (``envtool:prefix``) when it
            differs from where it is read: ``/opt/env`` for an image's root read from the host.
    Returns:
        a ``cyclonedx.model.bom.Bom``.
    Raises:
        UsageError: ``prefix`` is not a directory, holds neither ``conda-meta/`` nor a
            site-packages directory, or holds something this user cannot read
            (:func:`first_unreadable`: the SBOM would miss packages).
    """
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    prefix = Path(prefix).absolute()
    if not prefix.is_dir():
        raise UsageError(f"--prefix: {prefix} is not a directory (expected an environment prefix)")
    blocked = first_unreadable(prefix)
    if blocked is not None:
        raise UsageError(f"--prefix: cannot read {blocked[0]} ({blocked[1]}): an SBOM of {prefix} would leave out what "
                         "it holds; run as a user who can read the whole environment")
    if not PrefixData(prefix).is_conda and PrefixData(prefix).site_packages is None:
        raise UsageError(f"--prefix: {prefix} is not an environment (no conda-meta/ and no site-packages)")

    hvd = horovod_build(prefix)

    def hvd_properties() -> List:
        if hvd is None:
            return []
        props = [Property(name=f"envtool:horovod:env:{k}", value=v) for k, v in sorted(hvd["env"].items())]
        props += [Property(name="envtool:horovod:fix-rule", value=r) for r in hvd["fixes"]]
        if hvd.get("cache_key"):
            props.append(Property(name="envtool:horovod:wheel-cache-key", value=str(hvd["cache_key"])))
        return props

    components = []
    for rec in _conda_records(prefix):
        qualifiers = {}
        if rec.get("build"):
            qualifiers["build"] = str(rec["build"])
        if rec.get("channel"):
            qualifiers["channel"] = _channel_name(str(rec["channel"]))
        if rec.get("subdir"):
            qualifiers["subdir"] = str(rec["subdir"])
        fn = str(rec.get("fn") or rec.get("url", "").rsplit("/", 1)[-1] or "")
        if fn.endswith(".conda"):
            qualifiers["type"] = "conda"
        elif fn.endswith(".tar.bz2"):
            qualifiers["type"] = "tar.bz2"
        purl = PackageURL(type="conda", name=str(rec["name"]).lower(), version=str(rec["version"]),
                          qualifiers=qualifiers)
        hashes = []
        if rec.get("sha256"):
            hashes.append(HashType(alg=HashAlgorithm.SHA_256, content=str(rec["sha256"])))
        if rec.get("md5"):
            hashes.append(HashType(alg=HashAlgorithm.MD5, content=str(rec["md5"])))
        props = [Property(name="envtool:package-manager", value="conda")]
        if rec.get("url"):
            props.append(Property(name="envtool:conda:url", value=str(rec["url"])))
        if rec["name"] == "horovod":
            props += hvd_properties()
        components.append(Component(name=str(rec["name"]), version=str(rec["version"]), type=ComponentType.LIBRARY,
                                    purl=purl, bom_ref=purl.to_string(), hashes=hashes, properties=props))
    for dname, dversion, direct in _pip_dists(prefix):
        purl = PackageURL(type="pypi", name=dname, version=dversion)
        hashes = []
        archive = (direct or {}).get("archive_info") or {}
        for alg, value in ((archive.get("hashes") or {}).items()):
            algo = {"sha256": HashAlgorithm.SHA_256, "sha512": HashAlgorithm.SHA_512,
                    "md5": HashAlgorithm.MD5}.get(alg)
            if algo is not None:
                hashes.append(HashType(alg=algo, content=str(value)))
        props = [Property(name="envtool:package-manager", value="pip")]
        if direct and direct.get("url"):
            props.append(Property(name="envtool:pip:direct-url", value=str(direct["url"])))
        if dname == "horovod":
            props += hvd_properties()
        ref = purl.to_string()
        if any(str(c.bom_ref) == ref for c in components):
            continue
        components.append(Component(name=dname, version=dversion, type=ComponentType.LIBRARY, purl=purl,
                                    bom_ref=ref, hashes=hashes, properties=props))

    said = label_prefix or str(prefix)
    root = Component(name=name or Path(said).name, version=version, type=ComponentType.APPLICATION,
                     bom_ref=f"envtool-environment:{said}",
                     properties=[Property(name="envtool:prefix", value=said)])
    bom = Bom(components=components)
    bom.metadata.component = root
    bom.metadata.tools.components.add(Component(name="envtool", version=__version__, type=ComponentType.APPLICATION))
    bom.register_dependency(root, components)
    return bom


def render(bom, fmt: str = "cyclonedx-json") -> str:
    """The SBOM text (CycloneDX :data:`SPEC_VERSION` JSON).

    Raises:
        UsageError: a format other than :data:`FORMATS`.
    """
    if fmt not in FORMATS:
        raise UsageError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    from cyclonedx.output.json import JsonV1Dot6

    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"


def write_sbom(prefix: Path, path: Path, name: Optional[str] = None, version: Optional[str] = None,
               label_prefix: Optional[str] = None) -> Path:
    """Write the SBOM of ``prefix`` to ``path`` (atomically: a temporary file, then rename);
    ``label_prefix`` as :func:`build_bom` takes it.

    Returns:
        ``path``.
    """
    from envtool.core.atomic import write_text_atomic

    return write_text_atomic(Path(path), render(build_bom(prefix, name=name, version=version,
                                                          label_prefix=label_prefix)))
