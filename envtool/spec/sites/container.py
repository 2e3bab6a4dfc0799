"""A site file's ``container`` section: how the site runs images (:class:`ContainerSection`).

The runtimes a site may name are those registered in :data:`envtool.spec.registry.CONTAINER_RUNTIMES`
(the one table of runtime names; a plug-in adds one with an ``envtool.plugins`` entry point).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

from envtool.spec import registry
from envtool.spec.sites.node_local import NODE_LOCAL_PATH_RE
from envtool.spec.sites.reader import check_source, require_source, section

CONTAINER_KEYS = ("runtime", "source", "modules", "mpi_abi", "mpi", "base", "base_source", "bind", "note")
#: The registry of container runtimes a site file may name (``container.runtime``): NERSC's Shifter
#: and podman-hpc, Apptainer, Charliecloud's ``ch-run``, and any a plug-in registers.
CONTAINER_RUNTIMES = registry.CONTAINER_RUNTIMES
#: The MPI ABIs an image's Horovod can be built against: Open MPI's, or MPICH's (which Cray MPICH
#: and Intel MPI keep: https://www.mpich.org/abi/).
MPI_ABIS = ("openmpi", "mpich")
#: An image base: a Debian suite built from Debian's archive, or a local OCI archive/directory.
CONTAINER_BASE_RE = re.compile(r"debian:[a-z]+|(?:oci-archive|dir):/[A-Za-z0-9_.+@%,=:/-]*")


@dataclass(frozen=True)
class ContainerSection:
    """A site file's ``container`` section: how the site runs images (``envtool image``,
    ``jobscript --image``, ``validate --image``; issue 29).

    Attributes:
        runtime: a registered container runtime (:data:`envtool.spec.registry.CONTAINER_RUNTIMES`:
            ``shifter``, ``podman-hpc``, ``apptainer``, ``charliecloud``, and any a plug-in adds).
        source: id in the site file's ``sources`` that documents the runtime (required).
        modules: the runtime's site modules (Shifter's ``--module=gpu,nccl-2.15``; podman-hpc's
            ``--gpu``/``--mpi`` are written as ``gpu``/``mpi``), possibly empty.
        mpi_abi: ``openmpi`` or ``mpich``: the MPI ABI the image's Horovod is built against, so
            that the site's MPI can be injected at run time (hybrid mode).
        mpi: the ``srun --mpi=`` plugin for ranks in the image, or None (then ``batch.mpi``).
        base: the image's base: ``debian:<suite>`` (made from Debian's archive with mmdebstrap),
            ``oci-archive:/path`` or ``dir:/path`` (a local image; nothing is pulled).
        base_source: id in ``sources`` documenting the base, or None.
        bind: absolute host directories bound into the image at the same path.
        note: free text, or None.
    """

    runtime: str
    source: str
    modules: Tuple[str, ...] = ()
    mpi_abi: str = "openmpi"
    mpi: Optional[str] = None
    base: str = "debian:bookworm"
    base_source: Optional[str] = None
    bind: Tuple[str, ...] = ()
    note: Optional[str] = None


def parse_container(spath: str, raw, source_ids) -> Optional[ContainerSection]:
    """Parse the ``container`` section (SpecError naming ``container.<field>`` on a bad value)."""
    r = section(spath, raw, "container", CONTAINER_KEYS, "a mapping with runtime: NAME and source: ID")
    if r is None:
        return None
    runtime = r.choice("runtime", registry.container_runtime_names(), nullable=False)
    assert runtime is not None  # choice() raises on a missing value when not nullable
    source = require_source(r, r.str("source"), source_ids, "the runtime")
    base_source = r.str("base_source")
    check_source(r, "base_source", base_source, source_ids)
    mpi_abi = r.choice("mpi_abi", MPI_ABIS) or "openmpi"
    base = r.str("base") or "debian:bookworm"
    if not CONTAINER_BASE_RE.fullmatch(base):
        raise r.error("base", "debian:<suite> (e.g. debian:bookworm), oci-archive:/PATH or dir:/PATH", got=base)
    mpi = r.str("mpi")
    if mpi is not None and not re.fullmatch(r"[a-z0-9_]{1,32}", mpi):
        raise r.error("mpi", "an srun --mpi plugin name (pmix, pmi2, none)", got=mpi)
    return ContainerSection(runtime=runtime, source=source, modules=_modules(r), mpi_abi=mpi_abi, mpi=mpi,
                            base=base, base_source=base_source, bind=_binds(r), note=r.str("note"))


def _modules(r) -> Tuple[str, ...]:
    """``modules``: the runtime's module names."""
    modules = r.str_list("modules")
    for mod in modules:
        if not re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", mod):
            raise r.error("modules", "runtime module names (letters, digits, '_', '.', '+', '-')", got=mod)
    return modules


def _binds(r) -> Tuple[str, ...]:
    """``bind``: absolute host directories (no variables, no ``..``)."""
    bind = r.str_list("bind")
    for b in bind:
        if not NODE_LOCAL_PATH_RE.fullmatch(b) or "$" in b or "/../" in b + "/":
            raise r.error("bind", "absolute host directories (letters, digits, '_', '.', '-', '/')", got=b)
    return bind
