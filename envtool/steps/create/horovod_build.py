"""The Horovod build step: derive the build environment, apply fix rules, build or reuse a wheel.

Build: ``pip wheel --no-build-isolation --no-cache-dir --no-deps`` inside the environment (build
isolation hides the installed framework from CMake's probe: ``docs/reference/horovod.md``,
pitfalls), then ``pip install`` of the wheel. Built wheels are kept in the
:class:`~envtool.horovod.cache.WheelCache`, so a second environment with the same key installs
in seconds.
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from packaging.version import Version

from envtool.core import frameworks
from envtool.core.errors import StepFailed
from envtool.horovod import cache as wheel_cache
from envtool.horovod import fixes
from envtool.horovod import requirements as system_tools
from envtool.core.paths import ensure_dir
from envtool.horovod.flags import build_env, cache_relevant, requirement
from envtool.spec.model import Spec
from envtool.spec.rules import horovod_version
from envtool.core.plan import PlanOptions, Step
from envtool.steps.kernel import machine
from envtool.core.prefix import PrefixData

#: Distribution names per framework, as ``importlib.metadata`` sees them.
FRAMEWORK_DISTS = {f.name: f.pip_names for f in frameworks.FRAMEWORKS}


def wrapper_dir() -> Path:
    """Where fix rules keep their helper files (outlives any one build)."""
    return wheel_cache.cache_root() / "fixes"


@dataclass(frozen=True)
class BuildDecision:
    """Everything the ``build-horovod`` action needs, decided once when planning (the step's payload).

    Attributes:
        prefix: the environment the build runs in (the temporary build prefix during ``create``).
        requirement: what pip builds (``horovod==0.28.1`` or a URL).
        version: Horovod's version, or None for a URL requirement.
        build_env: ``HOROVOD_*`` and ``MAKEFLAGS`` assignments, in plan order.
        requested: the frameworks the build needs installed (spec names: ``pytorch`` …).
        toolchain: CMake and the real C++ compiler, probed once here.
        compiler: first line of the real C++ compiler's ``--version`` (a cache-key input).
        mpi: first line of ``mpirun --version`` when MPI is requested, else ``not used``.
        platform: the conda platform (a cache-key input).
        rules: ids of the fix rules that apply, or None when they depend on framework versions
            the spec does not pin to one version: then they are decided when the step runs, from
            the installed versions and this same :attr:`toolchain`.
        fix_env: the variables the decided rules set (empty while :attr:`rules` is None).
        sdist_sha256: the locked source archive's SHA-256 (``--require-hashes``), or ``""``.
        no_deps: install the wheel with ``--no-deps`` (its dependencies came from a lock).
        caches: the wheel cache roots consulted, in order: the user's (written after a build),
            then the site's read-only ones (``$ENVTOOL_CACHE_PATH``, the site file's
            ``build_caches``); see :func:`envtool.horovod.cache.chain`.
        missing_tools: what a compile needs from the machine and was not found when planning
            (:func:`envtool.horovod.requirements.probe`); a cache hit needs none of it.
        fix: shell-quoted lines that get :attr:`missing_tools` (site modules, apt-get, pip).
        cache_group: the group trusted to write the site's caches (site file's
            ``build_cache_group``), or None.
        wheel_sha256: the SHA-256 of the Horovod wheel the lock records (a lock of an environment
            records the installed wheel), or ``""``: then only a cached wheel of that hash is used.
        expected: what the run's probe (:func:`probe_env`) will report, when the lock decides it:
            ``{"python_tag": …, "frameworks": {key: [distribution, version]}}`` (see
            :func:`expected_install`), else None: the cache key is known only when the step runs.
        expected_why: why :attr:`expected` is None (for ``plan``), else ``""``.
    """

    prefix: Path
    requirement: str
    version: Optional[str]
    build_env: Tuple[Tuple[str, str], ...]
    requested: Tuple[str, ...]
    toolchain: fixes.Toolchain
    compiler: str
    mpi: str
    platform: str
    rules: Optional[Tuple[str, ...]]
    fix_env: Tuple[Tuple[str, str], ...] = ()
    sdist_sha256: str = ""
    no_deps: bool = False
    caches: Tuple[Path, ...] = ()
    missing_tools: Tuple[system_tools.BuildTool, ...] = ()
    fix: Tuple[str, ...] = ()
    cache_group: Optional[str] = None
    wheel_sha256: str = ""
    expected: Optional[Dict[str, Any]] = None
    expected_why: str = ""

    @property
    def python(self) -> str:
        """The environment's interpreter."""
        return str(PrefixData(self.prefix).python)


def plan_steps(spec: Spec, options: PlanOptions, locked: Any = None, loaded: Any = None) -> List[Step]:
    """The ``build-horovod`` step, or none when Horovod is not pip-built.

    The toolchain (CMake, the real C++ compiler, MPI) is read from ``options.machine`` (probed
    once by :func:`envtool.steps.kernel.machine.probe`; probed here when the caller did not); the fix rules are
    decided here from the spec's pins when every requested framework is pinned to one version,
    else when the step runs (``plan`` says so). The step carries a :class:`BuildDecision`.

    Args:
        spec: the resolved spec.
        options: plan options.
        locked: the lock's entry for Horovod (a :class:`~envtool.lock.model.LockedPackage`) when
            installing from a lock, else None. Its dependencies were installed from the lock, so
            the wheel goes in with ``--no-deps``; when the entry is the source archive (a solve
            lock) the download is checked against its SHA-256 (``--require-hashes``).
        loaded: the :class:`~envtool.steps.create.from_lock.LoadedLock` installed before the build, or
            None (a solve, a clone): it decides the frameworks and Python the build will see
            (:func:`expected_install`), hence the cache key ``plan`` can look up.
    """
    h = spec.horovod
    if h.install != "pip-build":
        return []
    env = build_env(spec, cpu_count=options.cpu_count)
    version = horovod_version(spec)
    probed: Optional[machine.BuildProbe] = options.machine.build if options.machine is not None else None
    probed = probed or machine.probe_build(spec, options)
    if probed is None:  # not reached: horovod.install is pip-build here
        return []
    requested = tuple(f for f in h.frameworks if f in FRAMEWORK_DISTS)
    notes = _prefix_notes(env)
    rule_ids, fix_env, rule_notes = _plan_rules(spec, version, requested, probed, env)
    notes += rule_notes + _incompatible_notes(spec, version, requested)
    if h.build_packages:
        notes.append("build-only packages (horovod.build_packages), installed by conda-install-build and removed "
                     "by conda-remove-build: " + ", ".join(p.value for p in h.build_packages))
    caches = wheel_cache.chain(spec.site.build_caches, spec.site.build_cache_group)
    notes += _cache_notes(caches)
    wheel_dir = str(caches[0].root / "build" / "<tmp>")
    req = requirement(spec)
    sdist_hash, wheel_hash, lock_notes = _lock_hashes(locked)
    notes += lock_notes
    absent = tuple(probed.missing_tools)
    fix_lines = tuple(system_tools.fix_lines(absent, site_name=spec.site.name, build_modules=spec.site.build_modules))
    notes += _missing_tools_notes(absent, fix_lines)
    expected, expected_why = expected_install(loaded)
    decision = BuildDecision(
        prefix=Path(options.work_prefix), requirement=req, version=str(version) if version else None,
        build_env=tuple(env), requested=requested, toolchain=probed.toolchain,
        compiler=probed.compiler, mpi=probed.mpi, platform=probed.platform, rules=rule_ids,
        fix_env=tuple(fix_env), sdist_sha256=sdist_hash, no_deps=locked is not None,
        caches=tuple(c.root for c in caches), missing_tools=absent, fix=fix_lines,
        cache_group=spec.site.build_cache_group, wheel_sha256=wheel_hash,
        expected=expected, expected_why=expected_why)
    from envtool.engines.rattler import build_package_steps

    before, after = build_package_steps(spec, Path(options.work_prefix), Path(options.prefix))
    return before + [_build_step(decision, wheel_dir, notes)] + after


def _build_step(d: BuildDecision, wheel_dir: str, notes: List[str]) -> Step:
    """The ``build-horovod`` step carrying ``d``; its commands are what the action runs (for ``plan``).

    Args:
        d: the step's decision.
        wheel_dir: where the wheel is written, as shown (the real directory is made when run).
        notes: the step's plan notes.
    """
    py = d.python
    source = ("-r", f"{wheel_dir}/requirements.txt", "--require-hashes") if d.sdist_sha256 else (d.requirement,)
    no_deps = ("--no-deps",) if d.no_deps else ()
    return Step(
        id="build-horovod",
        title=f"Build Horovod ({d.requirement}) with "
              + " ".join(f"{k}={v}" for k, v in d.build_env if k.startswith("HOROVOD_")),
        commands=(("#", "probe installed framework versions and the Python tag; look up the wheel cache"),
                  tuple(pip_wheel_argv(py, wheel_dir, source)),
                  (py, "-m", "pip", "install", "--disable-pip-version-check", *no_deps, f"{wheel_dir}/horovod-*.whl")),
        env=d.build_env + d.fix_env, notes=tuple(notes), action=_run_build, data=d,
    )


def _missing_tools_notes(absent: Tuple[system_tools.BuildTool, ...], fix_lines: Tuple[str, ...]) -> List[str]:
    """The plan note naming what a compile needs and this machine lacks, with the fix lines (none when nothing lacks)."""
    if not absent:
        return []
    return ["a compile needs " + system_tools.describe(absent) + ": not found here; " + "; or ".join(fix_lines)]


def _incompatible_notes(spec: Spec, version: Optional[Version], requested: Tuple[str, ...]) -> List[str]:
    """The plan notes for the known incompatibilities (:data:`envtool.core.incompatible.KNOWN`) that
    the step checks when run (:func:`_refuse_incompatible`: rows on a requested framework's own
    distributions) and the spec's pins leave open (no pin excludes every broken version)."""
    from envtool.core import incompatible

    pins = spec.packages.pip + spec.packages.conda
    return [f"known incompatibility {row.id} is checked when run (the spec's pins allow {row.broken_text}): "
            f"the step stops before compiling if it finds {row.broken_text} installed; upstream: {row.url}"
            for row in incompatible.KNOWN
            if row.framework in requested and row.affects_horovod(version)
            and set(row.packages) & set(FRAMEWORK_DISTS[row.framework]) and not incompatible.pins_exclude(row, pins)]


def _prefix_notes(env: List[Tuple[str, str]]) -> List[str]:
    """One plan note per build variable that names the environment's prefix (:data:`PREFIX_NAMES`)."""
    return [f"{name}={value}: envtool puts the prefix the build runs in there (no shell expands it)"
            for name, value in env if _PREFIX_REF.search(value)]


def _plan_rules(spec: Spec, version: Optional[Version], requested: Tuple[str, ...], probed: "machine.BuildProbe",
                env: List[Tuple[str, str]]) -> Tuple[Optional[Tuple[str, ...]], List[Tuple[str, str]], List[str]]:
    """The fix rules decided when planning, from the spec's pins, when every requested framework is
    pinned to one version (:func:`envtool.horovod.fixes.applicable`).

    Args:
        spec: the resolved spec (its pip and conda pins).
        version: Horovod's version, or None for a URL requirement.
        requested: the frameworks the build needs (spec names).
        probed: the build toolchain probed when planning.
        env: the build's variables, in plan order (each rule's variables see those before it).
    Returns:
        ``(rule ids, the variables they set, plan notes)``; the ids are None (and no variables are
        set) when a framework is not pinned: the rules are then decided when the step runs.
    """
    toolchain = probed.toolchain
    pinned = fixes.framework_versions_from_pins(spec.packages.pip + spec.packages.conda)
    if not all(f in pinned for f in requested):
        loose = ", ".join(f for f in requested if f not in pinned)
        return None, [], [f"fix rules: decided when run ({loose} not pinned to one version; toolchain: "
                          f"{toolchain.describe()})"]
    rules = fixes.applicable(version, pinned, toolchain)
    notes: List[str] = []
    fix_env: List[Tuple[str, str]] = []
    for rule in rules:
        names = ", ".join([f"{k} {v}" for k, v in sorted(pinned.items())] + [toolchain.describe()])
        notes.append(f"fix rule {rule.id} applies (horovod {version} x {names}): {rule.title}; "
                     f"source: {rule.source}")
        fix_env += rule.variables(wrapper_dir(), {fixes.PROBED_CXX: probed.cxx_path, **dict(list(env) + fix_env)})
    return tuple(r.id for r in rules), fix_env, notes


def _cache_notes(caches: Sequence["wheel_cache.WheelCache"]) -> List[str]:
    """The plan notes naming the wheel caches consulted: the user's (written), then the site's."""
    notes = [f"built wheels are cached in {caches[0].dir} (key: Horovod version, HOROVOD_* set, framework "
             "versions, Python tag, compiler, platform, MPI, fix rules); framework versions and the "
             "Python tag are decided when run; a cache hit skips the compile"]
    for site_cache in caches[1:]:
        notes.append(f"then the site's read-only wheel cache {site_cache.dir} is consulted"
                     + ("" if site_cache.dir.is_dir() else " (not there now)"))
    return notes


def _lock_hashes(locked: Any) -> Tuple[str, str, List[str]]:
    """What the lock's Horovod entry fixes: the source archive's or the wheel's SHA-256.

    Args:
        locked: the lock's :class:`~envtool.lock.model.LockedPackage` for Horovod, or None.
    Returns:
        ``(sdist SHA-256 or "", wheel SHA-256 (lower case) or "", plan notes)``.
    """
    if locked is None:
        return "", "", []
    url = locked.url.split("#")[0]
    sdist_hash = locked.sha256 if locked.sha256 and url.endswith((".tar.gz", ".zip")) else ""
    wheel_hash = locked.sha256.lower() if locked.sha256 and url.endswith(".whl") else ""
    notes = []
    if sdist_hash:
        notes.append(f"the source archive is checked against the lock's SHA-256 ({sdist_hash[:12]}…)")
    if wheel_hash:
        notes.append(f"the lock records the Horovod wheel's SHA-256 ({wheel_hash[:12]}…): only a cached wheel "
                     "with that hash is installed")
    notes.append("its dependencies come from the lock: the wheel is installed with --no-deps")
    return sdist_hash, wheel_hash, notes


#: pip's options for the build: ``-v`` makes pip pass the build's own output (CMake's
#: ``[ NN%] Building CXX object …`` lines) through as it comes, which the build log and the
#: progress line need; without it pip prints nothing between "Building wheel … started" and the end.
PIP_WHEEL_OPTIONS = ("--disable-pip-version-check", "-v", "--no-build-isolation", "--no-cache-dir", "--no-deps")
#: Added to the build's environment so that pip's (Python's) output is not held in a buffer.
UNBUFFERED = {"PYTHONUNBUFFERED": "1"}


def pip_wheel_argv(python: str, wheel_dir: str, source) -> List[str]:
    """The ``pip wheel`` command of the build (see :data:`PIP_WHEEL_OPTIONS`).

    Args:
        python: the environment's interpreter.
        wheel_dir: where the wheel is written.
        source: what pip builds (a requirement, or ``-r FILE --require-hashes``).
    Returns:
        the argv.
    """
    return [python, "-m", "pip", "wheel", *PIP_WHEEL_OPTIONS, "--wheel-dir", wheel_dir, *source]


def probe_env(runner, py: str) -> Dict:
    """Python tag and installed framework versions of the env: ``envtool/probes/framework_versions.py``
    run with ``py`` (one subprocess, logged by ``runner``).

    Returns:
        ``{"python_tag": "cp311", "frameworks": {"pytorch": ["torch", "2.13.0+cpu"], ...}}``
        (keys of :data:`FRAMEWORK_DISTS` with a distribution installed).
    Raises:
        StepFailed: the probe failed or printed no record (its output is in the log).
    """
    from envtool import probes

    proc = runner.run([py, str(probes.probe_path("framework_versions")), json.dumps(FRAMEWORK_DISTS)])
    records = probes.parse_records(proc.stdout)
    if not records:
        raise StepFailed("build-horovod", f"{py} could not report its framework versions (see the log)",
                         runner.log_path)
    return records[-1]


def rules_for_run(d: BuildDecision, installed: Dict[str, List[str]]) -> List[fixes.FixRule]:
    """The fix rules a build applies: those decided when planning, or — when the plan left them to
    the run (:attr:`BuildDecision.rules` is None) — those that apply to the installed framework
    versions with the toolchain probed when planning. Nothing is probed again.

    Args:
        d: the step's decision.
        installed: framework → ``[distribution, version]`` as :func:`probe_env` reports.
    Returns:
        the rules, in :data:`envtool.horovod.fixes.RULES` order.
    """
    if d.rules is not None:
        return [r for r in fixes.RULES if r.id in d.rules]
    framework_versions = {k: Version(v[1].split("+")[0]) for k, v in installed.items()}
    return fixes.applicable(Version(d.version) if d.version else None, framework_versions, d.toolchain)


#: The names a spec's build variables may use for the environment being built: conda-build's
#: ``PREFIX`` (https://docs.conda.io/projects/conda-build/en/stable/user-guide/environment-variables.html)
#: and an activated environment's ``CONDA_PREFIX``, as the Open-CE horovod-feedstock's
#: ``recipe/build.sh`` uses it for ``HOROVOD_NCCL_HOME``.
PREFIX_NAMES = ("CONDA_PREFIX", "PREFIX")
_PREFIX_REF = re.compile(r"\$(?:\{(?:" + "|".join(PREFIX_NAMES) + r")\}|(?:" + "|".join(PREFIX_NAMES) + r")(?![A-Za-z0-9_]))")


def expand_prefix_vars(build_vars: Dict[str, str], prefix: Path) -> Dict[str, str]:
    """The build variables with ``$CONDA_PREFIX``/``${CONDA_PREFIX}`` (and ``PREFIX``) replaced by
    the prefix the build runs in; every other ``$`` is left as written.

    The values reach the compiler's environment as they are (no shell runs in between), so a
    reference left unexpanded would be a literal path ``${CONDA_PREFIX}`` that does not exist.

    Args:
        build_vars: name → value, as planned.
        prefix: the environment the build runs in (during ``create`` the temporary build prefix).
    Returns:
        a new mapping, same order.
    """
    return {k: _PREFIX_REF.sub(lambda m: str(prefix), v) for k, v in build_vars.items()}


def build_key(d: BuildDecision, info: Dict) -> "wheel_cache.BuildKey":
    """The wheel cache key of the build ``d`` makes in an environment that reports ``info``: the one
    computation of it, used by the step when it runs and by ``plan``'s look-ahead (:func:`forecast`).

    Args:
        d: the step's decision.
        info: what :func:`probe_env` reports (``python_tag``, ``frameworks``), or the same shape
            from :func:`expected_install`.
    Returns:
        the :class:`~envtool.horovod.cache.BuildKey` (fix rules from :func:`rules_for_run`).
    """
    installed = info["frameworks"]
    return wheel_cache.BuildKey(
        requirement=d.requirement,
        build_env=tuple(cache_relevant(list(d.build_env))),
        frameworks=tuple(sorted((v[0], v[1]) for v in installed.values())),
        python_tag=info["python_tag"],
        compiler=d.compiler,
        platform=d.platform,
        mpi=d.mpi,
        fixes=tuple(r.id for r in rules_for_run(d, installed)),
    )


def decision_caches(d: BuildDecision) -> List["wheel_cache.WheelCache"]:
    """The wheel caches the build consults, in order: the user's (written), then the site's (read-only)."""
    roots = d.caches or (wheel_cache.cache_root(),)
    return [wheel_cache.WheelCache(roots[0])] + [wheel_cache.WheelCache(r, read_only=True, group=d.cache_group)
                                                 for r in roots[1:]]


def expected_install(loaded: Any) -> Tuple[Optional[Dict[str, Any]], str]:
    """What :func:`probe_env` will report in an environment installed from ``loaded``, decided from
    the lock alone: the framework distributions are picked from its pip entries exactly as the
    probe picks them (:func:`envtool.probes.framework_versions.installed`, ``FRAMEWORK_DISTS``
    order), the Python tag from the interpreter the lock was resolved for (``envtool.python``)
    or its conda ``python`` entry, as the probe derives it from ``sys.implementation.cache_tag``
    (``cpython-311`` → ``cp311``, https://docs.python.org/3/library/sys.html#sys.implementation).

    Args:
        loaded: a :class:`~envtool.steps.create.from_lock.LoadedLock`, or None.
    Returns:
        ``(info, "")``, or ``(None, why)`` when the lock does not decide it: no lock (a solve or
        a clone decides the versions when run), a framework from a conda package (its
        distribution's metadata version is not the conda record's), no interpreter recorded,
        or an interpreter other than CPython.
    """
    from envtool.probes.framework_versions import installed, python_tag

    if loaded is None:
        return None, "no lock: the framework versions are decided when the environment is made"
    entries = loaded.entries()
    conda_fw = {n for f in frameworks.FRAMEWORKS for n in f.conda_names}
    on_conda = sorted({p.name for p in entries if p.manager == "conda" and p.name in conda_fw})
    if on_conda:
        return None, f"{', '.join(on_conda)} from conda: its installed version is known when run"
    pip = {p.key[1]: p.version for p in entries if p.manager == "pip"}

    def version(dist: str) -> str:
        from packaging.utils import canonicalize_name

        return pip[canonicalize_name(dist)]  # KeyError is a LookupError: not in the lock

    major_minor = _locked_cpython(loaded, entries)
    if major_minor is None:
        return None, "the lock records no CPython interpreter"
    return {"python_tag": python_tag("cpython-" + major_minor.replace(".", "")),
            "frameworks": installed(FRAMEWORK_DISTS, version)}, ""


def _locked_cpython(loaded: Any, entries: Sequence[Any]) -> Optional[str]:
    """The CPython ``MAJOR.MINOR`` the lock was resolved for: its recorded interpreter
    (``envtool.python``), else its conda ``python`` entry; None when neither records a CPython.

    Args:
        loaded: a :class:`~envtool.steps.create.from_lock.LoadedLock`.
        entries: its entries (``loaded.entries()``).
    """
    interp = loaded.lock.interpreter
    if interp is not None:
        impl, major_minor = interp.implementation, interp.major_minor
    else:
        conda_python = next((p.version for p in entries if p.manager == "conda" and p.name == "python"), None)
        impl, major_minor = "cpython", ".".join((conda_python or "").split(".")[:2])
    if impl != "cpython" or major_minor.count(".") != 1:
        return None
    return major_minor


#: The estimate of a compile when none is recorded on this machine: Horovod 0.28.1 with PyTorch,
#: MPI and Gloo took 891 s on 2 shared cores (envtool issue 38, a researcher's first run; about 4
#: minutes on a quiet 2-core machine: docs/reference/horovod.md).
DEFAULT_COMPILE_SECONDS = 891.0
DEFAULT_COMPILE_BASIS = "none recorded on this machine; 891 s measured on 2 shared cores"


def _recorded_compile(caches: List["wheel_cache.WheelCache"]) -> Optional[Dict]:
    """The latest compile recorded in the user's cache (``caches[0]``) on this host, or None."""
    import socket

    host = socket.gethostname()
    best = None
    for e in caches[0].entries():
        rec = wheel_cache.compile_record(e.path)
        if rec and rec["host"] == host and (best is None or rec["when"] > best["when"]):
            best = dict(rec, entry=e.digest)
    return best


def forecast(plan: Any) -> Optional[Dict[str, Any]]:
    """Whether the plan's ``build-horovod`` step will take Horovod from a wheel cache or compile it,
    without changing anything (no cache entry is marked used).

    Args:
        plan: a :class:`~envtool.core.plan.Plan`.
    Returns:
        None when the plan builds no Horovod; else ``{"source": "cache"|"compile", "key",
        "key_inputs", "wheel", "cache_dir", "estimate_seconds", "estimate_basis", "key_known", "why"}``
        (``key``/``wheel``/``cache_dir`` null unless known; the estimate null for a cache hit),
        with ``"missing_tools"`` when a compile needs tools this machine lacks. ``key_known`` is False when the lock does not decide the key (:func:`expected_install`):
        the step looks the cache up when it runs, and ``source`` is then ``compile`` unless
        that look finds the build.
    """
    step = next((s for s in plan.steps if s.id == "build-horovod"), None)
    if step is None or not isinstance(step.data, BuildDecision):
        return None
    d: BuildDecision = step.data
    caches = decision_caches(d)
    out: Dict[str, Any] = {"source": "compile", "key": None, "key_inputs": None, "wheel": None, "cache_dir": None,
                           "estimate_seconds": None, "estimate_basis": None, "key_known": d.expected is not None,
                           "why": d.expected_why or None}
    if d.expected is not None:
        key = build_key(d, d.expected)
        out["key"] = key.digest()
        out["key_inputs"] = asdict(key)
        wheel, hit = wheel_cache.lookup_chain(caches, key, d.wheel_sha256, mark_used=False)
        if wheel is not None and hit is not None:
            out.update(source="cache", wheel=str(wheel), cache_dir=str(hit.dir))
            return out
    if d.missing_tools:
        out["missing_tools"] = system_tools.describe(d.missing_tools)
    rec = _recorded_compile(caches)
    if rec is not None:
        out["estimate_seconds"] = rec["seconds"]
        out["estimate_basis"] = (f"the last compile here took {rec['seconds']:.0f} s ({rec['when']}, "
                                 f"{rec['cpus']} CPUs, cache entry {rec['entry']})")
    else:
        out["estimate_seconds"] = DEFAULT_COMPILE_SECONDS
        out["estimate_basis"] = DEFAULT_COMPILE_BASIS
    return out


def forecast_line(f: Dict[str, Any]) -> str:
    """One line for people from :func:`forecast`: ``Horovod: from cache KEY (PATH)`` or
    ``Horovod: compile (~N min; basis)``."""
    if f["source"] == "cache":
        return f"Horovod: from cache {f['key']} ({f['wheel']})"
    minutes = max(1, round(f["estimate_seconds"] / 60))
    line = f"Horovod: compile (~{minutes} min; {f['estimate_basis']})"
    if not f["key_known"]:
        line += f"; unless a wheel cache holds the build ({f['why']})"
    if f.get("missing_tools"):
        line += f"; the compile needs {f['missing_tools']}, not found here (see the build step's note)"
    return line


def _run_build(step: Step, runner) -> Dict:
    """Build (or take from the cache) and install the wheel the step's :class:`BuildDecision` describes.

    Returns:
        ``{"cache_key", "cache_hit", "fixes", "rules_decided", "wheel"}`` (JSON-ready).
    Raises:
        StepFailed: a requested framework is not installed, the build fails or makes no wheel.
    """
    d: BuildDecision = step.data
    info = probe_env(runner, d.python)
    installed = info["frameworks"]
    _require_frameworks(step, runner, d, installed)
    _refuse_incompatible(step, runner, d, installed)
    runner.note(f"toolchain (probed when planning): {d.toolchain.describe()}")
    build_vars, rules = _build_vars(d, installed, runner)
    key = build_key(d, info)
    caches = decision_caches(d)
    skipped: List[Tuple[Any, str]] = []  # (wheel_cache.WheelCache, why it was skipped)
    wheel, hit = cached_wheel(caches, key, d.wheel_sha256, runner, skipped)
    result = {"cache_key": key.digest(), "cache_hit": wheel is not None, "locked_wheel_sha256": d.wheel_sha256 or None,
              "cache": None if hit is None else ("site" if hit.read_only else "user"),
              "cache_dir": None if hit is None else str(hit.dir),
              "fixes": [r.id for r in rules], "rules_decided": "when planned" if d.rules is not None else "when run",
              "sdist_sha256": d.sdist_sha256 or None,
              "cache_skipped": [{"cache_dir": str(c.dir), "reason": why} for c, why in skipped]}
    if wheel is None:
        wheel = _compile(step, runner, d, caches[0], key, build_vars)
    else:
        where = f"site cache {hit.root}" if hit is not None and hit.read_only else "cache"
        runner.progress(f"      reusing {where} wheel {wheel.name} (key {key.digest()})")
    result["wheel"] = str(wheel)
    sha = wheel_cache.file_sha256(Path(wheel))
    result["wheel_sha256"] = sha
    no_deps = ["--no-deps"] if d.no_deps else []
    runner.run([d.python, "-m", "pip", "install", "--disable-pip-version-check", *no_deps, str(wheel)])
    check_installed_wheel(d.prefix, sha, step.id, runner)
    result["runtime_dependencies_installed"] = install_runtime_deps(d.prefix, step.id, runner)
    result["runpath"] = _fix_runpaths(d.python, runner)
    return result


def missing_runtime_deps(prefix: Path) -> List[str]:
    """The installed Horovod's runtime requirements (its ``Requires-Dist`` without extras whose
    markers hold for the environment's interpreter: cloudpickle, psutil, pyyaml, packaging, cffi
    for 0.28.1) that the environment's interpreter does not see: not in the prefix and not in a
    base it is layered over (:func:`envtool.engines.layer.visible_versions`).

    Returns:
        the requirement strings (markers dropped), in Horovod's order; ``[]`` when Horovod is
        not installed in ``prefix``.
    Raises:
        EnvtoolError: the environment's interpreter cannot be asked where its packages are.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    from envtool.core.prefix import canonical_name
    from envtool.engines.layer import probe_site, visible_versions

    dist = next((x for x in PrefixData(prefix).distributions if x.name == "horovod"), None)
    if dist is None:
        return []
    view = probe_site(str(PrefixData(prefix).python))
    seen = visible_versions(view)
    marker_env = {"python_version": ".".join(view.python.split(".")[:2]), "python_full_version": view.python,
                  "extra": ""}
    out: List[str] = []
    for line in dist.requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(marker_env):
            continue  # an extra (horovod[pytorch]) or another interpreter's requirement
        if canonical_name(req.name) not in seen:
            req.marker = None
            out.append(str(req))
    return out


def install_runtime_deps(prefix: Path, step_id: str, runner) -> List[str]:
    """Install Horovod's runtime requirements the environment does not see
    (:func:`missing_runtime_deps`) into the environment itself: an environment layered over a base
    that lacks one (PyYAML, say) would otherwise fail at ``horovodrun`` with ``No module named
    'yaml'``. Those the base provides are left to the base.

    Returns:
        the requirements installed (``[]`` when none was missing).
    Raises:
        StepFailed: the interpreter cannot be asked, or a requirement is still missing after the
            install (named, with the install's log).
    """
    from envtool.core.errors import EnvtoolError

    try:
        missing = missing_runtime_deps(prefix)
        if not missing:
            return []
        runner.progress("      installing Horovod's runtime requirements the environment lacks: " + ", ".join(missing))
        runner.run([str(PrefixData(prefix).python), "-m", "pip", "install", "--disable-pip-version-check", *missing])
        still = missing_runtime_deps(prefix)
    except EnvtoolError as exc:
        raise StepFailed(step_id, f"cannot check Horovod's runtime requirements: {exc}", runner.log_path) from None
    if still:
        raise StepFailed(step_id, "Horovod's runtime requirement(s) " + ", ".join(still) + " are still missing after "
                         "pip install; install them into the environment (or its base)", runner.log_path)
    return missing


def _require_frameworks(step: Step, runner, d: BuildDecision, installed: Dict[str, List[str]]) -> None:
    """Stop when a framework the build needs is not installed in the environment.

    Raises:
        StepFailed: names the frameworks and their distributions (:data:`FRAMEWORK_DISTS`).
    """
    missing = [f for f in d.requested if f not in installed]
    if missing:
        raise StepFailed(step.id, "Horovod is to be built with " + ", ".join(missing) + " but the environment has no "
                         + ", ".join("/".join(FRAMEWORK_DISTS[f]) for f in missing)
                         + " installed; add it to packages (or drop it from horovod.frameworks)", runner.log_path)


def _refuse_incompatible(step: Step, runner, d: BuildDecision, installed: Dict[str, List[str]]) -> None:
    """Stop before any compile (or cached wheel) when an installed framework version is one a known
    incompatibility breaks (:data:`envtool.core.incompatible.KNOWN`): a spec that pins TensorFlow
    to a broken version is refused when loaded; this catches what the spec does not pin (a
    ``--clone`` of a base environment, an unpinned or ranged ``tensorflow``).

    Args:
        installed: framework → ``[distribution, version]`` as :func:`probe_env` reports.
    Raises:
        StepFailed: names the distribution and version, what is expected, and the row's id,
            reason and upstream issue URL.
    """
    from envtool.core import incompatible

    dists = {dist: ver for dist, ver in installed.values()}
    hits = incompatible.installed_hits(Version(d.version) if d.version else None, d.requested, dists)
    if not hits:
        return
    row, dist, ver = hits[0]
    hvd = f"Horovod {d.version}" if d.version else "Horovod from horovod.source"
    raise StepFailed(step.id, f"the environment has {dist} {ver}: expected {row.expected} when {hvd} is built "
                     f"with {row.framework} (horovod.frameworks); nothing was compiled ({row.explain()})",
                     runner.log_path)


def _build_vars(d: BuildDecision, installed: Dict[str, List[str]], runner) -> Tuple[Dict[str, str], List[fixes.FixRule]]:
    """The compile's variables: the planned ones with the prefix expanded (:func:`expand_prefix_vars`),
    then each fix rule's (:func:`rules_for_run`, prepared now); each change is noted in the log.

    Returns:
        ``(variables, the rules applied)``.
    """
    planned = dict(d.build_env)
    build_vars = expand_prefix_vars(planned, d.prefix)
    for name, value in build_vars.items():
        if value != planned[name]:
            runner.note(f"{name}={value} (the spec's {planned[name]} in this build's prefix)")
    rules = rules_for_run(d, installed)
    for rule in rules:
        runner.note(f"applying fix rule {rule.id}: {rule.title}")
        build_vars.update(rule.prepare(wrapper_dir(), build_vars))
    return build_vars, rules


def _compile(step: Step, runner, d: BuildDecision, cache: "wheel_cache.WheelCache", key: "wheel_cache.BuildKey",
             build_vars: Dict[str, str]) -> Path:
    """Compile the wheel with ``pip wheel`` in a temporary directory under the user's cache and store
    it there (with the build's output and duration).

    Returns:
        the stored wheel's path.
    Raises:
        StepFailed: a tool the compile needs is missing, or pip made no Horovod wheel.
    """
    if d.missing_tools:
        raise StepFailed(step.id, "no wheel cache holds this Horovod build and compiling it needs "
                         + system_tools.describe(d.missing_tools) + ", not found on this machine; fix: "
                         + "; or ".join(d.fix), runner.log_path)
    runner.progress(f"      compiling Horovod (minutes; full output in the build log {runner.log_path})")
    ensure_dir(cache.root / "build")
    tmp = Path(tempfile.mkdtemp(prefix="horovod-", dir=cache.root / "build"))
    try:
        source = [d.requirement]
        if d.sdist_sha256:
            reqs = tmp / "requirements.txt"
            reqs.write_text(f"{d.requirement} --hash=sha256:{d.sdist_sha256}\n")
            source = ["-r", str(reqs), "--require-hashes"]
        started = time.monotonic()
        proc = runner.run(pip_wheel_argv(d.python, str(tmp), source), env={**build_vars, **UNBUFFERED},
                          progress="compiling Horovod")
        built = sorted(tmp.glob("horovod-*.whl"))
        if not built:
            raise StepFailed(step.id, f"pip wheel produced no horovod wheel in {tmp}", runner.log_path)
        wheel = cache.store(key, built[0], log_text=proc.stdout, seconds=time.monotonic() - started)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if d.wheel_sha256:
        runner.progress(f"      note: the lock's Horovod wheel (SHA-256 {d.wheel_sha256[:12]}…) is in no wheel cache; "
                        "compiled afresh with the same build inputs (a rebuild is not byte-identical)")
    return wheel


def cached_wheel(caches, key: "wheel_cache.BuildKey", want_sha256: str, runner, skipped=None):
    """The first proven cached wheel for ``key`` (:func:`envtool.horovod.cache.lookup_chain`), with
    one log line per cache consulted; an entry that is there but not used is reported as a warning
    (progress and log) naming the cache directory and why, and the next cache (or a compile) is used.

    Args:
        caches: :class:`~envtool.horovod.cache.WheelCache` objects, in order.
        key: the build key.
        want_sha256: the lock's wheel SHA-256, or ``""``.
        runner: the step runner (``note``, ``progress``).
        skipped: when given, ``(cache, reason)`` is appended for each entry not used.
    Returns:
        ``(wheel, cache)`` or ``(None, None)``.
    """
    skipped = [] if skipped is None else skipped
    wheel, hit = wheel_cache.lookup_chain(caches, key, want_sha256, skipped=skipped)
    why = {id(c): reason for c, reason in skipped}
    for c in caches:
        reason = why.get(id(c))
        runner.note(f"wheel cache {c.dir}{' (site, read-only)' if c.read_only else ''}: key {key.digest()} "
                    + ("hit" if c is hit else f"miss ({reason})" if reason else "miss"))
        if reason:
            runner.progress(f"      warning: wheel cache {c.dir}: entry {key.digest()} not used: {reason}")
        if c is hit:
            break
    return wheel, hit


def check_installed_wheel(prefix: Path, sha256: str, step_id: str, runner) -> None:
    """Check that pip installed the wheel of SHA-256 ``sha256``: the hash pip computed of the archive it
    read and recorded in the installed Horovod's ``direct_url.json`` (PEP 610, ``archive_info.hashes``;
    https://packaging.python.org/en/latest/specifications/direct-url-data-structure/), so a wheel
    replaced between the cache check and pip's read is caught before any of its code runs.

    Raises:
        StepFailed: pip recorded another hash (the build prefix is then discarded). A pip that
            records none (no ``direct_url.json`` hash) leaves the check made before the install.
    """
    from envtool.core.prefix import PrefixData

    dist = next((x for x in PrefixData(prefix).distributions if x.name == "horovod"), None)
    info = dist.direct.get("archive_info") if dist is not None else None
    hashes = (info or {}).get("hashes") or {} if isinstance(info, dict) else {}
    got = hashes.get("sha256") or ""
    if not got and isinstance(info, dict) and str(info.get("hash", "")).startswith("sha256="):
        got = str(info["hash"]).split("=", 1)[1]
    if not got:  # an older pip records no hash of a local archive: the check before the install stands
        runner.note(f"pip recorded no SHA-256 of the Horovod wheel it installed; it was {sha256} when checked")
        return
    if got != sha256:
        raise StepFailed(step_id, f"pip installed a Horovod wheel of SHA-256 {got}, not the checked {sha256}: "
                         "the cached wheel changed while it was installed", runner.log_path)
    runner.note(f"installed Horovod wheel SHA-256 {sha256} (as checked)")


def _fix_runpaths(python: str, runner) -> Dict:
    """Point the installed Horovod libraries' RUNPATH into this environment
    (:mod:`envtool.horovod.runpath`); what changed is logged and returned."""
    from envtool.horovod.runpath import fix_runpaths

    prefix = Path(python).parent.parent
    site = next(iter(sorted(prefix.glob("lib/python*/site-packages"))), None)
    if site is None or not (site / "horovod").is_dir():
        return {"changed": [], "problem": "no horovod package found in the environment"}
    changes, problem = fix_runpaths(site / "horovod", site)
    for lib, old, new in changes:
        runner.note(f"RUNPATH of {lib}: {old} -> {new}")
    if problem:
        runner.note(problem)
        runner.progress(f"      note: {problem}")
    return {"changed": [c[0] for c in changes], "problem": problem or None}


def could_hit(d: BuildDecision) -> bool:
    """Whether some wheel cache of ``d.caches`` holds an entry built from the same requirement and
    ``HOROVOD_*`` set on this platform — a wheel that a build without a compiler could still use
    (the full key, with framework versions and the Python tag, is decided when the step runs).

    Reads the entries' ``key.json`` files only; an unreadable entry counts as no entry.
    """
    wanted = sorted(kv for kv in cache_relevant(list(d.build_env)) if kv[0].startswith("HOROVOD_"))
    for root in d.caches:
        for entry in wheel_cache.WheelCache(root, read_only=True).entries():
            key = entry.key
            if key is None or entry.wheel is None:
                continue
            have = sorted(kv for kv in key.build_env if kv[0].startswith("HOROVOD_"))
            if key.requirement == d.requirement and have == wanted and key.platform == d.platform:
                return True
    return False


def check_system_tools(steps) -> None:
    """Refuse, before anything is built, a plan whose Horovod compile lacks a tool and that no
    wheel cache can spare (:func:`could_hit`).

    Args:
        steps: the plan's steps.
    Raises:
        UsageError: names each missing tool and the fix lines (exit 2).
    """
    from envtool.core.errors import UsageError

    for step in steps:
        d = step.data if step.id == "build-horovod" else None
        if d is None or not d.missing_tools or could_hit(d):
            continue
        raise UsageError("building Horovod needs " + system_tools.describe(d.missing_tools)
                         + ", not found on this machine (PATH); fix, then run again:\n  " + "\n  ".join(d.fix))
