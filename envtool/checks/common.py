"""Small helpers shared by the check modules (no I/O beyond reading the prefix)."""
from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from envtool.core import frameworks
from envtool.core.prefix import PrefixData

#: Import name → spec framework name (``horovod.frameworks``) and check-build name.
FRAMEWORK_OF_MODULE = {f.module: (f.name, f.label) for f in frameworks.FRAMEWORKS}


def installed_pip(prefix: Path) -> Dict[str, str]:
    """``{canonical name: version}`` of the prefix's Python distributions
    (:class:`~envtool.core.prefix.PrefixData`)."""
    return PrefixData(Path(prefix)).versions()


def base_pip(ctx) -> Dict[str, Tuple[str, str]]:
    """``{canonical name: (version, base prefix)}`` of the distributions a layered venv
    (:func:`envtool.engines.layer.is_layered`) sees from its base and does not hold itself, read
    in the directories its interpreter has on ``sys.path`` (the ``info`` probe) outside the
    prefix (:func:`envtool.engines.layer.base_packages`); ``{}`` for an environment that is not
    layered or whose interpreter did not answer."""
    from envtool.engines import layer

    prefix = Path(ctx.prefix)
    if not layer.is_layered(prefix):
        return {}
    info = ctx.probe("info")
    data = info.data or {}
    if info.error or not data.get("sys_path"):
        return {}
    view = layer.SiteDirs(python=str(data.get("python") or ""), executable=str(data.get("executable") or ""),
                          prefix=str(data.get("prefix") or prefix), base_prefix=str(data.get("base_prefix") or ""),
                          venv=True, conda=False, site_packages=(),
                          user_site=data.get("user_site") if data.get("enable_user_site") else None,
                          sys_path=tuple(str(p) for p in data.get("sys_path") or ()))
    _, where = layer.base_of(view, prefix)
    where = where or "its base"
    return {p.name: (p.version, where) for p in layer.base_packages(view, prefix)}


def visible_pip(ctx) -> Dict[str, str]:
    """``{canonical name: version}`` of what the environment holds (:func:`installed_pip`) and,
    for a layered venv, what it sees from its base (:func:`base_pip`)."""
    out = {name: version for name, (version, _) in base_pip(ctx).items()}
    out.update(installed_pip(Path(ctx.prefix)))
    return out


def installed_frameworks(info) -> Dict[str, str]:
    """``{spec framework name: version}`` of the frameworks that imported in the env."""
    out = {}
    for module, (fw, _) in FRAMEWORK_OF_MODULE.items():
        rec = info.module(module)
        if rec.get("ok") and rec.get("version"):
            out[fw] = rec["version"]
    return out


def spec_for_rebuild(ctx, info):
    """The spec whose ``horovod`` section the rebuild command is derived from: ``ctx.spec``,
    or one made from what the env holds (its frameworks, Gloo, MPI when built or on PATH)."""
    if ctx.spec is not None:
        return ctx.spec
    from envtool.spec.model import HorovodSpec, Pin, Spec

    fws = tuple(sorted(installed_frameworks(info))) or ("pytorch",)
    caps = info.data.get("capabilities") or {}
    controllers = ["gloo"]
    if caps.get("mpi_built") or info.data.get("mpi"):
        controllers.append("mpi")
    version = (info.module("horovod").get("version") or "").split("+")[0] or None
    gpu = "nccl" if caps.get("nccl_built") or (info.data.get("cuda") or {}).get("available") else None
    return Spec(name=Path(ctx.prefix).name, horovod=HorovodSpec(
        version=Pin.bare(version) if version else None, install="pip-build", frameworks=fws,
        controllers=tuple(controllers), gpu_operations=gpu))


def rebuild_command(ctx, info) -> str:
    """The command that rebuilds Horovod in place with the right ``HOROVOD_*`` set.

    ``HOROVOD_*`` come from :func:`envtool.horovod.flags.build_env`; pip flags from horovod.md
    ("Known build pitfalls": ``--no-build-isolation --no-cache-dir``); ``--no-deps`` keeps pip
    from reinstalling the framework. When a fix rule of :mod:`envtool.horovod.fixes` applies
    (e.g. C++17 for torch >= 2.1), the ``envtool create … --force`` alternative is added. When
    the prefix is not writable (a site's read-only environment behind a module), the command is
    ``envtool create SPEC --clone PREFIX`` instead: Horovod is rebuilt in the clone.
    """
    from packaging.version import InvalidVersion, Version

    from envtool.horovod import fixes, flags

    if not os.access(str(ctx.prefix), os.W_OK):
        # a site's read-only environment (a module's conda env): rebuild in a clone of it
        name = ctx.spec.name if ctx.spec is not None else "SPEC"
        return (f"envtool create {shlex.quote(name)} --clone {shlex.quote(str(ctx.prefix))}   "
                f"# {ctx.prefix} is read-only here: clone it and rebuild Horovod in the clone")
    spec = spec_for_rebuild(ctx, info)
    try:
        env = flags.build_env(spec)
        req = flags.requirement(spec)
    except Exception:  # a spec whose horovod section cannot be built from: keep the plain command
        env, req = [], "horovod"
    python = PrefixData(Path(ctx.prefix)).python
    cmd = " ".join(f"{k}={shlex.quote(v)}" for k, v in env)
    cmd += (" " if cmd else "") + (f"{shlex.quote(str(python))} -m pip install --no-build-isolation --no-cache-dir "
                                   f"--force-reinstall --no-deps {shlex.quote(req)}")
    hvd = None
    try:
        hvd = Version(req.split("==", 1)[1]) if "==" in req else None
    except InvalidVersion:
        pass
    fw_versions = {}
    for fw, v in installed_frameworks(info).items():
        try:
            fw_versions[fw] = Version(v)
        except InvalidVersion:
            pass
    rules = fixes.applicable(hvd, fw_versions, fixes.probe_toolchain(Path(ctx.prefix)))
    if rules:
        name = ctx.spec.name if ctx.spec is not None else "SPEC"
        cmd += ("   # needs fix rule " + ", ".join(r.id for r in rules)
                + f"; envtool applies it: envtool create {shlex.quote(name)} --prefix {shlex.quote(str(ctx.prefix))} --force")
    return cmd


def launch_markers(ctx) -> List[str]:
    """Signs of an MPI/InfiniBand launch: the set variables among ``OMPI_COMM_WORLD_RANK``,
    ``PMI_RANK``, ``PMIX_RANK``, ``SLURM_PROCID``, and ``/sys/class/infiniband`` when it has
    devices (horovod.md, "DataLoader start method")."""
    found = [v for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID") if ctx.environ.get(v)]
    ib = Path(ctx.infiniband_dir)
    try:
        if ib.is_dir() and any(ib.iterdir()):
            found.append(str(ib))
    except OSError:
        pass
    return found


def version_tuple(text: Optional[str], n: int = 3) -> tuple:
    """Leading numeric parts of a version string (``"2.18.3-1"`` → ``(2, 18, 3)``)."""
    import re

    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text or "")
    if not m:
        return ()
    return tuple(int(x) for x in m.group(1).split(".")[:n])
