"""The Horovod build step: derive the build environment, apply fix rules, build or reuse a wheel.

Build: ``pip wheel --no-build-isolation --no-cache-dir --no-deps`` inside the environment (build
isolation hides the installed framework from CMake's probe: ``shared/reference/horovod.md``,
pitfalls), then ``pip install`` of the wheel. Built wheels are kept in the
:class:`~envtool.horovod.cache.WheelCache`, so a second environment with the same key installs
in seconds.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from packaging.version import Version

from envtool.errors import StepFailed
from envtool.platforms import conda_platform
from envtool.horovod import cache as wheel_cache
from envtool.horovod import fixes
from envtool.horovod.flags import build_env, cache_relevant, requirement
from envtool.spec.model import Spec
from envtool.spec.rules import horovod_version
from envtool.steps.model import PlanOptions, Step

#: Distribution names per framework, as ``importlib.metadata`` sees them.
FRAMEWORK_DISTS = {"pytorch": ("torch",), "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"),
                   "mxnet": ("mxnet",)}


def _first_line(argv: List[str]) -> Optional[str]:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0].strip() if out.returncode == 0 and text else None


def mpi_version() -> str:
    """First line of the MPI implementation's version (``mpirun (Open MPI) 4.1.4``), or ``none``."""
    for argv in (["mpirun", "--version"], ["mpiexec", "--version"]):
        if shutil.which(argv[0]):
            line = _first_line(argv)
            if line:
                return line
    return "none"


def wrapper_dir() -> Path:
    """Where fix rules keep their helper files (outlives any one build)."""
    return wheel_cache.cache_root() / "fixes"


def plan_steps(spec: Spec, options: PlanOptions, locked=None) -> List[Step]:
    """The ``build-horovod`` step, or none when Horovod is not pip-built.

    The fix rules listed are those that apply to the spec's pins; the step re-evaluates them
    against the installed framework versions when it runs.

    Args:
        spec: the resolved spec.
        options: plan options.
        locked: the lock's entry for Horovod (a :class:`~envtool.lock.model.LockedPackage`) when
            installing from a lock, else None. Its dependencies were installed from the lock, so
            the wheel goes in with ``--no-deps``; when the entry is the source archive (a solve
            lock) the download is checked against its SHA-256 (``--require-hashes``).
    """
    h = spec.horovod
    if h.install != "pip-build":
        return []
    py = str(Path(options.work_prefix) / "bin" / "python")
    env = build_env(spec, cpu_count=options.cpu_count)
    version = horovod_version(spec)
    pinned = fixes.framework_versions_from_pins([p.value for p in spec.packages.pip],
                                                [p.value for p in spec.packages.conda])
    toolchain = fixes.probe_toolchain(options.work_prefix, cxx=dict(env).get("CXX"))
    rules = fixes.applicable(version, pinned, toolchain)
    notes = []
    display_env = list(env)
    for rule in rules:
        names = ", ".join([f"{k} {v}" for k, v in sorted(pinned.items())] + [toolchain.describe()])
        notes.append(f"fix rule {rule.id} applies (horovod {version} x {names}): {rule.title}; source: {rule.source}")
        display_env += rule.variables(wrapper_dir(), dict(display_env))
    cache = wheel_cache.WheelCache()
    notes.append(f"built wheels are cached in {cache.dir} (key: Horovod version, HOROVOD_* set, framework "
                 "versions, Python tag, compiler, platform, MPI, fix rules); a cache hit skips the compile")
    wheel_dir = str(cache.root / "build" / "<tmp>")
    req = requirement(spec)
    sdist_hash = ""
    if locked is not None and locked.sha256 and locked.url.split("#")[0].endswith((".tar.gz", ".zip")):
        sdist_hash = locked.sha256
        notes.append(f"the source archive is checked against the lock's SHA-256 ({sdist_hash[:12]}…)")
    if locked is not None:
        notes.append("its dependencies come from the lock: the wheel is installed with --no-deps")
    source = ("-r", f"{wheel_dir}/requirements.txt", "--require-hashes") if sdist_hash else (req,)
    no_deps = ("--no-deps",) if locked is not None else ()
    return [Step(
        id="build-horovod",
        title=f"Build Horovod ({req}) with " + " ".join(f"{k}={v}" for k, v in env if k.startswith("HOROVOD_")),
        commands=(("#", "probe installed framework versions, compiler and MPI; look up the wheel cache"),
                  (py, "-m", "pip", "wheel", "--no-build-isolation", "--no-cache-dir", "--no-deps",
                   "--wheel-dir", wheel_dir, *source),
                  (py, "-m", "pip", "install", "--disable-pip-version-check", *no_deps, f"{wheel_dir}/horovod-*.whl")),
        env=tuple(display_env), notes=tuple(notes), action=_run_build,
        data={"env": tuple(env), "requirement": req, "version": str(version) if version else None,
              "sdist_sha256": sdist_hash, "no_deps": locked is not None},
    )]


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


def _run_build(step: Step, runner) -> None:
    prefix = Path(step.commands[1][0]).parent.parent
    py = str(prefix / "bin" / "python")
    env: List[Tuple[str, str]] = list(step.data["env"])
    requested = [k.split("HOROVOD_WITH_")[1].lower() for k, v in env if k.startswith("HOROVOD_WITH_")]
    info = probe_env(runner, py)
    installed = info["frameworks"]
    missing = [f for f in requested if f in FRAMEWORK_DISTS and f not in installed]
    if missing:
        raise StepFailed(step.id, "Horovod is to be built with " + ", ".join(missing) + " but the environment has no "
                         + ", ".join("/".join(FRAMEWORK_DISTS[f]) for f in missing)
                         + " installed; add it to packages (or drop it from horovod.frameworks)", runner.log_path)
    framework_versions = {k: Version(v[1].split("+")[0]) for k, v in installed.items()}
    hvd_version = Version(step.data["version"]) if step.data.get("version") else None
    toolchain = fixes.probe_toolchain(prefix, cxx=dict(env).get("CXX"))
    runner.note(f"toolchain: {toolchain.describe()}")
    rules = fixes.applicable(hvd_version, framework_versions, toolchain)
    build_vars = dict(env)
    for rule in rules:
        runner.note(f"applying fix rule {rule.id}: {rule.title}")
        build_vars.update(rule.prepare(wrapper_dir(), build_vars))
    real_cxx = build_vars.get("ENVTOOL_REAL_CXX") or build_vars.get("CXX") or "c++"
    key = wheel_cache.BuildKey(
        requirement=step.data["requirement"],
        build_env=tuple(cache_relevant(env)),
        frameworks=tuple(sorted((v[0], v[1]) for v in installed.values())),
        python_tag=info["python_tag"],
        compiler=_first_line([real_cxx, "--version"]) or real_cxx,
        platform=conda_platform(),
        mpi=mpi_version() if "mpi" in [k.split("HOROVOD_WITH_")[1].lower() for k, _ in env
                                       if k.startswith("HOROVOD_WITH_")] else "not used",
        fixes=tuple(r.id for r in rules),
    )
    cache = wheel_cache.WheelCache()
    wheel = cache.lookup(key)
    runner.note(f"wheel cache key {key.digest()}: {'hit ' + str(wheel) if wheel else 'miss'}")
    runner.results["build-horovod"] = {"cache_key": key.digest(), "cache_hit": wheel is not None,
                                       "fixes": [r.id for r in rules]}
    if wheel is None:
        runner.progress("      compiling Horovod (minutes; output in the build log)")
        (cache.root / "build").mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="horovod-", dir=cache.root / "build"))
        try:
            source = [step.data["requirement"]]
            if step.data.get("sdist_sha256"):
                reqs = tmp / "requirements.txt"
                reqs.write_text(f"{step.data['requirement']} --hash=sha256:{step.data['sdist_sha256']}\n")
                source = ["-r", str(reqs), "--require-hashes"]
            runner.run([py, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-build-isolation",
                        "--no-cache-dir", "--no-deps", "--wheel-dir", str(tmp), *source],
                       env=build_vars)
            built = sorted(tmp.glob("horovod-*.whl"))
            if not built:
                raise StepFailed(step.id, f"pip wheel produced no horovod wheel in {tmp}", runner.log_path)
            wheel = cache.store(key, built[0])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        runner.progress(f"      reusing cached wheel {wheel.name} (key {key.digest()})")
    runner.results["build-horovod"]["wheel"] = str(wheel)
    no_deps = ["--no-deps"] if step.data.get("no_deps") else []
    runner.run([py, "-m", "pip", "install", "--disable-pip-version-check", *no_deps, str(wheel)])
