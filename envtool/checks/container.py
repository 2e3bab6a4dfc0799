"""Check ``container``: is doctor running inside a container, which runtime made it, and does the
environment load the site's MPI and NCCL (injected from the host) or the image's own (issue 29).

Which runtime (first match wins; each runtime's own documented marker):

- Charliecloud: ``$CH_RUNNING`` — ``ch-run`` sets it in every container
  (``hpc/charliecloud@v0.31:doc/ch-run.rst``, "Environment variables").
- Apptainer (and Singularity): ``$APPTAINER_CONTAINER`` / ``$SINGULARITY_CONTAINER``, the image
  path, set by the launcher under both prefixes
  (``apptainer/apptainer@v1.3.6:internal/pkg/runtime/launch/launcher_linux.go``,
  ``SetProcessEnvWithPrefixes(…, "CONTAINER", …)``).
- Podman (podman-hpc runs podman): the file ``/run/.containerenv`` podman creates in each container
  (``https://docs.podman.io/en/v4.2/_sources/markdown/podman-run.1.md.txt``, DESCRIPTION).
- Shifter: ``$SHIFTER_RUNTIME`` (a ``siteEnv`` of ``udiRoot.conf``, set at NERSC,
  ``NERSC/shifter@84b7d34911bb:doc/config/udiRoot.conf.rst``) or the ``/opt/udiImage`` tree Shifter
  mounts into every container (``NERSC/shifter@1378b5716e46:doc/modules.rst``).

Host injection: Shifter modules put the host's libraries under ``/opt/udiImage/modules/<module>``
and prepend them to ``LD_LIBRARY_PATH`` (``NERSC/shifter@1378b5716e46:doc/modules.rst``, the mpich
module); podman-hpc's ``--mpi`` and ``--nccl`` do the same under ``/opt/udiImage/modules/mpich`` and
``/opt/udiImage/modules/nccl-2.15`` (``NERSC/podman-hpc@01b02d6e552f:etc/modules.d/mpich.yaml``,
``etc/modules.d/nccl.yaml``). For Apptainer and Charliecloud a site binds host directories
(the site file's ``container.bind``). The library a rank would load is found as the dynamic loader
finds it: the Horovod extension's ``ldd`` where Horovod is installed, else ``LD_LIBRARY_PATH``, the
environment's ``lib``, then the ``ldconfig`` cache (ld.so(8)).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from envtool.core import external
from envtool.spec.sites import ContainerSection
from envtool.checks.model import Context, Finding
from envtool.checks.registry import check, finding

ID = "container"

#: Where Shifter and podman-hpc modules put the host's libraries (NERSC/shifter@1378b5716e46:doc/modules.rst).
INJECTION_ROOT = "/opt/udiImage/modules"

#: Library stems looked for: MPI (``libmpi.so.12`` MPICH ABI, ``libmpi.so.40`` Open MPI) and NCCL.
LIBRARIES = {"mpi": "libmpi.so", "nccl": "libnccl.so"}
#: Other names a stem's library has: Debian's MPICH ships the MPICH ABI library as
#: ``libmpich.so.12`` only (https://packages.debian.org/bookworm/amd64/libmpich12/filelist).
ALIASES = {"libmpi.so": ("libmpi.so", "libmpich.so")}


@dataclass(frozen=True)
class Detected:
    """The container doctor runs in.

    Attributes:
        runtime: ``charliecloud``, ``apptainer``, ``podman``, ``shifter`` (the site file's spelling
            where it has one; podman covers podman-hpc).
        evidence: what showed it (``CH_RUNNING=…``, ``/run/.containerenv``).
        source: where the runtime documents that marker.
    """

    runtime: str
    evidence: str
    source: str


def detect(environ: Mapping[str, str], root: Path = Path("/")) -> Optional[Detected]:
    """The container this process runs in, or None (see the module docstring for the markers).

    Args:
        environ: the process environment.
        root: the file-system root to look at (``/``; a test may give another).
    """
    if environ.get("CH_RUNNING"):
        return Detected("charliecloud", f"CH_RUNNING={environ['CH_RUNNING']}", "hpc/charliecloud@v0.31:doc/ch-run.rst")
    for var in ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER"):
        if environ.get(var):
            return Detected("apptainer", f"{var}={environ[var]}",
                            "apptainer/apptainer@v1.3.6:internal/pkg/runtime/launch/launcher_linux.go")
    if (root / "run" / ".containerenv").exists():
        return Detected("podman", "/run/.containerenv",
                        "https://docs.podman.io/en/v4.2/_sources/markdown/podman-run.1.md.txt")
    if environ.get("SHIFTER_RUNTIME"):
        return Detected("shifter", f"SHIFTER_RUNTIME={environ['SHIFTER_RUNTIME']}",
                        "NERSC/shifter@84b7d34911bb:doc/config/udiRoot.conf.rst")
    if (root / "opt" / "udiImage").is_dir():
        return Detected("shifter", "/opt/udiImage", "NERSC/shifter@1378b5716e46:doc/modules.rst")
    return None


def _ldd(path: Path, timeout: float) -> Dict[str, str]:
    """``{soname: resolved path}`` from ``ldd PATH`` ({} when ldd is missing or fails)."""
    exe = shutil.which("ldd")
    if not exe:
        return {}
    try:
        proc = external.run([exe, str(path)], timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return {}
    out: Dict[str, str] = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(/\S+)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _ldconfig(timeout: float) -> Dict[str, str]:
    """``{soname: path}`` of the loader's cache (``ldconfig -p``), first entry of each name."""
    exe = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)),
                                           None)
    if not exe:
        return {}
    try:
        proc = external.run([exe, "-p"], timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return {}
    want = "x86-64" if os.uname().machine == "x86_64" else ""  # the cache also lists 32-bit libraries
    out: Dict[str, str] = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(/\S+)", line)
        if m and want in m.group(2):
            out.setdefault(m.group(1), m.group(3))
    return out


def _matches(soname: str, stem: str) -> bool:
    """``soname`` is ``stem`` or ``stem.N…`` (``libmpi.so.12``; not ``libmpi.so`` of ``libmpi_cxx``)."""
    return soname == stem or soname.startswith(stem + ".")


def horovod_extensions(prefix: Optional[Path]) -> List[Path]:
    """Horovod's compiled extensions in ``prefix`` (``lib/python3*/site-packages/horovod/*/mpi_lib*.so``)."""
    if prefix is None:
        return []
    pattern = str(Path(prefix) / "lib" / "python3*" / "site-packages" / "horovod" / "*" / "mpi_lib*.so")
    return sorted(Path(p) for p in glob.glob(pattern))


def find_library(stem: str, environ: Mapping[str, str], prefix: Optional[Path], timeout: float = 20.0
                 ) -> Optional[Tuple[str, str]]:
    """The file a rank would load for ``stem`` (``libmpi.so``; also its :data:`ALIASES`) and how it
    was found, or None.

    Order: what the Horovod extension resolves it to (``ldd``), then ``LD_LIBRARY_PATH``'s
    directories, the environment's ``lib``, then the ``ldconfig`` cache (ld.so(8)'s search order).

    Returns:
        ``(path, how)``: the resolved path (symbolic links followed) and ``ldd EXT``,
        ``LD_LIBRARY_PATH``, ``PREFIX/lib`` or ``ldconfig -p``.
    """
    stems = ALIASES.get(stem, (stem,))
    for ext in horovod_extensions(prefix):
        for soname, path in _ldd(ext, timeout).items():
            if any(_matches(soname, s) for s in stems):
                return os.path.realpath(path), f"ldd {ext}"
    dirs = [(d, "LD_LIBRARY_PATH") for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    if prefix is not None:
        dirs.append((str(Path(prefix) / "lib"), "PREFIX/lib"))
    for d, how in dirs:
        hits = sorted(h for s in stems for h in glob.glob(os.path.join(glob.escape(d), s + "*")))
        hits = [h for h in hits if any(_matches(os.path.basename(h), s) for s in stems)]
        if hits:
            return os.path.realpath(hits[0]), how
    for soname, path in _ldconfig(timeout).items():
        if any(_matches(soname, s) for s in stems):
            return os.path.realpath(path), "ldconfig -p"
    return None


def origin(path: str, binds: Sequence[str] = ()) -> str:
    """Where a library at ``path`` (inside the container) comes from.

    Returns:
        ``injected:<module>`` (under :data:`INJECTION_ROOT`), ``bound:<dir>`` (under one of the
        site's ``container.bind`` directories, bound at the same path), or ``image``.
    """
    root = INJECTION_ROOT.rstrip("/") + "/"
    if path.startswith(root):
        return "injected:" + path[len(root):].split("/", 1)[0]
    for b in binds:
        src = b.split(":", 1)[-1].rstrip("/") or "/"
        if path == src or path.startswith(src + "/"):
            return "bound:" + src
    return "image"


def expected_injection(section: Optional[ContainerSection]) -> Dict[str, str]:
    """``{"mpi"|"nccl": why}``: the libraries the site's container section says come from the host.

    Shifter: a module named ``mpich*`` (MPI) or ``nccl*`` (NCCL), the site's own names
    (``sites/perlmutter.yaml``: ``nccl-2.15``); podman-hpc: ``mpi`` and ``nccl``
    (``NERSC/podman-hpc@01b02d6e552f:etc/modules.d/``). Apptainer and Charliecloud inject nothing by
    themselves (a site binds host directories; then the library's origin is reported, not expected).
    """
    out: Dict[str, str] = {}
    if section is None:
        return out
    for m in section.modules:
        if section.runtime == "shifter":
            if m.startswith("mpich"):
                out["mpi"] = f"shifter --module={m}"
            if m.startswith("nccl"):
                out["nccl"] = f"shifter --module={m}"
        elif section.runtime == "podman-hpc":
            if m == "mpi":
                out["mpi"] = "podman-hpc --mpi"
            if m == "nccl":
                out["nccl"] = "podman-hpc --nccl"
    return out


def _site_container(site: object) -> Optional[ContainerSection]:
    """The site file's container section for ``site`` (a SiteFile or a spec's Site), or None."""
    if site is None:
        return None
    if hasattr(site, "container"):
        return site.container
    name = getattr(site, "name", None)
    if not name:
        return None
    from envtool.core.errors import SpecError
    from envtool.spec import sites

    try:
        return sites.load_site(sites.find(name)).container
    except SpecError:
        return None


@check(ID, "Container: runtime and the site's MPI/NCCL injection", order=97,
       fix="run the ranks through the site's run line: envtool jobscript --image IMAGE --site SITE")
def run(ctx: Context) -> Finding:
    environ = ctx.environ
    found = detect(environ)
    if found is None:
        return finding(ID, "ok", "not in a container (no CH_RUNNING, APPTAINER_CONTAINER, SINGULARITY_CONTAINER, "
                       "SHIFTER_RUNTIME, /run/.containerenv or /opt/udiImage)", in_container=False)
    site = ctx.site
    section = _site_container(site)
    site_name = getattr(site, "name", None)
    prefix = Path(ctx.prefix) if ctx.prefix is not None else None
    libraries: Dict[str, Optional[Dict[str, str]]] = {}
    items: List[str] = []
    for key, stem in LIBRARIES.items():
        hit = find_library(stem, environ, prefix, timeout=min(float(ctx.timeout), 30.0))
        if hit is None:
            libraries[key] = None
            items.append(f"{stem}: not found")
            continue
        where = origin(hit[0], section.bind if section is not None else ())
        libraries[key] = {"path": hit[0], "found_by": hit[1], "origin": where}
        items.append(f"{stem}: {hit[0]} ({where}; found by {hit[1]})")
    details: Dict[str, Any] = {
        "in_container": True, "runtime": found.runtime, "evidence": found.evidence, "source": found.source,
        "site": site_name, "site_runtime": section.runtime if section is not None else None,
        "libraries": libraries, "items": items}
    problems: List[str] = []
    if section is not None and found.runtime != section.runtime and not (
            found.runtime == "podman" and section.runtime == "podman-hpc"):
        problems.append(f"site {site_name} runs images with {section.runtime}, this container is {found.runtime}")
    expected = expected_injection(section)
    for key, why in expected.items():
        lib = libraries.get(key)
        if lib is None or not lib["origin"].startswith("injected:"):
            got = "not found" if lib is None else f"{lib['path']} from the {lib['origin']}"
            problems.append(f"{LIBRARIES[key]} should come from the host ({why}) but is {got}")
    details["expected_injection"] = expected
    summary = f"in a {found.runtime} container ({found.evidence})"
    if problems:
        return finding(ID, "warn", summary + ": " + "; ".join(problems),
                       "start the ranks with the site's run line (envtool jobscript --image IMAGE --site "
                       f"{site_name or 'SITE'}), which loads the runtime's modules", **details)
    injected = [k for k, lib in libraries.items() if lib is not None and lib["origin"].startswith("injected:")]
    tail = (f"; {', '.join(LIBRARIES[k] for k in injected)} injected from the host" if injected
            else "; MPI/NCCL come from the image" if any(libraries.values()) else "; no MPI/NCCL library found")
    return finding(ID, "ok", summary + tail, **details)
