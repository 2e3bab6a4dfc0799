"""The spec model: plain, frozen dataclasses that every other layer reads.

A spec (``specs/*.yaml``) says what an environment holds and how it is built: platform,
engine, channels, conda and pip packages, how Horovod is built and what it must report,
and the site it runs on. ``envtool.spec.load`` turns YAML into these classes and validates
them; nothing here does I/O.

Provenance: every pinned value (a package match spec, the Python, CUDA or Horovod version)
is a :class:`Pin` that may carry a mark — ``V`` read in a primary source, ``V2`` read in a
secondary source, ``I`` inferred (the marks of ``docs/reference/stacks.md``) — and the id of
one of the spec's ``sources``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

if TYPE_CHECKING:  # only for annotations: py-rattler and packaging are imported where values are parsed
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version
    from rattler import MatchSpec

#: Provenance marks and their meaning (``docs/reference/stacks.md``, "Marks").
MARKS: Dict[str, str] = {
    "V": "verified in a primary source (the project's own repository at a tag, the site's docs)",
    "V2": "read in a secondary public source (another site's docs, a user's conda list)",
    "I": "inferred (nobody has seen it)",
}


from envtool.core import frameworks
#: conda platforms a spec may name.
PLATFORMS = ("linux-64", "linux-ppc64le", "linux-aarch64", "linux-s390x", "osx-64", "osx-arm64")

ENGINES = ("venv", "conda")
HOROVOD_INSTALLS = ("pip-build", "conda", "none")
FRAMEWORKS = frameworks.NAMES  # ("tensorflow", "pytorch", "mxnet"): envtool.core.frameworks
CONTROLLERS = ("mpi", "gloo")
GPU_OPERATION_CHOICES = ("nccl", "mpi")
#: Per-operation GPU overrides (``HOROVOD_GPU_<OP>``) and the values each takes.
#: ALLREDUCE also takes DDL: horovod/setup.py@v0.19.0, CMakeLists.txt@v0.28.1.
GPU_OP_CHOICES: Dict[str, Tuple[str, ...]] = {
    "allreduce": ("nccl", "mpi", "ddl"),
    "allgather": ("nccl", "mpi"),
    "broadcast": ("nccl", "mpi"),
    "alltoall": ("nccl", "mpi"),
    "reducescatter": ("nccl", "mpi"),
}
CPU_OPERATION_CHOICES = ("mpi", "gloo", "ccl")
NCCL_LINKS = ("shared", "static")
START_METHODS = ("fork", "spawn", "forkserver")
#: Lifecycle of a stack (spec field ``status``): ``active`` (maintained), ``deprecated`` (still
#: usable, a replacement exists) or ``archived`` (its vendor stopped maintaining it, e.g. IBM
#: archived WML-CE on 2020-11-10: Bede's "IBM WMLCE" page, ``N8-CIR-Bede/documentation@338157492d38:software/applications/wmlce.rst#L10``).
STATUSES = ("active", "deprecated", "archived")

#: Names that ``horovodrun --check-build`` prints, per section (horovod/runner/launch.py@v0.28.1).
CHECK_BUILD_FRAMEWORKS = frameworks.LABELS
CHECK_BUILD_CONTROLLERS = ("MPI", "Gloo")
CHECK_BUILD_TENSOR_OPERATIONS = ("NCCL", "DDL", "CCL", "MLSL", "MPI", "Gloo")


def one_version(text: Optional[str], fuzzy_equals: bool = False) -> Tuple[Optional[str], bool]:
    """``(version, wildcard)`` of a version constraint that names one version (``==2.13.0``,
    ``1.7.1.*``, ``=3.8``), else ``(None, False)`` for a range or nothing. ``fuzzy_equals``: a
    single leading ``=`` means "starts with" (conda's ``=3.8`` is ``3.8.*``)."""
    if not text:
        return None, False
    text = text.strip()
    if any(c in text for c in "<>!~,|") or not text:
        return None, False
    wildcard = text.endswith(".*")
    if wildcard:
        text = text[:-2]
    if text.startswith("=="):
        text = text[2:]
    elif text.startswith("="):
        text, wildcard = text[1:], wildcard or fuzzy_equals
    text = text.strip()
    return (text or None), (wildcard and bool(text))


def parse_version(text: Optional[str]) -> Optional["Version"]:
    """``text`` as a pypa ``packaging.version.Version`` (PEP 440), or None when it is empty or not a
    PEP 440 version (conda versions such as ``1.1.1k`` are valid conda but not PEP 440).

    Source: PEP 440, "Version scheme" (https://peps.python.org/pep-0440/).
    """
    if not text:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


@dataclass(frozen=True)
class Pin:
    """A pinned value with its provenance, and the values parsed from it when the spec was loaded.

    Attributes:
        value: the pin as written: a pip requirement (``torch==2.13.0``), a conda match spec
            (``pytorch-base 1.7.1.*``) or a bare version (``0.28.1``).
        mark: ``V``, ``V2``, ``I`` (see :data:`MARKS`) or None when the spec gives none.
        source: id of an entry of :attr:`Spec.sources`, or None.
        note: free text (e.g. why a pin differs from a seed document).
        index: a pip pin's package index when it is not PyPI (``https://download.pytorch.org/whl/cpu``
            for PyTorch's ``+cpu`` builds), else None. ``lock`` resolves with it and records the URLs
            of its files; ``create`` installs from it (or a configured mirror of it).
        kind: how ``value`` was parsed at load time (pypa ``packaging`` for ``pip``, py-rattler
            ``MatchSpec`` for ``conda``, ``packaging.version`` for a bare ``version``), or None
            for a pin built in memory without parsing.
        name: the package's name (PEP 503 normalized for pip, conda's for conda), None for a
            bare version.
        version: the one version the pin names, without operators or a trailing ``.*``
            (``torch==2.13.0`` → ``2.13.0``, ``pytorch-base 1.7.1.*`` → ``1.7.1``, ``=3.8`` →
            ``3.8``); None for a range (``>=3.8,<3.11``) or no version.
        wildcard: True when ``version`` is a prefix (``1.7.1.*``, conda's ``=3.8``): any version
            that starts with it matches.
        requirement: a ``pip`` pin's ``packaging.requirements.Requirement`` (its
            ``specifier`` is the ``SpecifierSet``), else None.
        match_spec: a ``conda`` pin's py-rattler ``MatchSpec``, else None.
        parsed_version: :attr:`version` as a ``packaging.version.Version``; None when the pin
            names no single version or the version is not PEP 440 (conda's ``1.1.1k``).

    The parsed values take no part in ``==`` and ``hash`` (``value`` and the fields above do):
    py-rattler's ``MatchSpec`` compares by identity.
    """

    value: str
    mark: Optional[str] = None
    source: Optional[str] = None
    note: Optional[str] = None
    index: Optional[str] = None
    kind: Optional[str] = None
    name: Optional[str] = None
    version: Optional[str] = None
    wildcard: bool = False
    requirement: Optional["Requirement"] = field(default=None, compare=False, repr=False)
    match_spec: Optional["MatchSpec"] = field(default=None, compare=False, repr=False)
    parsed_version: Optional["Version"] = field(default=None, compare=False, repr=False)

    @classmethod
    def bare(cls, value: str, **provenance: Any) -> "Pin":
        """A bare version pin made in memory (``0.28.1``, ``=3.8``, ``10.2.*``), parsed like a loaded one."""
        version, wildcard = one_version(value)
        return cls(value=value, kind="version", version=version, wildcard=wildcard,
                   parsed_version=parse_version(version), **provenance)

    @property
    def specifier(self) -> Optional["SpecifierSet"]:
        """A ``pip`` pin's ``packaging.specifiers.SpecifierSet`` (empty for a bare name), else None."""
        return self.requirement.specifier if self.requirement is not None else None

    def matches(self, installed: str) -> Optional[bool]:
        """Whether an installed version fits :attr:`version`; None when the pin names no single version.

        Versions are compared as versions, never as text: with pypa ``packaging`` (PEP 440) when
        both parse, so ``2.0`` fits ``2``, ``1.10`` does not fit ``1.9``, a pre-release
        (``2.1.0rc1``) does not fit ``2.1.0``, and an installed local label (``2.1.0+cpu``) is
        ignored unless the pin names one (then it must be equal: PEP 440 "Version matching").
        A wildcard pin, or a pin with fewer release components than the installed version
        (``3.11`` against ``3.11.7``), matches by prefix (PEP 440 ``==3.11.*``). A version pypa
        cannot read (conda's ``1.1.1k``) is compared with py-rattler's conda ``Version``
        (prefix match, local label ignored unless the pin has one).

        Args:
            installed: the installed version (``2.13.0+cpu``).
        Returns:
            True or False, or None when :attr:`version` is None.
        """
        if self.version is None:
            return None
        from packaging.specifiers import Specifier

        want = self.parsed_version or parse_version(self.version)
        have = parse_version(installed.strip())
        if want is not None and have is not None:
            exact_only = want.pre is not None or want.post is not None or want.dev is not None \
                or want.local is not None
            prefix = not exact_only and (self.wildcard or len(want.release) < len(have.release))
            return Specifier(f"=={want.public}.*" if prefix else f"=={want}").contains(have, prereleases=True)
        from rattler import Version as CondaVersion  # conda's version rules (rattler_conda_types)

        try:
            conda_want, conda_have = CondaVersion(self.version), CondaVersion(installed.strip())
        except Exception:  # noqa: BLE001 - py-rattler raises its own InvalidVersionError
            return False
        if not conda_want.has_local:
            conda_have = conda_have.strip_local()
        return conda_have.starts_with(conda_want)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Site:
    """Where the stack runs: modules, base environment, launcher.

    Attributes:
        name: site id (``local``, ``summit``, ``perlmutter`` …).
        modules: Lmod modules loaded before any step, in order (``cudnn/8.7.0``).
        base_env: what ``--clone`` copies: a conda env name, a prefix, or None.
        launcher: command template; ``{ranks}`` is replaced by the number of ranks.
        scheduler: ``slurm``, ``lsf``, ``pbs``, ``cobalt`` or None.
        gpus_per_node: GPUs on one node (0 for CPU-only).
        env: variables the site sets for every environment.
        env_paths: search-path entries the site adds, ``(VAR, "prepend"|"append", entry)`` applied in
            order (``env: {VAR: {prepend: DIR}}``; undone on ``module unload``).
        build_caches: read-only Horovod wheel cache roots the site publishes (site file's
            ``build_caches``), consulted after the user's cache and ``$ENVTOOL_CACHE_PATH``.
        build_modules: modules that provide a C++ compiler, CMake and MPI on the site (site
            file's ``build_modules``), named when a Horovod compile lacks one of them.
        libraries: ``(name, Pin)`` for libraries the site's modules provide (``cudnn``,
            ``nccl``), with their provenance: recorded and shown, never installed by envtool
            (e.g. ALCF's ``conda/2022-09-08`` modulefile puts cuDNN 8.4.1.50 and NCCL 2.14.3 on
            the library path: argonne-lcf/conda_install_scripts@772cb822f974:
            alcf_polaris/modulefiles/2022-09-08.lua#L55-L57).
        build_cache_group: the group trusted to write those caches and ``$ENVTOOL_CACHE_PATH``'s
            (site file's ``build_cache_group``), or None: a cache writable by any group is skipped.
        gpu: the site file's ``gpu`` section (:class:`envtool.spec.sites.gpu.SiteGPU`: the GPU
            nodes' model, capability, driver, MIG, network and NCCL plug-ins), or None.
    """

    name: str = "local"
    modules: Tuple[str, ...] = ()
    base_env: Optional[str] = None
    launcher: Optional[str] = None
    scheduler: Optional[str] = None
    gpus_per_node: int = 0
    env: Tuple[Tuple[str, str], ...] = ()
    build_caches: Tuple[str, ...] = ()
    build_modules: Tuple[str, ...] = ()
    libraries: Tuple[Tuple[str, "Pin"], ...] = ()
    env_paths: Tuple[Tuple[str, str, str], ...] = ()
    build_cache_group: Optional[str] = None
    gpu: Optional[Any] = None


@dataclass(frozen=True)
class Packages:
    """Packages to install: conda match specs, then pip requirements (in that order)."""

    conda: Tuple[Pin, ...] = ()
    pip: Tuple[Pin, ...] = ()


@dataclass(frozen=True)
class HorovodSpec:
    """How Horovod is installed and which capabilities it is built with.

    Attributes:
        version: the Horovod version pin (a bare version such as ``0.28.1``), or None.
        install: ``pip-build`` (compile from the PyPI sdist or ``source``), ``conda`` (a
            package from the spec's channels), ``none``.
        source: a pip-installable source instead of ``horovod==<version>``, e.g. Summit's
            ``git+https://github.com/horovod/horovod.git@bbf09d79…``.
        frameworks: requested frameworks (subset of :data:`FRAMEWORKS`).
        controllers: requested controllers (subset of :data:`CONTROLLERS`).
        gpu_operations: ``nccl`` / ``mpi`` for every GPU collective, or None (CPU only, or
            per-op choices in ``gpu_ops``).
        gpu_ops: per-operation choices, e.g. ``(("allreduce", "ddl"),)``.
        cpu_operations: ``mpi`` / ``gloo`` / ``ccl`` or None (Horovod's default).
        nccl_link: ``shared`` / ``static`` or None.
        allow_mixed_gpu_impl: set ``HOROVOD_ALLOW_MIXED_GPU_IMPL=1``.
        cuda_home: value for ``HOROVOD_CUDA_HOME`` (may use ``${CONDA_PREFIX}``).
        nccl_home: value for ``HOROVOD_NCCL_HOME``.
        cuda_cc_list: value for ``HOROVOD_BUILD_CUDA_CC_LIST`` (``70,80``).
        extra_env: any other build variables, passed through verbatim.
        build_packages: conda packages that the Horovod build needs and the environment does
            not keep (OLCF's WML-CE 1.6.2 recipe installs ``gxx_linux-ppc64le=7.3.0`` before
            building Horovod and removes it afterwards: olcf/olcf-user-docs@f674c627dd63:
            software/analytics/ibm-wml-ce.rst#L153-L155). The conda engine installs those the
            environment lacks before the build (step ``conda-install-build``) and removes exactly
            what it added after it (``conda-remove-build``), so they are in neither the
            environment's package list nor its lockfile.
    """

    version: Optional[Pin] = None
    install: str = "none"
    source: Optional[str] = None
    frameworks: Tuple[str, ...] = ()
    controllers: Tuple[str, ...] = ()
    gpu_operations: Optional[str] = None
    gpu_ops: Tuple[Tuple[str, str], ...] = ()
    cpu_operations: Optional[str] = None
    nccl_link: Optional[str] = None
    allow_mixed_gpu_impl: bool = False
    cuda_home: Optional[str] = None
    nccl_home: Optional[str] = None
    cuda_cc_list: Optional[str] = None
    extra_env: Tuple[Tuple[str, str], ...] = ()
    build_packages: Tuple["Pin", ...] = ()

    @property
    def uses_gpu(self) -> bool:
        """True when any GPU collective is requested."""
        return self.gpu_operations is not None or bool(self.gpu_ops)


@dataclass(frozen=True)
class CheckBuildExpectation:
    """What ``horovodrun --check-build`` must report (names as Horovod prints them)."""

    frameworks: Tuple[str, ...] = ()
    controllers: Tuple[str, ...] = ()
    tensor_operations: Tuple[str, ...] = ()


@dataclass(frozen=True)
class VenvOptions:
    """How the venv engine makes the environment (spec section ``venv``).

    Attributes:
        system_site_packages: ``python -m venv --system-site-packages``: the venv sees the base
            interpreter's packages (a site module's Python with its PyTorch, say) and installs
            only what it adds. NERSC recommends this for extending its ``pytorch`` and
            ``tensorflow`` modules (docs.nersc.gov, "Machine learning / PyTorch: installing
            additional packages").
    """

    system_site_packages: bool = False


@dataclass(frozen=True)
class Expect:
    """What validation checks after the build.

    Attributes:
        check_build: the capabilities, or None when Horovod has no ``--check-build``
            (before 0.17.1) or is not installed.
        dataloader_start_method: the start method a DataLoader must work under, or None.
        import_warnings: regular expressions (``re.search``) of the warnings that importing the
            frameworks and their Horovod bindings may print; any other warning fails validation.
    """

    check_build: Optional[CheckBuildExpectation] = None
    dataloader_start_method: Optional[str] = None
    import_warnings: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Distribution:
    """The release a spec mirrors (``open-ce`` ``1.1.3``, ``ibm-wml-ce`` ``1.6.2``, ``site`` …)."""

    name: str = "custom"
    version: Optional[str] = None


@dataclass(frozen=True)
class Status:
    """A stack's lifecycle state (spec field ``status``).

    Attributes:
        value: one of :data:`STATUSES`.
        since: the day it took that state (``YYYY-MM-DD``), or None.
        source: id of an entry of :attr:`Spec.sources` that says so, or None.
        note: free text shown with it (what replaces the stack).
    """

    value: str = "active"
    since: Optional[str] = None
    source: Optional[str] = None
    note: Optional[str] = None

    @property
    def active(self) -> bool:
        """True for ``active``."""
        return self.value == "active"

    def message(self, name: str) -> str:
        """One line for users, e.g. ``ibm-wml-ce-1.7.0 is archived (since 2020-11-10): …``."""
        text = f"{name} is {self.value}" + (f" (since {self.since})" if self.since else "")
        return text + (f": {self.note}" if self.note else "")


@dataclass(frozen=True)
class Spec:
    """One resolved spec (``extends`` already merged).

    Attributes:
        name: the spec's name (its file stem).
        path: the file it was loaded from (display string), or None.
        summary: one line for listings.
        distribution: the release it mirrors.
        sources: id → URL or document name, the references its pins cite.
        platforms: conda platforms it supports.
        engine: ``venv`` or ``conda``.
        python: the Python version pin, or None (the interpreter running envtool).
        cuda: the CUDA version pin (sets ``__cuda`` when solving), or None for CPU only.
        site: the site section.
        channels: conda channels, highest priority first.
        packages: conda and pip packages.
        horovod: the Horovod section.
        expect: what validation checks.
        env: variables exported by the environment's activation and its modulefile.
        env_paths: search-path entries added by its modulefile, job scripts and ``validate``:
            ``(VAR, "prepend"|"append", entry)`` applied in order (``env: {PATH: {prepend: DIR}}``).
        venv: options of the venv engine (:class:`VenvOptions`).
        notes: free text for ``show`` (e.g. where seeds and primary sources disagree).
        extends: the parent spec's name, or None.
        status: lifecycle state (:class:`Status`; ``active`` unless the spec says otherwise).
    """

    name: str
    path: Optional[str] = None
    summary: str = ""
    distribution: Distribution = field(default_factory=Distribution)
    sources: Tuple[Tuple[str, str], ...] = ()
    platforms: Tuple[str, ...] = ("linux-64",)
    engine: str = "venv"
    python: Optional[Pin] = None
    cuda: Optional[Pin] = None
    site: Site = field(default_factory=Site)
    channels: Tuple[str, ...] = ()
    packages: Packages = field(default_factory=Packages)
    horovod: HorovodSpec = field(default_factory=HorovodSpec)
    expect: Expect = field(default_factory=Expect)
    env: Tuple[Tuple[str, str], ...] = ()
    notes: str = ""
    extends: Optional[str] = None
    venv: VenvOptions = field(default_factory=VenvOptions)
    status: Status = field(default_factory=Status)
    env_paths: Tuple[Tuple[str, str, str], ...] = ()

    def pins(self) -> Iterator[Tuple[str, "Pin"]]:
        """Yield ``(field, Pin)`` for every pinned value, for provenance checks and ``show``."""
        if self.python is not None:
            yield "python", self.python
        if self.cuda is not None:
            yield "cuda", self.cuda
        for i, pin in enumerate(self.packages.conda):
            yield f"packages.conda[{i}]", pin
        for i, pin in enumerate(self.packages.pip):
            yield f"packages.pip[{i}]", pin
        if self.horovod.version is not None:
            yield "horovod.version", self.horovod.version
        for i, pin in enumerate(self.horovod.build_packages):
            yield f"horovod.build_packages[{i}]", pin
        for name, pin in self.site.libraries:
            yield f"site.libraries.{name}", pin


def env_path_edits(paths: Tuple[Tuple[str, str, str], ...]) -> Dict[str, Dict[str, List[str]]]:
    """``env_paths`` (``(VAR, op, entry)`` applied in order) as written in a spec:
    ``{VAR: {"prepend": [entries in front, in order], "append": [entries behind, in order]}}``."""
    out: Dict[str, Dict[str, List[str]]] = {}
    for var, op, entry in paths:
        ops = out.setdefault(var, {})
        if op == "prepend":
            ops.setdefault(op, []).insert(0, entry)
        else:
            ops.setdefault(op, []).append(entry)
    return out


def env_path_text(paths: Tuple[Tuple[str, str, str], ...]) -> Dict[str, str]:
    """``env_paths`` in words for listings: ``{"PATH": "/x/bin:$PATH"}``."""
    return {var: ":".join(ops.get("prepend", []) + [f"${var}"] + ops.get("append", []))
            for var, ops in env_path_edits(paths).items()}
