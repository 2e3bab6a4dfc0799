"""HOROVOD_* derivation, version-aware refusals, fix rules (with a real compile), wheel-cache keys."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from conftest import run_envtool
from envtool.horovod import fixes
from envtool.horovod.cache import BuildKey, WheelCache
from envtool.horovod.flags import build_env
from envtool.spec.catalog import load_spec
from helpers.speed import scaled

PERLMUTTER = ["HOROVOD_GPU_OPERATIONS=NCCL", "HOROVOD_NCCL_LINK=SHARED", "HOROVOD_WITH_TENSORFLOW=1",
              "HOROVOD_WITH_PYTORCH=1", "HOROVOD_WITH_MPI=1", "HOROVOD_WITH_GLOO=1"]


def test_perlmutter_assignments_in_plan_json():
    proc = run_envtool("plan", "perlmutter-horovod", "--json", "--prefix", "/tmp/never-created")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    step = next(s for s in plan["steps"] if s["id"] == "build-horovod")
    horovod_vars = [f"{k}={v}" for k, v in step["env"].items() if k.startswith("HOROVOD_")]
    assert horovod_vars[:6] == PERLMUTTER
    assert horovod_vars[6:] == ["HOROVOD_WITHOUT_MXNET=1"]
    assert not Path("/tmp/never-created").exists()


def test_perlmutter_plan_text_shows_the_assignments():
    proc = run_envtool("plan", "perlmutter-horovod", "--prefix", "/tmp/never-created")
    assert proc.returncode == 0, proc.stderr
    env_line = next(l for l in proc.stdout.splitlines() if l.strip().startswith("env: HOROVOD_GPU_OPERATIONS"))
    assert " ".join(PERLMUTTER) in env_line


def test_cpu_horovod_flags_refuse_missing_pieces():
    env = dict(build_env(load_spec("cpu-horovod"), cpu_count=2))
    assert env["HOROVOD_WITH_PYTORCH"] == "1" and env["HOROVOD_WITH_MPI"] == "1"
    assert env["HOROVOD_WITHOUT_TENSORFLOW"] == "1" and env["HOROVOD_WITHOUT_MXNET"] == "1"
    assert "HOROVOD_GPU_OPERATIONS" not in env and env["MAKEFLAGS"] == "-j2"


def test_cpu_horovod_plan_names_fix_rule():
    proc = run_envtool("plan", "cpu-horovod", "--prefix", "/tmp/never-created")
    assert proc.returncode == 0, proc.stderr
    assert "fix rule horovod-torch-cxx17 applies" in proc.stdout
    assert "--no-build-isolation" in proc.stdout


def write_spec(tmp_path, name, body):
    (tmp_path / f"{name}.yaml").write_text(body)
    return {"ENVTOOL_SPEC_PATH": str(tmp_path)}


BAD = {
    "gpu-ops-with-override": ("horovod:\n  version: 0.28.1\n  frameworks: [pytorch]\n  gpu_operations: nccl\n"
                              "  gpu_ops: {allreduce: mpi}\ncuda: '11.8'\n", "horovod.gpu_operations", 4),
    "gpu-operations-too-old": ("cuda: '10.2'\nhorovod:\n  version: 0.19.5\n  gpu_operations: nccl\n",
                               "horovod.gpu_operations", 4),
    "nccl-without-cuda": ("horovod:\n  version: 0.28.1\n  gpu_operations: nccl\n", "horovod.gpu_operations", 3),
    "ddl-on-x86": ("cuda: '10.1'\nplatforms: [linux-64]\nhorovod:\n  version: 0.18.2\n  gpu_ops: {allreduce: ddl}\n",
                   "horovod.gpu_ops", 5),
    "unknown-key": ("horovod:\n  version: 0.28.1\n  frameworks: [pytorch]\n  controlers: [mpi]\n",
                    "horovod.controlers", 4),
    "bad-choice": ("engine: docker\n", "engine", 1),
    "bad-version": ("horovod:\n  version: zero.twenty\n", "horovod.version", 2),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_invalid_specs_exit_2_naming_file_and_field(tmp_path, case):
    body, field, line = BAD[case]
    env = write_spec(tmp_path, case, f"name: {case}\n" + body)
    proc = run_envtool("plan", case, env=env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"{case}.yaml:{line + 1}" in proc.stderr, proc.stderr
    assert field in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_key_suggests_the_right_one(tmp_path):
    env = write_spec(tmp_path, "typo", "name: typo\nhorovod:\n  controlers: [mpi]\n")
    proc = run_envtool("plan", "typo", env=env)
    assert proc.returncode == 2 and "did you mean 'controllers'" in proc.stderr


def test_extends_cycle_exits_2(tmp_path):
    write_spec(tmp_path, "a", "extends: b\n")
    env = write_spec(tmp_path, "b", "extends: a\n")
    proc = run_envtool("plan", "a", env=env)
    assert proc.returncode == 2 and "cycle" in proc.stderr and "extends" in proc.stderr


def test_extends_merges_parent_and_child(tmp_path):
    env = write_spec(tmp_path, "child", "extends: cpu-horovod\nsummary: child\nhorovod:\n  controllers: [gloo]\n"
                     "expect:\n  check_build: {frameworks: [PyTorch], controllers: [Gloo], tensor_operations: [Gloo]}\n")
    proc = run_envtool("plan", "child", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    step = next(s for s in json.loads(proc.stdout)["steps"] if s["id"] == "build-horovod")
    assert step["env"]["HOROVOD_WITHOUT_MPI"] == "1" and step["env"]["HOROVOD_WITH_PYTORCH"] == "1"


def test_fix_rule_applies_only_to_torch_2_1_and_later():
    v = Version
    ids = lambda h, t: [r.id for r in fixes.applicable(v(h), {"pytorch": v(t)})]  # noqa: E731
    assert ids("0.28.1", "2.13.0") == ["horovod-torch-cxx17"]
    assert ids("0.28.1", "2.1.0") == ["horovod-torch-cxx17"]
    assert ids("0.28.1", "2.0.1") == []
    assert ids("0.21.0", "1.7.1") == []
    assert fixes.applicable(v("0.28.1"), {"tensorflow": v("2.13.0")}) == []


def test_toolchain_rules_need_the_toolchain_they_name():
    v = Version
    ids = lambda h, tc: [r.id for r in fixes.applicable(v(h), {}, tc)]  # noqa: E731
    gcc12_cmake325 = fixes.Toolchain(cmake=v("3.25.1"), cxx_family="gnu", cxx_version=v("12.2.0"))
    h100 = fixes.Toolchain(cmake=v("4.4.3"), cxx_family="gnu", cxx_version=v("13.3.0"))
    clang18 = fixes.Toolchain(cmake=v("4.0.0"), cxx_family="clang", cxx_version=v("18.1.3"))
    assert ids("0.28.1", gcc12_cmake325) == []
    assert ids("0.28.1", h100) == ["horovod-cmake4-policy", "horovod-gcc13-includes"]
    assert ids("0.28.1", clang18) == ["horovod-cmake4-policy"]
    assert ids("0.29.0", h100) == []          # a release after 0.28.1 would carry master's fixes
    assert ids("0.28.1", fixes.Toolchain()) == []   # unknown toolchain: no guess
    # all three at once, in RULES order, as on the H100 (docs/gpu-proof.md)
    assert [r.id for r in fixes.applicable(v("0.28.1"), {"pytorch": v("2.11.0")}, h100)] == [
        "horovod-torch-cxx17", "horovod-cmake4-policy", "horovod-gcc13-includes"]


def test_version_output_parsing():
    # first lines as printed on this machine (Debian 12) and on the H100 machine (docs/gpu-proof.md)
    assert fixes.parse_cmake_version("cmake version 3.25.1\n\nCMake suite maintained") == Version("3.25.1")
    assert fixes.parse_cmake_version("cmake version 4.4.3") == Version("4.4.3")
    assert fixes.parse_cmake_version("") is None
    gpl = "\nCopyright (C) 2023 Free Software Foundation, Inc."
    assert fixes.parse_cxx_version("c++ (Debian 12.2.0-14+deb12u1) 12.2.0" + gpl) == ("gnu", Version("12.2.0"))
    assert fixes.parse_cxx_version("c++ (Ubuntu 13.3.0-6ubuntu2~24.04.1) 13.3.0" + gpl) == ("gnu", Version("13.3.0"))
    assert fixes.parse_cxx_version("Ubuntu clang version 18.1.3 (1ubuntu1)\nTarget: x86_64") == ("clang",
                                                                                                 Version("18.1.3"))
    assert fixes.parse_cxx_version("icpx: unknown") == ("", None)


@pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("c++"), reason="no cmake or C++ compiler")
def test_probe_toolchain_reads_the_real_tools():
    tc = fixes.probe_toolchain()
    cmake_line = subprocess.run(["cmake", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    assert tc.cmake is not None and cmake_line.endswith(str(tc.cmake))
    cxx_out = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout
    if "Free Software Foundation" in cxx_out:
        assert tc.cxx_family == "gnu" and cxx_out.splitlines()[0].endswith(str(tc.cxx_version))


@pytest.mark.skipif(not shutil.which("g++"), reason="no g++")
def test_gcc13_includes_flags_supply_the_headers(tmp_path):
    # The headers Horovod 0.28.1 forgets (group_table.h: std::string; common.h: std::logic_error; uint64_t).
    src = tmp_path / "x.cpp"
    src.write_text("std::string name() { return \"x\"; }\n"
                   "int main() { std::uint64_t n = name().size(); if (n != 1) throw std::logic_error(\"n\"); }\n")
    plain = subprocess.run(["g++", "-c", str(src), "-o", str(tmp_path / "a.o")], capture_output=True, text=True)
    assert plain.returncode != 0 and "string" in plain.stderr
    rule = next(r for r in fixes.RULES if r.id == "horovod-gcc13-includes")
    env = dict(rule.prepare(tmp_path, {"CXXFLAGS": "-O2"}))
    assert env["CXXFLAGS"].startswith("-O2 ")
    fixed = subprocess.run(["g++", *env["CXXFLAGS"].split(), "-c", str(src), "-o", str(tmp_path / "b.o")],
                           capture_output=True, text=True)
    assert fixed.returncode == 0, fixed.stderr


@pytest.mark.slow
def test_cmake4_policy_rule_with_real_cmake4(tmp_path):
    """CMake 4 from PyPI refuses Gloo's cmake_minimum_required(VERSION 2.8.12) unless the rule's
    variable is set; ``plan`` sees that cmake on PATH and lists the rule with the variable."""
    venv = tmp_path / "cmake4"
    subprocess.run([shutil.which("python3") or "python3", "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          "cmake>=4,<5"], capture_output=True, text=True)
    if pip.returncode != 0:
        pytest.skip("cmake>=4 not installable from PyPI here: " + pip.stderr[-300:])
    cmake = str(venv / "bin" / "cmake")
    project = tmp_path / "gloo-like"
    project.mkdir()
    (project / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 2.8.12 FATAL_ERROR)\nproject(g NONE)\n")
    refused = subprocess.run([cmake, "-S", str(project), "-B", str(tmp_path / "b1")], capture_output=True, text=True)
    assert refused.returncode != 0 and "Compatibility with CMake < 3.5 has been removed" in refused.stderr
    rule = next(r for r in fixes.RULES if r.id == "horovod-cmake4-policy")
    configured = subprocess.run([cmake, "-S", str(project), "-B", str(tmp_path / "b2")], capture_output=True,
                                text=True, env={**os.environ, **dict(rule.prepare(tmp_path, {}))})
    assert configured.returncode == 0, configured.stderr
    plan = run_envtool("plan", "cpu-horovod", "--json", env={"PATH": f"{venv / 'bin'}:{os.environ['PATH']}"})
    step = next(s for s in json.loads(plan.stdout)["steps"] if s["id"] == "build-horovod")
    assert step["env"]["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"
    assert any("horovod-cmake4-policy" in n for n in step["notes"])


@pytest.mark.skipif(not shutil.which("c++"), reason="no C++ compiler")
def test_cxx17_wrapper_really_compiles_cxx17_code_given_cxx14_flag(tmp_path):
    src = tmp_path / "x.cpp"
    src.write_text("#include <optional>\n#if __cplusplus < 201703L\n#error C++17 or later compatible compiler is "
                   "required\n#endif\nint main() { std::optional<int> o = 3; return *o - 3; }\n")
    plain = subprocess.run(["c++", "-std=c++14", str(src), "-o", str(tmp_path / "a")], capture_output=True, text=True)
    assert plain.returncode != 0 and "C++17" in plain.stderr
    env = dict(fixes.RULES[0].prepare(tmp_path / "fixes", {}))
    wrapped = subprocess.run([env["CXX"], "-std=c++14", str(src), "-o", str(tmp_path / "b")], capture_output=True,
                             text=True, env={"ENVTOOL_REAL_CXX": env["ENVTOOL_REAL_CXX"], "PATH": "/usr/bin:/bin"})
    assert wrapped.returncode == 0, wrapped.stderr
    assert subprocess.run([str(tmp_path / "b")]).returncode == 0


def key(**kw):
    base = dict(requirement="horovod==0.28.1", build_env=(("HOROVOD_WITH_PYTORCH", "1"),),
                frameworks=(("torch", "2.13.0+cpu"),), python_tag="cp311", compiler="c++ (Debian 12.2.0) 12.2.0",
                platform="linux-64", mpi="mpirun (Open MPI) 4.1.4", fixes=("horovod-torch-cxx17",))
    base.update(kw)
    return BuildKey(**base)


def test_cache_key_changes_with_every_input():
    digests = {key().digest()}
    for change in [dict(requirement="horovod==0.28.0"), dict(build_env=(("HOROVOD_WITH_PYTORCH", "1"),
                                                                        ("HOROVOD_WITHOUT_GLOO", "1"))),
                   dict(frameworks=(("torch", "2.12.0+cpu"),)), dict(python_tag="cp312"), dict(compiler="gcc 13"),
                   dict(platform="linux-ppc64le"), dict(mpi="none"), dict(fixes=())]:
        digests.add(key(**change).digest())
    assert len(digests) == 9


def test_cache_store_and_lookup(tmp_path):
    cache = WheelCache(tmp_path)
    assert cache.lookup(key()) is None
    wheel = tmp_path / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"PK\x03\x04 not really a wheel")
    stored = cache.store(key(), wheel)
    assert cache.lookup(key()) == stored and stored.read_bytes() == wheel.read_bytes()
    assert json.loads((stored.parent / "key.json").read_text())["python_tag"] == "cp311"
    assert cache.lookup(key(python_tag="cp312")) is None


# --- a step decides once (issue 11) ---------------------------------------------------------

def _gcc13_on_path(tmp_path: Path) -> Path:
    """A directory with ``c++``/``g++`` that report GNU 13 and run the machine's real g++ (the
    compiler a site module would put first on PATH)."""
    real = shutil.which("g++") or shutil.which("c++")
    bindir = tmp_path / "gcc13" / "bin"
    bindir.mkdir(parents=True)
    for name in ("c++", "g++"):
        script = bindir / name
        script.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then\n"
                          "  echo 'g++ (GCC) 13.3.0'\n  echo 'Copyright (C) 2023 Free Software Foundation, Inc.'\n"
                          f"  exit 0\nfi\nexec {real} \"$@\"\n")
        script.chmod(0o755)
    return bindir


def test_build_step_carries_its_decision_and_run_time_probes_nothing(tmp_path, monkeypatch):
    """Planned with an empty cache and GNU 13 first on PATH: the decision names the toolchain and
    the rules (gcc13 includes among them); at run time, with that compiler gone and the cache still
    empty (the fix-rule wrapper not yet written), the build applies exactly the planned rules."""
    from envtool.core.plan import PlanOptions
    from envtool.steps.create import horovod_build

    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", f"{_gcc13_on_path(tmp_path)}:{os.environ['PATH']}")
    monkeypatch.delenv("CXX", raising=False)
    spec = load_spec("cpu-horovod")
    (step,) = horovod_build.plan_steps(spec, PlanOptions(prefix=tmp_path / "env"))
    decision = step.data
    assert decision.toolchain.cxx_family == "gnu" and str(decision.toolchain.cxx_version) == "13.3.0"
    assert decision.rules == ("horovod-torch-cxx17", "horovod-gcc13-includes")
    assert dict(step.env)["CXXFLAGS"].startswith("-include cstdint")
    assert "g++ (GCC) 13.3.0" in decision.compiler
    # run time: another PATH (no GNU 13), the wrapper file still absent
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert not (tmp_path / "empty-cache" / "fixes" / "c++17-wrapper").exists()
    installed = {"pytorch": ["torch", "2.13.0+cpu"]}
    assert [r.id for r in horovod_build.rules_for_run(decision, installed)] == list(decision.rules)


def test_unpinned_framework_leaves_rules_to_the_run_and_plan_says_so(tmp_path, monkeypatch):
    specs = tmp_path / "specs"
    specs.mkdir()
    text = (Path(__file__).resolve().parent.parent / "specs" / "cpu-horovod.yaml").read_text()
    (specs / "loose.yaml").write_text(text.replace("name: cpu-horovod", "name: loose")
                                      .replace("torch==2.13.0+cpu", "torch>=2.1"))
    proc = run_envtool("plan", "loose", "--resolve", env={"ENVTOOL_SPEC_PATH": str(specs)})
    assert proc.returncode == 0, proc.stderr
    assert "fix rules: decided when run (pytorch not pinned to one version" in proc.stdout
    from envtool.core.plan import PlanOptions
    from envtool.spec.catalog import load_spec as load
    from envtool.steps.create import horovod_build

    monkeypatch.setenv("ENVTOOL_SPEC_PATH", str(specs))
    (step,) = horovod_build.plan_steps(load("loose"), PlanOptions(prefix=tmp_path / "env"))
    d = step.data
    assert d.rules is None
    # decided from the installed version, with the planned toolchain: torch 2.0 needs no C++17 wrapper
    assert "horovod-torch-cxx17" not in [r.id for r in horovod_build.rules_for_run(d, {"pytorch": ["torch", "2.0.1"]})]
    assert "horovod-torch-cxx17" in [r.id for r in horovod_build.rules_for_run(d, {"pytorch": ["torch", "2.13.0"]})]


_BACKEND = '''
"""A PEP 517 backend that builds a "horovod" wheel recording the build's HOROVOD_NCCL_HOME."""
import os, sys
sys.path.insert(0, {helpers!r})
from wheels import make_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    text = "NCCL_HOME = " + repr(os.environ.get("HOROVOD_NCCL_HOME")) + "\\n"
    return make_wheel(wheel_directory, "horovod", "0.0.1", {{"horovod/__init__.py": text}}).name
'''


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_the_build_sees_conda_prefix_as_the_build_prefix(tmp_path, monkeypatch):
    """Open-CE specs set ``nccl_home: "${CONDA_PREFIX}"`` (as the feedstock's build.sh does). No
    shell runs between envtool and pip, so the build step itself must put the prefix there: a real
    ``pip wheel`` of a source whose backend records the variable it was built with."""
    import subprocess as sp
    import sys

    from envtool.core.plan import Step
    from envtool.steps.create import horovod_build
    from envtool.steps.kernel.runner import Runner

    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "cache"))
    prefix = tmp_path / "env"
    sp.run([sys.executable, "-m", "venv", str(prefix)], check=True, timeout=scaled(300))
    src = tmp_path / "src"
    src.mkdir()
    helpers = Path(__file__).resolve().parent / "helpers"
    (src / "backend.py").write_text(_BACKEND.format(helpers=str(helpers)))
    (src / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                        'backend-path = ["."]\n')
    toolchain = fixes.Toolchain(cmake=None, cxx_family="gnu", cxx_version=None)
    d = horovod_build.BuildDecision(
        prefix=prefix, requirement=str(src), version=None,
        build_env=(("HOROVOD_NCCL_HOME", "${CONDA_PREFIX}"), ("HOROVOD_CUDA_HOME", "$PREFIX/cuda"),
                   ("HOROVOD_OTHER", "${HOME_NOT_EXPANDED}")),
        requested=(), toolchain=toolchain, compiler="c++ (test)", mpi="not used", platform="linux-64", rules=())
    step = Step(id="build-horovod", title="build", action=horovod_build._run_build, data=d)
    with Runner(log_path=tmp_path / "build.log") as runner:
        runner.current = step
        horovod_build._run_build(step, runner)
    out = sp.run([str(prefix / "bin" / "python"), "-c", "import horovod; print(horovod.NCCL_HOME)"],
                 capture_output=True, text=True, cwd="/", timeout=scaled(60))
    assert out.stdout.strip() == str(prefix), out.stderr
    assert horovod_build.expand_prefix_vars(dict(d.build_env), prefix) == {
        "HOROVOD_NCCL_HOME": str(prefix), "HOROVOD_CUDA_HOME": f"{prefix}/cuda",
        "HOROVOD_OTHER": "${HOME_NOT_EXPANDED}"}
    assert horovod_build.expand_prefix_vars({"A": "a$$b", "B": "${CONDA_PREFIX}/lib:$$ORIGIN", "C": "$PREFIXES",
                                             "D": "$CONDA_PREFIX/x"}, Path("/p")) == {
        "A": "a$$b", "B": "/p/lib:$$ORIGIN", "C": "$PREFIXES", "D": "/p/x"}
    assert f"HOROVOD_NCCL_HOME={prefix} (the spec's ${{CONDA_PREFIX}}" in (tmp_path / "build.log").read_text()


def test_plan_says_what_conda_prefix_becomes(tmp_path):
    """The plan shows the spec's ``${CONDA_PREFIX}`` quoted (pasting it passes it literally), so it
    says what the build step puts there."""
    proc = run_envtool("plan", "ibm-wml-ce-1.6.1", "--platform-mismatch-ok", "--prefix", tmp_path / "env")
    assert proc.returncode == 0, proc.stderr
    assert ("note: HOROVOD_CUDA_HOME=${CONDA_PREFIX}: envtool puts the prefix the build runs in there "
            "(no shell expands it)") in proc.stdout


def test_runpath_gains_the_framework_directory_the_library_needs(tmp_path):
    """Horovod's TensorFlow extension needs libtensorflow_framework.so.2 with no RUNPATH to it: the
    relative TensorFlow directory is added, once; a library needing nothing there is left alone."""
    from envtool.horovod.runpath import framework_entries

    site = tmp_path / "lib/python3.11/site-packages"
    (site / "tensorflow").mkdir(parents=True)
    (site / "tensorflow" / "libtensorflow_framework.so.2").write_bytes(b"")
    lib = site / "horovod" / "tensorflow" / "mpi_lib.cpython-311-x86_64-linux-gnu.so"
    mpi = "/usr/lib/x86_64-linux-gnu/openmpi/lib"
    needed = ["libmpi.so.40", "libtensorflow_framework.so.2", "libc.so.6"]
    assert framework_entries(mpi, needed, lib, site) == mpi + ":$ORIGIN/../../tensorflow"
    assert framework_entries(mpi + ":$ORIGIN/../../tensorflow", needed, lib, site) == mpi + ":$ORIGIN/../../tensorflow"
    assert framework_entries(mpi, ["libmpi.so.40", "libc10.so"], lib, site) == mpi
    assert framework_entries("", needed, lib, site) == "$ORIGIN/../../tensorflow"
