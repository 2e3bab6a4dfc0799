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
      runtime: shifter                  #   shifter | podman-hpc | apptainer | charliecloud
      source: id                        #   where the site documents it (an id in ``sources``; required)
      modules: [gpu, nccl-2.15]         #   the runtime's site modules (shifter --module=gpu,nccl-2.15)
      mpi_abi: mpich                    #   openmpi | mpich: the MPI ABI the image's Horovod is built against
      mpi: pmi2                         #   srun --mpi= for ranks in the image (default: batch.mpi)
      base: "debian:bookworm"           #   the image's base: debian:<suite>, oci-archive:/path or dir:/path
      base_source: id                   #   where the base is documented (an id in ``sources``; optional)
      bind: [/global/cfs]               #   host directories bound into the image at the same path
      note: free text
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
"""
from __future__ import annotations

import dataclasses
import fnmatch
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from envtool.core.errors import SpecError
from envtool.core.inputs import check_input
from envtool.spec import catalog, load, registry, rules
from envtool.spec import model as m
from envtool.spec.yamlload import LineDict, load_yaml

SITE_FILE_KEYS = ("name", "summary", "sources", "platforms", "scheduler", "launcher", "gpus_per_node", "modules",
                  "env", "notes", "stacks", "batch", "build_caches", "build_modules", "build_cache_group", "detect",
                  "clone_prefix", "validation", "retired", "node_local", "container")
RETIRED_KEYS = ("date", "source", "note")
NODE_LOCAL_KEYS = ("path", "source", "directives", "note")
CONTAINER_KEYS = ("runtime", "source", "modules", "mpi_abi", "mpi", "base", "base_source", "bind", "note")
#: Container runtimes a site file may name (``container.runtime``): NERSC's Shifter and podman-hpc,
#: Apptainer, Charliecloud's ``ch-run``.
CONTAINER_RUNTIMES = ("shifter", "podman-hpc", "apptainer", "charliecloud")
#: The MPI ABIs an image's Horovod can be built against: Open MPI's, or MPICH's (which Cray MPICH
#: and Intel MPI keep: https://www.mpich.org/abi/).
MPI_ABIS = ("openmpi", "mpich")
#: An image base: a Debian suite built from Debian's archive, or a local OCI archive/directory.
CONTAINER_BASE_RE = re.compile(r"debian:[a-z]+|(?:oci-archive|dir):/[A-Za-z0-9_.+@%,=:/-]*")
#: a node-local path: absolute, plain path characters and ``$NAME`` / ``${NAME}`` references only
#: (expanded by the job's shell inside double quotes: nothing else in it can be expanded or run)
NODE_LOCAL_PATH_RE = re.compile(r"/(?:[A-Za-z0-9_.+@%,=:/-]|\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\})*")
DETECT_KEYS = ("env", "hostname", "source")
BATCH_KEYS = ("source", "cpus_per_node", "queue", "queue_by_nodes", "queue_option", "constraint", "gpu_option",
              "mpi", "account_required", "directives", "env", "module_use", "shell", "interface", "launcher", "time")
#: A wall-clock limit as every scheduler here reads it: ``H:MM:SS`` or ``D-H:MM:SS``.
BATCH_TIME_RE = re.compile(r"(?:\d+-)?\d+:[0-5]\d:[0-5]\d")
#: A network interface name as Linux allows it (IFNAMSIZ 16 with the NUL, no '/', ':' or space:
#: dev_valid_name() in torvalds/linux@v6.6:net/core/dev.c), narrowed to the characters real NICs use.
INTERFACE_RE = re.compile(r"[A-Za-z0-9_.@-]{1,15}")
STACK_KEYS = ("spec", "modules", "base_env", "launcher", "env", "mark", "source", "note", "warning", "overrides")
#: Slurm options a site's queue name goes to (``-q`` is ``--qos``, ``-p`` is ``--partition``).
QUEUE_OPTIONS = ("partition", "qos")
#: How a Slurm site wants GPUs asked for: ``--gpus-per-node=N`` or ``--gres=gpu:N``.
GPU_OPTIONS = ("gpus-per-node", "gres")
VALIDATION_KEYS = ("fabric", "references", "sweep")
#: A performance variable's name (``allreduce_latency_4B``): what ReFrame reports it as.
PERF_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
BUNDLED_SITES = ("summit", "perlmutter", "polaris", "bede", "theta", "local")


@dataclass(frozen=True)
class StackMapping:
    """One entry of a site file's ``stacks``.

    Attributes:
        key: the spec name or glob it was written under.
        modules: modules loaded after the site's own, in order.
        base_env: the read-only environment ``--clone`` copies (conda env name or prefix), or None.
        launcher: a launcher replacing the site's, or None.
        env: variables added to the site's.
        mark: provenance mark of the mapping (``V``, ``V2``, ``I``) or None.
        source: id in the site file's ``sources``, or None.
        note: free text, or None.
        overrides: partial spec mapping merged over the spec (raw YAML mapping).
        line: line of the entry in the site file.
        spec: for a site variant, the spec it resolves as (its key is then the variant's name); else None.
        warning: what users of this stack at this site must know (``show`` and ``doctor`` print it), or None.
        env_paths: search-path entries added, ``(VAR, "prepend"|"append", entry)`` in order.
    """

    key: str
    modules: Tuple[str, ...] = ()
    base_env: Optional[str] = None
    launcher: Optional[str] = None
    env: Tuple[Tuple[str, str], ...] = ()
    mark: Optional[str] = None
    source: Optional[str] = None
    note: Optional[str] = None
    overrides: Optional[LineDict] = None
    line: Optional[int] = None
    spec: Optional[str] = None
    warning: Optional[str] = None
    env_paths: Tuple[Tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class BatchSection:
    """A site file's ``batch`` section: what its job scripts need beyond ``scheduler``/``gpus_per_node``.

    Every field is optional; a job-script flag that needs a missing one stops with an error
    naming ``batch.<field>`` (see :mod:`envtool.scheduler`).

    Attributes:
        source: id in the site file's ``sources`` the layout comes from, or None.
        cpus_per_node: CPUs one job may use on a node (Slurm CPUs, LSF cores per resource set,
            PBS/ALPS depth units); divided among the ranks of a node for ``-c``/``-c``/``--depth``/
            ``-d`` and ``OMP_NUM_THREADS``. 0 when unknown (a job script then stops with an error
            naming ``batch.cpus_per_node``). ``auto`` in the file: this machine's CPUs
            (``os.sched_getaffinity``), for the ``local`` site, whose jobs run here.
        queue: the queue (partition, QOS) used when ``--queue`` is not given, or None.
        queue_option: Slurm only: ``partition`` (``-p``, the default) or ``qos`` (``-q``).
        constraint: Slurm ``-C`` node feature (Perlmutter's ``gpu``), or None.
        gpu_option: Slurm only: ``gpus-per-node`` (the default) or ``gres`` (``--gres=gpu:N``).
        mpi: Slurm only: the ``srun --mpi=`` plugin (``pmix``), or None (the site's default).
        account_required: the site refuses jobs without an account (``--account``).
        directives: further directive arguments written as they are (``-l filesystems=home:eagle``).
        env: variables exported in job scripts only (``SLURM_CPU_BIND: cores``).
        module_use: directories ``module use`` adds before any ``module load``.
        shell: the script's interpreter line after ``#!`` (default ``/bin/bash``).
        env_paths: search-path entries added in job scripts, ``(VAR, "prepend"|"append", entry)``.
        interface: the network interface ranks use between nodes (``hsn0``, ``ib0``), or None;
            job scripts export it to Horovod's Gloo (``HOROVOD_GLOO_IFACE``), torch.distributed's
            Gloo (``GLOO_SOCKET_IFNAME``), NCCL (``NCCL_SOCKET_IFNAME``) and Open MPI's TCP BTL
            (``OMPI_MCA_btl_tcp_if_include``), and the pre-flight checks it on every node.
        launcher: the registered launcher (:func:`envtool.spec.registry.launcher_names`: ``srun``,
            ``jsrun``, ``mpiexec``, ``aprun``, ``mpirun``) whose words job scripts build from the job's
            layout, chosen apart from the scheduler; None: the scheduler's default launcher.
        time: the wall-clock limit (``H:MM:SS`` or ``D-H:MM:SS``) job scripts ask for when
            ``--time`` is not given, or None (the scheduler's own default then applies).
        queue_by_nodes: ``(max_nodes, queue)`` pairs, ascending: without ``--queue`` a job of N nodes
            goes to the first queue whose ``max_nodes`` is at least N (a site whose queues take
            different node counts, such as Polaris's ``debug-scaling`` and ``prod``); before ``queue``.
    """

    source: Optional[str] = None
    cpus_per_node: int = 0
    queue: Optional[str] = None
    queue_option: str = "partition"
    constraint: Optional[str] = None
    gpu_option: str = "gpus-per-node"
    mpi: Optional[str] = None
    account_required: bool = False
    directives: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    module_use: Tuple[str, ...] = ()
    shell: str = "/bin/bash"
    env_paths: Tuple[Tuple[str, str, str], ...] = ()
    interface: Optional[str] = None
    launcher: Optional[str] = None
    time: Optional[str] = None
    queue_by_nodes: Tuple[Tuple[int, str], ...] = ()

    def queue_for(self, nodes: int) -> Optional[str]:
        """The queue a job of ``nodes`` nodes goes to without ``--queue``: the first of
        ``queue_by_nodes`` that takes that many nodes, else ``queue`` (None when neither says)."""
        for most, name in self.queue_by_nodes:
            if nodes <= most:
                return name
        return self.queue


@dataclass(frozen=True)
class Retirement:
    """A site file's ``retired`` section: the system no longer runs jobs.

    ``specs`` and ``show`` say so, and ``jobscript``/``validate --submit`` for the site need
    ``--retired-ok`` (a job script for a system that is gone is almost always a mistake).

    Attributes:
        date: the day the facility decommissioned it (ISO ``YYYY-MM-DD``), or None when unknown.
        source: id in the site file's ``sources`` naming the announcement, or None.
        source_ref: what that id stands for (a URL), or None.
        note: free text, or None.
    """

    date: Optional[str] = None
    source: Optional[str] = None
    source_ref: Optional[str] = None
    note: Optional[str] = None

    def describe(self) -> str:
        """One line: ``decommissioned 2024-11-15 (https://…)``."""
        text = f"decommissioned {self.date}" if self.date else "decommissioned"
        if self.note:
            text += f"; {self.note}"
        if self.source_ref:
            text += f" (source: {self.source_ref.split()[0]})"
        return text


@dataclass(frozen=True)
class NodeLocal:
    """A site file's ``node_local`` section: storage on each compute node that a job may write,
    where ``jobscript --stage`` puts an environment (issue 25).

    Attributes:
        path: absolute directory; may hold ``$NAME``/``${NAME}`` references (``/mnt/bb/$USER``),
            which the job's shell expands.
        source: id in the site file's ``sources`` that documents it (required: the path is a fact
            about the site).
        directives: directive arguments a job needs to get the storage (Summit's
            ``-alloc_flags NVME``), written as they are.
        note: free text, or None.
    """

    path: str
    source: str
    directives: Tuple[str, ...] = ()
    note: Optional[str] = None


@dataclass(frozen=True)
class ContainerSection:
    """A site file's ``container`` section: how the site runs images (``envtool image``,
    ``jobscript --image``, ``validate --image``; issue 29).

    Attributes:
        runtime: one of :data:`CONTAINER_RUNTIMES` (``shifter``, ``podman-hpc``, ``apptainer``,
            ``charliecloud``).
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


@dataclass(frozen=True)
class DetectRule:
    """One rule of a site file's ``detect`` list: the site is this machine's when any rule matches.

    Attributes:
        env: ``(VAR, glob)`` pairs that must all match (``fnmatch`` on the variable's value; an
            unset variable never matches), or empty.
        hostname: a glob the host name (``socket.gethostname()``) must match, or None.
        source: id in the site file's ``sources`` the rule comes from, or None.
    """

    env: Tuple[Tuple[str, str], ...] = ()
    hostname: Optional[str] = None
    source: Optional[str] = None

    def matches(self, environ: Mapping[str, str], hostname: str) -> Optional[str]:
        """What matched (``NERSC_HOST=perlmutter``, ``hostname login2.summit``), or None.

        Args:
            environ: the environment to read (``os.environ``).
            hostname: this machine's host name.
        """
        for var, pattern in self.env:
            value = environ.get(var)
            if value is None or not fnmatch.fnmatchcase(value, pattern):
                return None
        if self.hostname is not None and not fnmatch.fnmatchcase(hostname.lower(), self.hostname.lower()):
            return None
        said = [f"{var}={environ.get(var, '')}" for var, _ in self.env]
        if self.hostname is not None:
            said.append(f"host name {hostname}")
        return " and ".join(said)


@dataclass(frozen=True)
class Reference:
    """One entry of a site file's ``validation.references``: what a performance variable of the
    validation must measure on ``nodes`` nodes, in ReFrame's form (value, lower, upper, unit).

    ReFrame's reference tuples: the bounds are fractions of ``value``, ``lower`` in [-1, 0] and
    ``upper`` >= 0 for a positive value, None for no bound
    (https://reframe-hpc.readthedocs.io/en/stable/regression_test_api.html, ``reference``;
    reframe-hpc@v4.10.4:reframe/utility/sanity.py ``reference_bounds``).

    Attributes:
        nodes: the node count it applies to.
        name: the performance variable (``allreduce_latency_4B``).
        value: the reference value (> 0), in ``unit``.
        lower: the lower bound as a fraction of ``value`` (``-0.1``: at least 90 %), or None.
        upper: the upper bound as a fraction of ``value`` (``0.5``: at most 150 %), or None.
        unit: the unit (``us``, ``GB/s``).
    """

    nodes: int
    name: str
    value: float
    lower: Optional[float]
    upper: Optional[float]
    unit: str


@dataclass(frozen=True)
class SiteFile:
    """A parsed site file (see the module docstring for the format).

    Attributes:
        name: site id.
        path: the file (display string).
        summary: one line.
        sources: id → URL or document name.
        platforms: conda platforms the site's nodes run.
        scheduler: ``slurm``, ``lsf``, ``pbs`` or None.
        launcher: launcher template (``{ranks}`` is replaced), or None.
        gpus_per_node: GPUs on one node.
        modules: modules loaded for every stack.
        env: variables set for every stack.
        notes: free text.
        stacks: the per-spec mappings, in file order.
        batch: the job-script layout (:class:`BatchSection`).
        build_caches: read-only Horovod wheel cache roots (absolute paths or ``~/…``).
        build_modules: modules that provide a C++ compiler, CMake and MPI for a Horovod compile
            (named in the fix when ``plan``/``create`` finds one missing).
        build_cache_group: the group trusted to write the site's wheel caches (a group name), or
            None: a wheel cache writable by a group is not used.
        detect: how to recognise the site (:class:`DetectRule`, any matching), possibly empty.
        clone_prefix: the default prefix of ``create --clone`` here (``$VAR`` expanded,
            ``{spec}`` replaced by the spec name), or None.
        env_paths: search-path entries added for every stack, ``(VAR, "prepend"|"append", entry)``.
        node_local: the node-local storage (:class:`NodeLocal`), or None when the file does not say.
        references: ``validation.references`` (:class:`Reference`), in file order, possibly empty.
        retired: a :class:`Retirement` when the system is decommissioned, else None.
        container: how the site runs images (:class:`ContainerSection`), or None when the file
            does not say.
        validate: the ``validation`` section's fabric and allreduce-sweep references
            (:class:`ValidateSection`).
    """

    name: str
    path: str
    summary: str = ""
    sources: Tuple[Tuple[str, str], ...] = ()
    platforms: Tuple[str, ...] = ("linux-64",)
    scheduler: Optional[str] = None
    launcher: Optional[str] = None
    gpus_per_node: int = 0
    modules: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    notes: str = ""
    stacks: Tuple[StackMapping, ...] = ()
    batch: BatchSection = BatchSection()
    build_caches: Tuple[str, ...] = ()
    build_modules: Tuple[str, ...] = ()
    build_cache_group: Optional[str] = None
    detect: Tuple[DetectRule, ...] = ()
    clone_prefix: Optional[str] = None
    env_paths: Tuple[Tuple[str, str, str], ...] = ()
    node_local: Optional[NodeLocal] = None
    references: Tuple[Reference, ...] = ()

    def references_for(self, nodes: int) -> Tuple[Reference, ...]:
        """The references of ``validation.references`` for ``nodes`` nodes (possibly none)."""
        return tuple(r for r in self.references if r.nodes == nodes)
    retired: Optional[Retirement] = None
    container: Optional[ContainerSection] = None
    validate: "ValidateSection" = None  # type: ignore[assignment]

    def mapping_for(self, spec_name: str) -> Optional[StackMapping]:
        """The stack entry for ``spec_name``: exact key first, then the first matching glob; or None.

        Site variants (entries with ``spec:``) match only their own name, never a glob.
        """
        for s in self.stacks:
            if s.key == spec_name:
                return s
        for s in self.stacks:
            if s.spec is None and any(c in s.key for c in "*?[") and fnmatch.fnmatchcase(spec_name, s.key):
                return s
        return None

    def variants(self) -> Tuple[StackMapping, ...]:
        """The site variants (entries with ``spec:``), in file order."""
        return tuple(s for s in self.stacks if s.spec is not None)


def available() -> Dict[str, Path]:
    """Map site name → file: ``$ENVTOOL_SITE_PATH`` directories first, then the bundled ``sites/``."""
    return catalog.available("sites", "ENVTOOL_SITE_PATH")


def find(name: str) -> Path:
    """The file of site ``name`` (a name, or a path when it contains ``/`` or ends in ``.yaml``).

    Raises:
        SpecError: no such site (the message lists close names).
    """
    return catalog.find_named(name, available(), "site", "or give --site-file", list_known=True)


def load_site(path: Path) -> SiteFile:
    """Read and check one site file.

    Args:
        path: the file.
    Returns:
        the :class:`SiteFile`.
    Raises:
        SpecError: unknown keys (with a "did you mean"), wrong types, unknown platforms or
            marks, a ``source`` that is not in ``sources``, bad ``overrides`` — naming the file,
            line and field.
    """
    spath = str(path)
    raw = load_yaml(Path(path))
    r = load._Reader(spath, raw, "")
    r.check_keys(SITE_FILE_KEYS)
    sources = load._sources(r)
    source_ids = [k for k, _ in sources]
    platforms = r.str_list("platforms") or ("linux-64",)
    for p in platforms:
        if p not in m.PLATFORMS:
            raise r.error("platforms", "conda platforms drawn from " + ", ".join(m.PLATFORMS), got=p)
    # the names come from the one registry the scheduler modules are registered in (envtool.spec.registry)
    scheduler = r.choice("scheduler", registry.site_scheduler_names())
    stacks_raw = r.get("stacks") or LineDict()
    if not isinstance(stacks_raw, dict):
        raise r.error("stacks", "a mapping of spec names (or globs) to stack entries", got=stacks_raw)
    stacks = []
    for key in stacks_raw:
        s = load._Reader(spath, stacks_raw[key], f"stacks.{key}", line=stacks_raw.line_of(key)
                         if isinstance(stacks_raw, LineDict) else None)
        s.check_keys(STACK_KEYS)
        mark = s.get("mark")
        if mark is not None and mark not in m.MARKS:
            raise s.error("mark", "one of " + ", ".join(m.MARKS), got=mark)
        source = s.str("source")
        if source is not None and source not in source_ids:
            raise s.error("source", "the id of an entry of 'sources' (" + ", ".join(source_ids) + ")", got=source)
        variant_of = s.str("spec")
        if variant_of is not None and any(c in str(key) for c in "*?["):
            raise s.error("spec", "no glob in the key of a site variant (an entry with 'spec:')", got=str(key))
        overrides = s.get("overrides")
        if overrides is not None:
            if not isinstance(overrides, dict):
                raise s.error("overrides", "a partial spec mapping", got=overrides)
            for banned in ("name", "extends", "abstract", "site"):
                if banned in overrides:
                    raise SpecError(spath, f"stacks.{key}.overrides.{banned}",
                                    "spec fields other than name, extends, abstract and site "
                                    "(site fields belong in the stack entry)",
                                    line=overrides.line_of(banned) if isinstance(overrides, LineDict) else None)
            # Type-check the fragment on its own so errors name this file.
            load.build_spec(spath, overrides, name=str(key), partial=True)
        stack_env, stack_env_paths = s.env_map("env")
        stacks.append(StackMapping(key=str(key), modules=s.str_list("modules"), base_env=s.str("base_env"),
                                   launcher=s.str("launcher"), env=stack_env, mark=mark, source=source,
                                   note=s.str("note"), overrides=overrides, line=s.line,
                                   spec=variant_of, warning=s.str("warning"), env_paths=stack_env_paths))
    batch = _batch(spath, raw, source_ids)
    build_caches = r.str_list("build_caches")
    for c in build_caches:
        if not (c.startswith("/") or c.startswith("~")):
            raise r.error("build_caches", "absolute directories (or ~/…) of published wheel caches", got=c)
    build_cache_group = r.str("build_cache_group")
    if build_cache_group is not None and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", build_cache_group):
        raise r.error("build_cache_group", "a group name (letters, digits, '_', '.', '-')", got=build_cache_group)
    detect = _detect(spath, raw, source_ids)
    clone_prefix = r.str("clone_prefix")
    if clone_prefix is not None and "{spec}" not in clone_prefix:
        raise r.error("clone_prefix", "a path template naming {spec} (e.g. $HOME/.conda/envs/{spec})",
                      got=clone_prefix)
    env, env_paths = r.env_map("env")
    retired = _retired(spath, raw, sources)
    return SiteFile(name=r.str("name") or Path(path).stem, path=spath, summary=r.str("summary") or "",
                    sources=sources, platforms=tuple(platforms), scheduler=None if scheduler == "none" else scheduler,
                    launcher=r.str("launcher"), gpus_per_node=r.int("gpus_per_node", 0),
                    modules=r.str_list("modules"), env=env, notes=r.str("notes") or "",
                    stacks=tuple(stacks), batch=batch, build_caches=tuple(build_caches),
                    build_modules=r.str_list("build_modules"), build_cache_group=build_cache_group, detect=detect,
                    clone_prefix=clone_prefix, env_paths=env_paths, references=_references(spath, raw),
                    retired=retired, validate=_validate(spath, raw),
                    node_local=_node_local(spath, raw, source_ids),
                    container=_container(spath, raw, source_ids))


def _section(spath: str, raw, key: str, keys, expected: str):
    """A ``load._Reader`` over the mapping section ``key`` of a site file (checked against
    ``keys``), or None when the file has no such section.

    Raises:
        SpecError: the section is not a mapping (``expected`` says what it should be) or has an
            unknown key; names the file, line and field.
    """
    data = raw.get(key)
    if data is None:
        return None
    line = raw.line_of(key) if isinstance(raw, LineDict) else None
    if not isinstance(data, dict):
        raise SpecError(spath, key, expected, got=data, line=line)
    r = load._Reader(spath, data, key, line=line)
    r.check_keys(keys)
    return r


def _container(spath: str, raw, source_ids) -> Optional[ContainerSection]:
    """Parse the ``container`` section (SpecError naming ``container.<field>`` on a bad value)."""
    r = _section(spath, raw, "container", CONTAINER_KEYS, "a mapping with runtime: NAME and source: ID")
    if r is None:
        return None
    runtime = r.choice("runtime", CONTAINER_RUNTIMES, nullable=False)
    assert runtime is not None  # choice() raises on a missing value when not nullable
    source = r.str("source")
    if source is None or source not in source_ids:
        raise r.error("source", "the id of the entry of 'sources' that documents the runtime ("
                      + (", ".join(source_ids) or "no sources yet") + ")", got=source)
    base_source = r.str("base_source")
    if base_source is not None and base_source not in source_ids:
        raise r.error("base_source", "the id of an entry of 'sources' (" + ", ".join(source_ids) + ")",
                      got=base_source)
    mpi_abi = r.choice("mpi_abi", MPI_ABIS) or "openmpi"
    base = r.str("base") or "debian:bookworm"
    if not CONTAINER_BASE_RE.fullmatch(base):
        raise r.error("base", "debian:<suite> (e.g. debian:bookworm), oci-archive:/PATH or dir:/PATH", got=base)
    mpi = r.str("mpi")
    if mpi is not None and not re.fullmatch(r"[a-z0-9_]{1,32}", mpi):
        raise r.error("mpi", "an srun --mpi plugin name (pmix, pmi2, none)", got=mpi)
    modules = r.str_list("modules")
    for mod in modules:
        if not re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", mod):
            raise r.error("modules", "runtime module names (letters, digits, '_', '.', '+', '-')", got=mod)
    bind = r.str_list("bind")
    for b in bind:
        if not NODE_LOCAL_PATH_RE.fullmatch(b) or "$" in b or "/../" in b + "/":
            raise r.error("bind", "absolute host directories (letters, digits, '_', '.', '-', '/')", got=b)
    return ContainerSection(runtime=runtime, source=source, modules=modules, mpi_abi=mpi_abi, mpi=mpi, base=base,
                            base_source=base_source, bind=bind, note=r.str("note"))


def _node_local(spath: str, raw, source_ids) -> Optional[NodeLocal]:
    """Parse the ``node_local`` section (SpecError naming ``node_local.<field>`` on a bad value)."""
    r = _section(spath, raw, "node_local", NODE_LOCAL_KEYS, "a mapping with path: DIR and source: ID")
    if r is None:
        return None
    path = r.str("path")
    if path is None:
        raise r.error("path", "the absolute directory of each compute node's local storage (/tmp, /mnt/bb/$USER)")
    if not NODE_LOCAL_PATH_RE.fullmatch(path) or "/../" in path + "/":
        raise r.error("path", "an absolute directory of letters, digits, '_', '.', '-', '/' and $NAME or ${NAME} "
                              "references (no quotes, spaces, '..', $(...) or backquotes)", got=path)
    source = r.str("source")
    if source is None or source not in source_ids:
        raise r.error("source", "the id of the entry of 'sources' that documents the path ("
                      + (", ".join(source_ids) or "no sources yet") + ")", got=source)
    directives = r.str_list("directives")
    return NodeLocal(path=path.rstrip("/") or "/", source=source, directives=directives, note=r.str("note"))



def _retired(spath: str, raw, sources) -> Optional[Retirement]:
    """Parse the ``retired`` section (SpecError naming ``retired.<field>`` on a bad value)."""
    import datetime

    data = raw.get("retired")
    if data is None:
        return None
    line = raw.line_of("retired") if isinstance(raw, LineDict) else None
    if not isinstance(data, dict):
        raise SpecError(spath, "retired", "a mapping with date (YYYY-MM-DD), source and note", got=data, line=line)
    r = load._Reader(spath, data, "retired", line=line)
    r.check_keys(RETIRED_KEYS)
    date = r.get("date")
    if isinstance(date, datetime.date):
        date = date.isoformat()
    if date is not None:
        try:
            datetime.date.fromisoformat(str(date))
        except ValueError:
            raise r.error("date", "a date YYYY-MM-DD", got=date) from None
    source_ids = dict(sources)
    source = r.str("source")
    if source is not None and source not in source_ids:
        raise r.error("source", "the id of an entry of 'sources' (" + ", ".join(source_ids) + ")", got=source)
    return Retirement(date=str(date) if date is not None else None, source=source,
                      source_ref=source_ids.get(source) if source else None, note=r.str("note"))


def retirement(name: str) -> Optional[Retirement]:
    """The :class:`Retirement` of site ``name`` (a known site name), or None when the site is not
    retired, unknown, or its file does not load (the commands that load it report that)."""
    if not name:
        return None
    try:
        path = available().get(name)
        return load_site(path).retired if path is not None else None
    except (SpecError, OSError):
        return None


def _detect(spath: str, raw, source_ids) -> Tuple[DetectRule, ...]:
    """Parse the ``detect`` list (SpecError naming ``detect[i].<field>`` on a bad rule)."""
    data = raw.get("detect")
    if data is None:
        return ()
    line = raw.line_of("detect") if isinstance(raw, LineDict) else None
    if not isinstance(data, list):
        raise SpecError(spath, "detect", "a list of rules, each with env: {VAR: glob} and/or hostname: glob",
                        got=data, line=line)
    rules_out = []
    for i, item in enumerate(data):
        where = f"detect[{i}]"
        if not isinstance(item, dict):
            raise SpecError(spath, where, "a mapping with env: {VAR: glob} and/or hostname: glob", got=item, line=line)
        d = load._Reader(spath, item, where, line=line)
        d.check_keys(DETECT_KEYS)
        env = d.str_map("env")
        hostname = d.str("hostname")
        if not env and not hostname:
            raise d.error("env", "at least one of env: {VAR: glob} or hostname: glob in each rule")
        source = d.str("source")
        if source is not None and source not in source_ids:
            raise d.error("source", "the id of an entry of 'sources' (" + ", ".join(source_ids) + ")", got=source)
        rules_out.append(DetectRule(env=env, hostname=hostname, source=source))
    return tuple(rules_out)


@dataclass(frozen=True)
class Detection:
    """The site recognised on this machine.

    Attributes:
        name: the site's name.
        path: its site file.
        reason: what matched (``NERSC_HOST=perlmutter``), or ``$ENVTOOL_SITE`` when set.
    """

    name: str
    path: Path
    reason: str


def detect(environ: Optional[Mapping[str, str]] = None, hostname: Optional[str] = None) -> Optional[Detection]:
    """The site this machine belongs to: ``$ENVTOOL_SITE`` when set, else the first site file (in
    :func:`available` order: ``$ENVTOOL_SITE_PATH`` first, then the bundled ones) one of whose
    ``detect`` rules matches; None when no site matches.

    Site files that do not parse are skipped here (``envtool show --site NAME`` reports them).

    Args:
        environ: the environment (default ``os.environ``).
        hostname: the host name (default ``socket.gethostname()``).
    Returns:
        a :class:`Detection`, or None.
    Raises:
        SpecError: ``$ENVTOOL_SITE`` names no known site.
    """
    import os
    import socket

    env = os.environ if environ is None else environ
    forced = env.get("ENVTOOL_SITE")
    if forced:
        return Detection(name=forced, path=find(forced), reason="$ENVTOOL_SITE")
    host = socket.gethostname() if hostname is None else hostname
    for name, path in available().items():
        try:
            sf = load_site(path)
        except SpecError:
            continue
        for rule in sf.detect:
            said = rule.matches(env, host)
            if said is not None:
                return Detection(name=sf.name, path=path, reason=said)
    return None


def clone_prefix(site: SiteFile, spec_name: str, environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """The site's default prefix for a clone of ``spec_name`` (its ``clone_prefix``), or None when
    the site names none or a variable it uses is unset.

    Args:
        site: the site file.
        spec_name: the spec (or site variant) name put for ``{spec}``.
        environ: the environment for ``$VAR`` (default ``os.environ``).
    Returns:
        an absolute path, or None.
    """
    import os
    import string

    if not site.clone_prefix:
        return None
    env = dict(os.environ if environ is None else environ)
    try:
        text = string.Template(site.clone_prefix.replace("{spec}", spec_name)).substitute(env)
    except (KeyError, ValueError):
        return None
    return Path(os.path.abspath(os.path.expanduser(text)))


def _references(spath: str, raw) -> Tuple[Reference, ...]:
    """Parse ``validation.references`` (SpecError naming ``validation.references.<nodes>.<name>``)."""
    data = raw.get("validation")
    if data is None:
        return ()
    line = raw.line_of("validation") if isinstance(raw, LineDict) else None
    if not isinstance(data, dict):
        raise SpecError(spath, "validation", "a mapping (" + ", ".join(VALIDATION_KEYS) + ")", got=data, line=line)
    v = load._Reader(spath, data, "validation", line=line)
    v.check_keys(VALIDATION_KEYS)
    refs = data.get("references")
    if refs is None:
        return ()
    shape = "a mapping of node counts to {performance variable: [value, lower, upper, unit]}"
    if not isinstance(refs, dict):
        raise v.error("references", shape, got=refs)
    out = []
    for nodes, per_name in refs.items():
        where = f"validation.references.{nodes}"
        at = refs.line_of(nodes) if isinstance(refs, LineDict) else v.line_of("references")
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise SpecError(spath, where, "a node count (an integer, 1 or more) as the key", got=nodes, line=at)
        if not isinstance(per_name, dict) or not per_name:
            raise SpecError(spath, where, "a mapping of performance variables to [value, lower, upper, unit]",
                            got=per_name, line=at)
        for name, ref in per_name.items():
            field = f"{where}.{name}"
            line_n = per_name.line_of(name) if isinstance(per_name, LineDict) else at
            if not isinstance(name, str) or not PERF_NAME_RE.fullmatch(name):
                raise SpecError(spath, field, "a performance variable name (letters, digits, '_'; "
                                "e.g. allreduce_latency_4B)", got=name, line=line_n)
            if not isinstance(ref, list) or len(ref) != 4:
                raise SpecError(spath, field, "[value, lower, upper, unit] (ReFrame's reference form)", got=ref,
                                line=line_n)
            value, lower, upper, unit = ref
            if not _number(value) or value <= 0:
                raise SpecError(spath, field + "[0]", "the reference value, a number above 0", got=value, line=line_n)
            if lower is not None and (not _number(lower) or not -1 <= lower <= 0):
                raise SpecError(spath, field + "[1]", "the lower bound as a fraction of the value, from -1 to 0 "
                                "(-0.1: at least 90 %), or null", got=lower, line=line_n)
            if upper is not None and (not _number(upper) or upper < 0):
                raise SpecError(spath, field + "[2]", "the upper bound as a fraction of the value, 0 or more "
                                "(0.5: at most 150 %), or null", got=upper, line=line_n)
            if not isinstance(unit, str) or not re.fullmatch(r"[A-Za-z0-9/%_.*^-]{1,16}", unit):
                raise SpecError(spath, field + "[3]", "a unit (us, GB/s, …: letters, digits, '/', '%')", got=unit,
                                line=line_n)
            out.append(Reference(nodes=nodes, name=name, value=float(value),
                                 lower=None if lower is None else float(lower),
                                 upper=None if upper is None else float(upper), unit=unit))
    return tuple(out)


#: What carries NCCL's traffic between nodes at a site: ``ib`` (InfiniBand/RoCE verbs, NCCL's
#: ``NET/IB``), ``ofi`` (libfabric through the aws-ofi-nccl plugin, as on Slingshot and EFA), or
#: ``socket`` (TCP).
FABRICS = ("ib", "ofi", "socket")
#: Controllers a reference may name (``*``: every one).
REFERENCE_CONTROLLERS = ("*", "mpi", "gloo", "torch", "nccl")
#: Units of a reference: bus bandwidth (``GB/s``, ``MB/s``; 1e9 and 1e6 bytes/s) or latency.
REFERENCE_UNITS = ("GB/s", "MB/s", "us", "ms")
#: Sizes a reference may name: the sweep's, every power of two from 8 B to 64 MiB.
REFERENCE_SIZES = tuple(2 ** k for k in range(3, 27))
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*$")


@dataclass(frozen=True)
class AllreduceReference:
    """One reference of a site's allreduce sweep, in ReFrame's form (value, lower, upper, unit):
    the measured number must lie within ``value * (1 + lower)`` and ``value * (1 + upper)``, a
    None bound being open (https://reframe-hpc.readthedocs.io/en/stable/regression_test_api.html,
    ``RegressionTest.reference``).

    Attributes:
        controller: ``mpi``, ``gloo``, ``torch``, ``nccl`` or ``*`` (all).
        nodes: the node count it holds for.
        size: the allreduce's size in bytes (one of :data:`REFERENCE_SIZES`).
        value: the reference number, > 0, in ``unit``.
        lower: fraction (<= 0) below ``value`` still accepted, or None.
        upper: fraction (>= 0) above ``value`` still accepted, or None.
        unit: ``GB/s`` or ``MB/s`` (bus bandwidth) or ``us``/``ms`` (latency per allreduce).
        source: where it was written (``FILE:LINE``).
    """

    controller: str
    nodes: int
    size: int
    value: float
    lower: Optional[float]
    upper: Optional[float]
    unit: str
    source: str = ""


@dataclass(frozen=True)
class ValidateSection:
    """What a site file's ``validation`` section says of the allreduce sweep::

        validation:
          fabric: ib                    # NCCL must use it between nodes (ib, ofi, socket)
          sweep:                        # controller (or "*") → nodes → size → [value, lower, upper, unit]
            gloo:
              2:
                64MiB: [1.2, -0.25, null, GB/s]
                8B: [150, null, 0.5, us]

    Attributes:
        fabric: ``ib``, ``ofi``, ``socket`` or None.
        references: the :class:`AllreduceReference` entries.
    """

    fabric: Optional[str] = None
    references: Tuple[AllreduceReference, ...] = ()


def parse_size(text: object) -> Optional[int]:
    """``64MiB``, ``8 B``, ``4096`` → bytes, or None when unreadable."""
    if isinstance(text, bool):
        return None
    m_ = _SIZE.match(str(text))
    if not m_:
        return None
    return int(m_.group(1)) << {"B": 0, None: 0, "KiB": 10, "MiB": 20, "GiB": 30}[m_.group(2)]


def _number(v: object) -> bool:
    """A finite int or float (not a bool): what a reference's value and bounds must be."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _validate(spath: str, raw) -> ValidateSection:
    """Parse the ``validation`` section's ``fabric`` and ``sweep`` (SpecError naming
    ``validation.<field>`` on a bad value; :func:`_references` checks the section's keys)."""
    data = raw.get("validation")
    if not isinstance(data, dict):
        return ValidateSection()
    line = raw.line_of("validation") if isinstance(raw, LineDict) else None
    v = load._Reader(spath, data, "validation", line=line)
    fabric = v.choice("fabric", FABRICS)
    refs = []
    by_controller = data.get("sweep") or {}
    if not isinstance(by_controller, dict):
        raise v.error("sweep", "a mapping: controller (" + ", ".join(REFERENCE_CONTROLLERS) + ") → node count "
                      "→ size → [value, lower, upper, unit]", got=by_controller)

    def where(node, key) -> Optional[int]:
        return node.line_of(key) if isinstance(node, LineDict) else line

    for controller, by_nodes in by_controller.items():
        field = f"validation.sweep.{controller}"
        if str(controller) not in REFERENCE_CONTROLLERS:
            raise SpecError(spath, field, "a controller: " + ", ".join(REFERENCE_CONTROLLERS), got=controller,
                            line=where(by_controller, controller))
        if not isinstance(by_nodes, dict):
            raise SpecError(spath, field, "a mapping: node count → size → [value, lower, upper, unit]",
                            got=by_nodes, line=where(by_controller, controller))
        for nodes, by_size in by_nodes.items():
            nfield = f"{field}.{nodes}"
            if isinstance(nodes, bool) or not str(nodes).isdigit() or int(nodes) < 1:
                raise SpecError(spath, nfield, "a node count (1 or more)", got=nodes, line=where(by_nodes, nodes))
            if not isinstance(by_size, dict):
                raise SpecError(spath, nfield, "a mapping: size (8B … 64MiB) → [value, lower, upper, unit]",
                                got=by_size, line=where(by_nodes, nodes))
            for size, ref in by_size.items():
                sfield = f"{nfield}.{size}"
                nbytes = parse_size(size)
                if nbytes is None or nbytes not in REFERENCE_SIZES:
                    raise SpecError(spath, sfield, "a size of the sweep: a power of two from 8B to 64MiB "
                                    "(8B, 1KiB, 64MiB …)", got=size, line=where(by_size, size))
                ok = (isinstance(ref, list) and len(ref) == 4 and _number(ref[0]) and ref[0] > 0
                      and (ref[1] is None or (_number(ref[1]) and -1 <= ref[1] <= 0))
                      and (ref[2] is None or (_number(ref[2]) and ref[2] >= 0))
                      and ref[3] in REFERENCE_UNITS)
                if not ok:
                    raise SpecError(spath, sfield, "[value > 0, lower (a fraction from -1 to 0, or null), upper "
                                    "(a fraction >= 0, or null), unit (" + ", ".join(REFERENCE_UNITS) + ")]",
                                    got=ref, line=where(by_size, size))
                refs.append(AllreduceReference(controller=str(controller), nodes=int(nodes), size=nbytes,
                                               value=float(ref[0]),
                                               lower=None if ref[1] is None else float(ref[1]),
                                               upper=None if ref[2] is None else float(ref[2]), unit=ref[3],
                                               source=f"{spath}: {sfield}"))
    return ValidateSection(fabric=fabric, references=tuple(refs))


def _batch(spath: str, raw, source_ids) -> BatchSection:
    """Parse the ``batch`` section (SpecError naming ``batch.<field>`` on a bad value)."""
    data = raw.get("batch")
    if data is None:
        return BatchSection()
    line = raw.line_of("batch") if isinstance(raw, LineDict) else None
    if not isinstance(data, dict):
        raise SpecError(spath, "batch", "a mapping of job-script settings (" + ", ".join(BATCH_KEYS) + ")",
                        got=data, line=line)
    b = load._Reader(spath, data, "batch", line=line)
    b.check_keys(BATCH_KEYS)
    source = b.str("source")
    if source is not None and source not in source_ids:
        raise b.error("source", "the id of an entry of 'sources' (" + ", ".join(source_ids) + ")", got=source)
    mpi = b.str("mpi")
    if mpi is not None and not mpi.replace("_", "").isalnum():
        raise b.error("mpi", "an srun --mpi plugin name (pmix, pmi2, cray_shasta)", got=mpi)
    interface = b.str("interface")
    if interface is not None and not INTERFACE_RE.fullmatch(interface):
        raise b.error("interface", "a network interface name (1 to 15 letters, digits, '_', '.', '@', '-'; "
                      "e.g. ib0, hsn0, eth0)", got=interface)
    env, env_paths = b.env_map("env")
    if data.get("cpus_per_node") == "auto":
        # this machine's CPUs (the ``local`` site: the job runs here)
        import os

        cpus_per_node = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    else:
        cpus_per_node = b.int("cpus_per_node", 0)
    time = b.str("time")
    if time is not None and not BATCH_TIME_RE.fullmatch(time):
        raise b.error("time", "a wall-clock limit H:MM:SS or D-H:MM:SS (quoted: \"00:30:00\")", got=time)
    by_nodes = data.get("queue_by_nodes")
    pairs: List[Tuple[int, str]] = []
    if by_nodes is not None:
        if not isinstance(by_nodes, dict) or not by_nodes:
            raise b.error("queue_by_nodes", "a mapping MAX_NODES: QUEUE (10: debug-scaling)", got=by_nodes)
        for most, name in by_nodes.items():
            if isinstance(most, bool) or not isinstance(most, int) or most < 1 or not isinstance(name, str) \
                    or not name or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
                raise b.error("queue_by_nodes", "MAX_NODES (a positive integer): QUEUE (a queue name)",
                              got={most: name})
            pairs.append((most, name))
    return BatchSection(interface=interface, time=time, queue_by_nodes=tuple(sorted(pairs)),
                        source=source, cpus_per_node=cpus_per_node, queue=b.str("queue"),
                        queue_option=b.one_of("queue_option", QUEUE_OPTIONS, default="partition"),
                        constraint=b.str("constraint"),
                        gpu_option=b.one_of("gpu_option", GPU_OPTIONS, default="gpus-per-node"),
                        mpi=mpi, account_required=b.bool("account_required", False),
                        directives=b.str_list("directives"), env=env, env_paths=env_paths,
                        module_use=b.str_list("module_use"), shell=b.str("shell") or "/bin/bash",
                        launcher=b.choice("launcher", registry.launcher_names()))


def _merge_env(*parts: Tuple[Tuple[str, str], ...]) -> Tuple[Tuple[str, str], ...]:
    out: Dict[str, str] = {}
    for part in parts:
        for k, v in part:
            out.pop(k, None)
            out[k] = v
    return tuple(out.items())


@dataclass(frozen=True)
class Resolved:
    """A spec resolved for a site, with what was used to resolve it (for ``show``).

    Attributes:
        spec: the resolved spec.
        site: the site file.
        mapping: the stack entry applied, or None (site defaults only).
        spec_site: the spec's own site section before the overlay.
    """

    spec: m.Spec
    site: SiteFile
    mapping: Optional[StackMapping]
    spec_site: m.Site


def resolve_full(name: str, site: Optional[str] = None, site_file: Optional[str] = None) -> Resolved:
    """Load spec ``name`` and overlay the site (see the module docstring).

    Args:
        name: spec name or path, or the name of a site variant of the site file.
        site: site name (bundled or in ``$ENVTOOL_SITE_PATH``), or None.
        site_file: a site file path (wins over ``site``), or None.
    Returns:
        :class:`Resolved`.
    Raises:
        SpecError: the spec, the site file or the combination does not validate (no shared
            platform; a rule broken after the overrides), or the spec is abstract.
    """
    site_path = Path(site_file) if site_file else find(site or "local")
    if site_file:
        check_input(site_path, "--site-file")  # a FIFO or a device: exit 2 at once
    if site_file and not site_path.is_file():
        raise SpecError(site_file, "(site file)", "an existing site file")
    sf = load_site(site_path)
    variant = None
    if "/" not in name and not name.endswith((".yaml", ".yml")) and name not in catalog.available():
        variant = next((s for s in sf.variants() if s.key == name), None)
    spec_name = name
    if variant is not None:
        if variant.spec is None or variant.spec not in catalog.available():
            raise SpecError(sf.path, f"stacks.{variant.key}.spec", "the name of a known spec", got=variant.spec,
                            line=variant.line, hint="see 'envtool specs'")
        spec_name = variant.spec
    spath = catalog.find(spec_name)
    raw = load.resolve_raw(spath, catalog.find)
    if raw.get("abstract") is True:
        raise SpecError(spath, "abstract", "a concrete spec (this one is only a parent for 'extends')",
                        line=raw.line_of("abstract"))
    spec_name = variant.key if variant is not None else str(raw.get("name") or spath.stem)
    mapping = variant if variant is not None else sf.mapping_for(spec_name)
    if sf.sources:
        own = raw.get("sources")
        if own is None or isinstance(own, dict):
            merged = LineDict(dict(sf.sources))
            merged.update(own or {})
            raw["sources"] = merged
    if mapping is not None and mapping.overrides:
        raw = load.merge(raw, mapping.overrides)
    spec = load.build_spec(str(spath), raw, name=spec_name)
    shared = tuple(p for p in spec.platforms if p in sf.platforms)
    if not shared:
        raise SpecError(sf.path, "platforms", f"a platform of spec {spec_name!r} ({', '.join(spec.platforms)})",
                        got=list(sf.platforms), hint=f"site {sf.name} cannot run {spec_name}")
    own_site = spec.site
    modules = list(sf.modules)
    if mapping is not None:
        modules += [x for x in mapping.modules if x not in modules]
    elif own_site.name == sf.name:
        modules += [x for x in own_site.modules if x not in modules]
    base_env = mapping.base_env if mapping is not None and mapping.base_env else (
        own_site.base_env if own_site.name == sf.name else None)
    launcher = (mapping.launcher if mapping is not None and mapping.launcher else None) or sf.launcher or (
        own_site.launcher if own_site.name == sf.name else None)
    new_site = m.Site(name=sf.name, modules=tuple(modules), base_env=base_env, launcher=launcher,
                      scheduler=sf.scheduler, gpus_per_node=sf.gpus_per_node,
                      env=_merge_env(own_site.env if own_site.name == sf.name else (), sf.env,
                                     mapping.env if mapping is not None else ()),
                      build_caches=sf.build_caches, build_modules=sf.build_modules,
                      build_cache_group=sf.build_cache_group,
                      # the libraries the spec records are that site's modules'; another site's are unknown
                      libraries=own_site.libraries if own_site.name == sf.name else (),
                      env_paths=((own_site.env_paths if own_site.name == sf.name else ()) + sf.env_paths
                                 + (mapping.env_paths if mapping is not None else ())))
    spec = dataclasses.replace(spec, site=new_site, platforms=shared)
    rules.check(spec, raw)
    return Resolved(spec=spec, site=sf, mapping=mapping, spec_site=own_site)


def resolve(name: str, site: Optional[str] = None, site_file: Optional[str] = None) -> m.Spec:
    """Spec ``name`` resolved for ``site`` / ``site_file`` (see :func:`resolve_full`).

    Returns:
        the resolved :class:`~envtool.spec.model.Spec`.
    Raises:
        SpecError: exit status 2.
    """
    return resolve_full(name, site=site, site_file=site_file).spec
