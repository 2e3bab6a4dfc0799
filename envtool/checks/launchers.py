"""Check 5, ``launchers``: launchers on ``PATH`` for the site, and the MPI that Horovod was
built against (the ``libmpi`` its extension loads, asked with ``MPI_Get_library_version``)
versus the ``mpirun``/``mpiexec`` on ``PATH`` (``--version``)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Optional, Tuple

from envtool.checks.common import visible_pip
from envtool.checks.registry import check, finding
from envtool.core import external
from envtool.scheduler import launcher

ID = "launchers"
LAUNCHERS = ("horovodrun", "mpirun", "mpiexec", "srun", "jsrun", "aprun")

#: Family markers in ``MPI_Get_library_version`` / ``mpirun --version`` text, most specific first.
_FAMILIES = (("Spectrum MPI", "spectrum-mpi"), ("Open MPI", "openmpi"), ("OpenRTE", "openmpi"),
             ("CRAY MPICH", "cray-mpich"), ("Intel(R) MPI", "intel-mpi"), ("MVAPICH", "mvapich"),
             ("MPICH", "mpich"), ("HYDRA", "mpich"))


def mpi_identity(text: str) -> Tuple[Optional[str], Optional[str]]:
    """``(family, version)`` from an MPI version banner (``"Open MPI v4.1.4, …"`` →
    ``("openmpi", "4.1.4")``); ``(None, None)`` when unrecognised."""
    for marker, family in _FAMILIES:
        i = text.find(marker)
        if i >= 0:
            m = re.search(r"(\d+(?:\.\d+)+)", text[i:])
            return family, (m.group(1) if m else None)
    return None, None


def _search_path(ctx) -> str:
    return os.pathsep.join([str(Path(ctx.prefix) / "bin"), ctx.environ.get("PATH", "")])


def _version_banner(exe: str) -> str:
    """What ``EXE --version`` prints (stdout and stderr, decoded by :func:`envtool.core.external.run`)."""
    try:
        proc = external.run([exe, "--version"], timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({exc})"
    return (proc.stdout + proc.stderr).strip()


@check(ID, "Launchers on PATH, MPI built against vs on PATH", needs=("info",), order=50,
       fix="load the site's MPI module or put its bin/ first on PATH")
def run(ctx):
    path = _search_path(ctx)
    found = {name: shutil.which(name, path=path) for name in LAUNCHERS}
    on_path = {k: v for k, v in found.items() if v}
    site = ctx.site
    launch = launcher.for_site(site)  # the one launcher model (envtool.scheduler.launcher)
    template = launch.template
    wanted = launch.program
    items = [f"{k}: {v}" for k, v in on_path.items()]
    details: Dict[str, object] = {"on_path": on_path, "site_launcher": template, "scheduler": launch.scheduler}
    status = "ok"
    problems = []
    fixes = []
    if not on_path.get(wanted) and not shutil.which(wanted, path=path):
        if wanted == "horovodrun" and "horovod" not in visible_pip(ctx):
            # not a launcher problem: the environment has no Horovod, so it has no horovodrun
            details["horovod_installed"] = False
            items.append(f"Horovod is not installed in {ctx.prefix}: it provides {wanted}")
            return finding(ID, "warn", f"Horovod is not installed, so the site's launcher {wanted!r} is missing",
                           "install Horovod into the environment (envtool create with a spec that builds it)",
                           items=items, **details)
        problems.append(f"the site's launcher {wanted!r} ({template}) is not on PATH")
        fixes.append(f"run on the site ({getattr(site, 'name', 'local')}) or load the module that provides {wanted}")
    info = ctx.probe("info")
    caps = info.data.get("capabilities") or {}
    built_mpi = info.data.get("mpi")
    details["mpi_built_against"] = built_mpi
    if caps.get("mpi_built") and built_mpi:
        lib_family, lib_version = mpi_identity(built_mpi.get("version") or "")
        runner = on_path.get("mpirun") or on_path.get("mpiexec")
        if runner is None:
            if launch.needs_mpi_runtime and (ctx.environ.get("SLURM_JOB_ID") is None):
                problems.append(f"Horovod's MPI controller is built ({built_mpi.get('library')}) but no "
                                "mpirun/mpiexec is on PATH (horovodrun --mpi needs one)")
                fixes.append("load the MPI module Horovod was built against")
        else:
            banner = _version_banner(runner)
            run_family, run_version = mpi_identity(banner)
            details["mpi_on_path"] = {"launcher": runner, "banner": banner.splitlines()[0] if banner else ""}
            items.append(f"Horovod's MPI: {built_mpi.get('version', '?').split(',')[0]} ({built_mpi.get('library')})")
            items.append(f"MPI on PATH: {banner.splitlines()[0] if banner else '?'} ({runner})")
            if lib_family and run_family and lib_family != run_family:
                problems.append(f"Horovod was built against {lib_family} {lib_version}, but {runner} is "
                                f"{run_family} {run_version}")
                fixes.append(f"put the {lib_family} {lib_version} launcher first on PATH (module load …)")
            elif lib_version and run_version and lib_version.split(".")[:2] != run_version.split(".")[:2]:
                problems.append(f"Horovod's MPI library is {lib_family} {lib_version}, {runner} is {run_version}")
                fixes.append(f"use the {lib_family} {lib_version} launcher")
    elif caps and not caps.get("mpi_built"):
        items.append("Horovod has no MPI controller: launch with horovodrun --gloo")
    if problems:
        return finding(ID, "fail", "; ".join(problems), "; ".join(fixes), items=items, **details)
    summary = ", ".join(on_path) or "no launcher on PATH"
    return finding(ID, status, f"on PATH: {summary}; site launcher {wanted!r} found", "", items=items, **details)
