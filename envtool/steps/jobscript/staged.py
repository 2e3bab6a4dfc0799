"""The target of a job that stages a pack (``envtool pack``) to the site's node-local storage and
runs from there (issue 25; :mod:`envtool.steps.jobscript`, :mod:`envtool.scheduler.stage`)."""
from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shlex
from pathlib import Path
from typing import Any, Optional, Tuple

from envtool.core.errors import SpecError, UsageError
from envtool.core.prefix import PYTHON
from envtool.steps.jobscript.target import Target, resolve_target


def _pack_source(stage_file: str, manifest: dict, prefix: Optional[str]) -> Path:
    """The environment the pack was made from: ``prefix`` when given (its lockfile must match the
    pack's), else the manifest's ``source_prefix``."""
    from envtool.validate import preflight as pf

    if not prefix:
        return Path(str(manifest.get("source_prefix") or "/"))
    lock = str(manifest.get("lock_sha256") or "")
    mine = pf.lock_sha256(Path(prefix).absolute())
    if mine != lock:
        raise UsageError(f"--stage {stage_file}: packed from an environment whose lockfile sha256 is {lock[:12]}, "
                         f"but --prefix {prefix} has {(mine or 'none')[:12]}: pack it again "
                         f"(envtool pack --prefix {shlex.quote(str(prefix))} --format {manifest['format']})")
    return Path(prefix).absolute()


def node_local_root(sf) -> Tuple[Any, str]:
    """``(the site file's node_local, its path with variables expanded, no trailing /)``.

    Raises:
        SpecError: no ``node_local`` (names the file and field), or its path names a variable this
            shell does not set.
    """
    nl = getattr(sf, "node_local", None)
    if nl is None:
        raise SpecError(sf.path, "node_local", "the compute nodes' local storage for --stage (node_local: {path: DIR, "
                        "source: ID})", hint=f"site {sf.name} does not say where a job may put an environment on a node")
    unset = [v for v in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", nl.path) if not os.environ.get(v)]
    if unset:
        raise SpecError(sf.path, "node_local.path", "a path whose variables are set where the job script is written",
                        got=nl.path, hint=f"${unset[0]} is not set or empty here; the job runs as the user who writes "
                                          f"it: set it, or give a site file with the path spelled out")
    return nl, os.path.expandvars(nl.path).rstrip("/") or "/"


def _staged_paths(stage_file: str, manifest: dict, root: str, name: str, token: str, sf,
                  source: Path) -> Tuple[str, str]:
    """``(where the ranks find the environment on a node, where the pack file is copied)``.

    Raises:
        UsageError: a squashfs image whose mount point is not under the node-local ``root``.
    """
    if manifest["format"] == "tar":
        staged = f"{root}/envtool-{name}-{token}"
        return staged, staged + ".tar"
    staged = os.path.normpath(str(manifest.get("dest_prefix") or ""))
    if not staged.startswith(root.rstrip("/") + "/"):
        raise UsageError(f"--stage {stage_file}: a squashfs image mounted at {staged or '?'}, which is not under "
                         f"site {sf.name}'s node-local storage {root} (node_local.path in {sf.path}); pack it for "
                         f"a mount point there: envtool pack --prefix {shlex.quote(str(source))} --format squashfs "
                         f"--dest-prefix {shlex.quote(f'{root}/{name}')}")
    return staged, f"{root}/envtool-{name}-{token}.squashfs"


def _source_label(sf, nl) -> str:
    """``id: text`` of the site file's source for its node-local path (for the script's comment)."""
    words = dict(sf.sources).get(nl.source, "").split()
    if not words:
        return nl.source
    return f"{nl.source}: {words[0] if '://' in words[0] else ' '.join(words)[:80]}"


def resolve_staged(stage_file: str, prefix: Optional[str] = None, spec: Optional[str] = None,
                   site: Optional[str] = None, site_file: Optional[str] = None,
                   token: Optional[str] = None, retired_ok: bool = False,
                   platform_mismatch_ok: bool = False) -> Target:
    """The :class:`Target` of a job that stages the pack ``stage_file`` (``envtool pack``) to the
    site's node-local storage and runs from there (issue 25).

    The spec and site are found as for the pack's source environment (:func:`resolve_target`);
    the target's prefix is then the node-local copy: ``NODE_LOCAL/envtool-NAME-TOKEN`` for a tar, the
    image's mount point (``envtool pack --dest-prefix``) for a squashfs image.

    Args:
        stage_file: the pack file (on a file system the compute nodes mount).
        prefix: ``--prefix``: the environment the pack was made from (its lockfile must match the pack's).
        spec, site, site_file: as :func:`resolve_target`.
        token: the node-local directory's distinguishing part (default: random, 8 hex digits).
        retired_ok, platform_mismatch_ok: as :func:`resolve_target`.
    Returns:
        the target, with ``stage`` set.
    Raises:
        UsageError: not a pack, a pack of another environment than ``prefix``, a squashfs image whose
            mount point is not under the site's node-local path.
        SpecError: the site file has no ``node_local`` (names the file and field), or its path names
            a variable this shell does not set.
    """
    from envtool.scheduler.stage import Stage
    from envtool.steps.pack import read_manifest

    file = Path(stage_file).absolute()
    manifest = read_manifest(file)
    source = _pack_source(stage_file, manifest, prefix)
    target = resolve_target(str(source), None, spec, site, site_file, here=False, retired_ok=retired_ok,
                            platform_mismatch_ok=platform_mismatch_ok)
    sf = target.site
    nl, root = node_local_root(sf)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", source.name or "env")[:64]
    staged, copy = _staged_paths(stage_file, manifest, root, name, token or secrets.token_hex(4), sf, source)
    fmt = manifest["format"]
    stage = Stage(file=str(file), format=fmt, kind=str(manifest["kind"]), prefix=staged, copy=copy,
                  unpack=tuple(str(w) for w in manifest.get("unpack") or ()) if fmt == "tar" else (),
                  lock_sha256=str(manifest.get("lock_sha256") or ""),
                  unpacked_kib=int(manifest.get("unpacked_kib") or 0), node_local=nl.path,
                  source=_source_label(sf, nl), packed_from=str(source))
    return dataclasses.replace(target, prefix=Path(staged), python=f"{staged}/{PYTHON}", kind=stage.kind,
                               stage=stage)
