"""Site overlays: map a stack (a spec) onto one site's modules, base environment and launcher.

A site file (``sites/<name>.yaml``; more in the directories of ``ENVTOOL_SITE_PATH`` or given
with ``--site-file``) holds::

    name: summit
    summary: one line
    sources: {id: URL or document}
    platforms: [linux-ppc64le]          # what the site's nodes run
    scheduler: lsf
    launcher: "jsrun -r1 -g6 -a6 -c42 -bpacked:7"
    gpus_per_node: 6
    batch:                              # what ``envtool jobscript`` needs (see BatchSection)
      source: olcf-bsub
      cpus_per_node: 42
      queue: batch
      account_required: true
      interface: ib0                    # the NIC ranks use between nodes (BatchSection.interface)
    modules: []                         # loaded for every stack
    env: {VAR: value}                   # set for every stack
    build_caches: [/sw/envtool-cache]   # read-only Horovod wheel caches (``envtool cache publish``)
    build_modules: [gcc, cmake, openmpi]  # modules that give a C++ compiler, CMake and MPI for a Horovod compile
    build_cache_group: swadmin          # the group trusted to write them (default: none may)
    detect:                             # how to recognise the site (see :func:`detect`); any rule matching
      - env: {NERSC_HOST: perlmutter}   #   a variable whose value matches a glob
        source: id                      #   where the fact comes from (an id in ``sources``)
      - hostname: "login*.summit*"      #   or this machine's host name matching a glob
    clone_prefix: "$HOME/.conda/envs/{spec}"   # where ``create --clone`` puts a clone by default
    node_local:                         # storage on each compute node (``jobscript --stage``)
      path: /mnt/bb/$USER               #   absolute; $NAME / ${NAME} expanded by the job's shell
      source: id                        #   where the fact comes from (an id in ``sources``; required)
      directives: ["-alloc_flags NVME"] #   directive arguments a job needs to get it (optional)
      note: free text
    validation:                         # what ``validate`` measures must meet
      fabric: ib                        #   NCCL's network between nodes (see ValidateSection)
      sweep: {gloo: {2: {64MiB: [1.2, -0.25, null, GB/s]}}}   # the allreduce sweep's references
      references:                       #   per node count: a performance variable and ReFrame's
        2:                              #   (value, lower, upper, unit): lower/upper are fractions
          allreduce_latency_4B: [80, null, 0.5, us]   # of value, lower in [-1, 0], upper >= 0
    container:                          # how the site runs images (see :class:`ContainerSection`)
      runtime: shifter                  #   a registered runtime: shifter | podman-hpc | apptainer | charliecloud
      source: id                        #   where the site documents it (an id in ``sources``; required)
      modules: [gpu, nccl-2.15]         #   the runtime's site modules (shifter --module=gpu,nccl-2.15)
      mpi_abi: mpich                    #   openmpi | mpich: the MPI ABI the image's Horovod is built against
      mpi: pmi2                         #   srun --mpi= for ranks in the image (default: batch.mpi)
      base: "debian:bookworm"           #   the image's base: debian:<suite>, oci-archive:/path or dir:/path
      base_source: id                   #   where the base is documented (an id in ``sources``; optional)
      bind: [/global/cfs]               #   host directories bound into the image at the same path
      note: free text
    launch:                             # how DDP scripts start here (see :class:`LaunchSection`)
      default: srun                     #   torchrun | srun | mpiexec | launcher, without --launch
      source: id                        #   where the site documents it (required with default)
      rendezvous_host: "{node}-hsn0"    #   the first node's name for MASTER_ADDR / --rdzv_endpoint
      rendezvous_host_source: id
      gpu_order: [3, 2, 1, 0]           #   CUDA_VISIBLE_DEVICES of the srun launch on a whole node
      gpu_order_source: id
    retired:                            # the system is decommissioned (see :class:`Retirement`)
      date: "2024-11-15"
      source: id                        #   the facility's announcement (an id in ``sources``)
    stacks:                             # per spec: a spec name or a glob (``ibm-wml-ce-*``)
      open-ce-1.1.3:
        modules: [open-ce/1.1.3-py38-0]
        base_env: open-ce-1.1.3-py38-0  # what --clone copies (env name or prefix)
        launcher: ...                   # optional, replaces the site's
        env: {VAR: value}
        mark: V                         # provenance of the mapping (V, V2, I)
        source: olcf-bsub
        note: free text
        warning: text that `show` and `doctor` print (the stack may not work here, and why)
        overrides: {python: "3.8"}      # a partial spec merged over the stack (as ``extends`` does)
      open-ce-1.1.3-py36:               # a site variant: a name of its own for another module of a spec
        spec: open-ce-1.1.3
        modules: [open-ce/1.1.3-py36-0]
        overrides: {python: "3.6"}

A stack entry with ``spec:`` is a *site variant*: its key is a name of its own (not a spec's), usable
wherever a spec name is (``envtool show open-ce-1.1.3-py36 --site summit``); it resolves as the named
spec with the entry's modules and overrides, under the variant's name.

Resolution (:func:`resolve`): the spec is loaded with its ``extends`` chain; the stack entry that
names it (exact name first, then the first matching glob in file order) is applied: ``overrides``
are merged over the spec mapping and the site's ``sources`` added, then the result is built and
checked like any spec. The site section becomes the site's (modules: site modules, then the
stack's; when no stack entry matches and the spec's own site section names the same site, its
modules are kept), and the spec's platforms are narrowed to the site's. A spec none of whose
platforms the site runs is refused.

The package keeps one module per concern, and every name is importable from here:

- :mod:`~envtool.spec.sites.files`: the site file as a whole (:func:`load_site`, :class:`SiteFile`,
  its ``stacks``), :func:`available`, :func:`find`, :func:`retirement`;
- :mod:`~envtool.spec.sites.batch`, :mod:`~envtool.spec.sites.container`,
  :mod:`~envtool.spec.sites.node_local`, :mod:`~envtool.spec.sites.retired`,
  :mod:`~envtool.spec.sites.launch`, :mod:`~envtool.spec.sites.validation`, :mod:`~envtool.spec.sites.detect_rules`: one section each;
- :mod:`~envtool.spec.sites.detection`: which site this machine is (:func:`detect`), :func:`clone_prefix`;
- :mod:`~envtool.spec.sites.resolve`: a spec resolved for a site (:func:`resolve`, :func:`resolve_full`).
"""
from __future__ import annotations

from envtool.spec.sites.batch import (BATCH_KEYS, BATCH_TIME_RE, GPU_OPTIONS, INTERFACE_RE, QUEUE_OPTIONS,
                                      BatchSection)
from envtool.spec.sites.container import (CONTAINER_BASE_RE, CONTAINER_KEYS, CONTAINER_RUNTIMES, MPI_ABIS,
                                          ContainerSection)
from envtool.spec.sites.detect_rules import DETECT_KEYS, DetectRule
from envtool.spec.sites.detection import Detection, clone_prefix, detect
from envtool.spec.sites.files import (BUNDLED_SITES, SITE_FILE_KEYS, STACK_KEYS, SiteFile, StackMapping, available,
                                      find, load_site, retirement)
from envtool.spec.sites.launch import LAUNCH_CHOICES, LAUNCH_KEYS, RENDEZVOUS_HOST_RE, LaunchSection
from envtool.spec.sites.node_local import NODE_LOCAL_KEYS, NODE_LOCAL_PATH_RE, NodeLocal
from envtool.spec.sites.resolve import Resolved, resolve, resolve_full
from envtool.spec.sites.retired import RETIRED_KEYS, Retirement
from envtool.spec.sites.validation import (FABRICS, PERF_NAME_RE, REFERENCE_CONTROLLERS, REFERENCE_SIZES,
                                           REFERENCE_UNITS, REF_STACK_KEYS, VALIDATION_KEYS, AllreduceReference,
                                           Reference, RefStack, ValidateSection, parse_size, stack_differences)

__all__ = [
    "AllreduceReference", "BATCH_KEYS", "BATCH_TIME_RE", "BUNDLED_SITES", "BatchSection", "CONTAINER_BASE_RE",
    "CONTAINER_KEYS", "CONTAINER_RUNTIMES", "ContainerSection", "DETECT_KEYS", "DetectRule", "Detection",
    "FABRICS", "GPU_OPTIONS", "INTERFACE_RE", "LAUNCH_CHOICES", "LAUNCH_KEYS", "LaunchSection", "MPI_ABIS",
    "NODE_LOCAL_KEYS", "NODE_LOCAL_PATH_RE", "NodeLocal", "PERF_NAME_RE", "QUEUE_OPTIONS", "RENDEZVOUS_HOST_RE",
    "REFERENCE_CONTROLLERS", "REFERENCE_SIZES", "REFERENCE_UNITS", "REF_STACK_KEYS", "RefStack",
    "RETIRED_KEYS", "Reference", "Resolved", "Retirement", "SITE_FILE_KEYS", "STACK_KEYS", "SiteFile",
    "StackMapping", "VALIDATION_KEYS", "ValidateSection", "available", "clone_prefix", "detect", "find",
    "load_site", "parse_size", "resolve", "resolve_full", "retirement", "stack_differences",
]
