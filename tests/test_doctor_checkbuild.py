"""``doctor``'s check-build from Horovod's Python API, against the real ``horovodrun --check-build``.

The slow tests use the real cpu-horovod environment (``cpu_horovod_env``, tests/conftest.py) and
small venvs made here that see its site-packages through a ``.pth`` file:

* ``tripwire``: the real Horovod, with a ``bin/horovodrun`` that appends its arguments to a file
  and then runs Horovod's own ``run_commandline`` (what the console script runs), so a test can
  tell whether doctor started ``horovodrun``;
* ``crashing-mxnet``: the same plus an installed ``mxnet`` whose import kills the interpreter with
  SIGSEGV (a broken framework build); the ``info`` probe imports every installed framework and
  dies, while ``horovodrun --check-build`` imports ``horovod.mxnet`` alone in a child, where
  Horovod's own check for the missing extension library raises first;
* ``unbuilt``: a Horovod copy without its compiled libraries (``import horovod.torch`` prints
  "has not been built" and still imports: check-build shows [X] PyTorch and no controller).
"""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_envtool
from envtool import probes
from envtool.checks import envprobe
from envtool.horovod import checkbuild
from envtool.validate import probes as vprobes
from helpers.speed import scaled


def api_record(prefix):
    """The ``check_build_api`` record of a real ``info`` probe run in ``prefix``."""
    run = probes.run_probe(Path(prefix) / "bin" / "python", "env_info",
                           [json.dumps([list(f) for f in envprobe.FRAMEWORKS]), json.dumps(envprobe.API_PROBES)], 300)
    assert run.records, run.output_tail
    return run.records[-1].get("check_build_api")


def doctor_horovod_build(prefix, *extra):
    proc = run_envtool("doctor", "--prefix", prefix, "--only", "horovod-build", "--json", *extra, timeout=scaled(600))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout)["findings"][0]


# -- from_api on records (no environment) ------------------------------------------------------

def ext(module, framework, installed, imported, api=None, errors=None, error=None, not_built=False):
    rec = {"module": module, "framework": framework, "framework_installed": installed, "imported": imported,
           "error": error, "not_built": not_built}
    if imported:
        rec["api"], rec["api_errors"] = dict(api or {}), dict(errors or {})
    return rec


ALL_FALSE = {"mpi_built": False, "gloo_built": False, "nccl_built": 0, "ddl_built": False, "ccl_built": False}
NOT_BUILT_TF = ext("horovod.tensorflow", "tensorflow", False, False, not_built=True,
                   error="ImportError: Extension horovod.tensorflow has not been built: /x/mpi_lib.so not found")
NOT_BUILT_MX = ext("horovod.mxnet", "mxnet", False, False, not_built=True,
                   error="ImportError: Extension horovod.mxnet has not been built: /x/mpi_lib.so not found")


def test_from_api_mirrors_horovodrun_rules():
    torch = ext("horovod.torch", "torch", True, True, dict(ALL_FALSE, mpi_built=True, gloo_built=True, nccl_built=21803))
    cb = checkbuild.from_api({"version": "0.28.1", "extensions": [NOT_BUILT_TF, torch, NOT_BUILT_MX]})
    assert cb == checkbuild.parse(
        "Horovod v0.28.1:\n\nAvailable Frameworks:\n    [ ] TensorFlow\n    [X] PyTorch\n    [ ] MXNet\n\n"
        "Available Controllers:\n    [X] MPI\n    [X] Gloo\n\nAvailable Tensor Operations:\n    [X] NCCL\n"
        "    [ ] DDL\n    [ ] CCL\n    [X] MPI\n    [X] Gloo\n")
    # The first extension whose function answers (not None, no error) decides, in TF, torch, MXNet order:
    tf_api = {n: v for n, v in ALL_FALSE.items() if n != "mpi_built"}
    tf = ext("horovod.tensorflow", "tensorflow", True, True, dict(tf_api, gloo_built=None),
             errors={"mpi_built": "RuntimeError: x"})
    torch = ext("horovod.torch", "torch", True, True, dict(ALL_FALSE, mpi_built=True, gloo_built=True))
    cb = checkbuild.from_api({"version": "0.28.1", "extensions": [tf, torch, NOT_BUILT_MX]})
    assert cb.section("controllers") == {"MPI": True, "Gloo": True}
    assert cb.section("frameworks") == {"TensorFlow": True, "PyTorch": True, "MXNet": False}
    tf = ext("horovod.tensorflow", "tensorflow", True, True, dict(ALL_FALSE, mpi_built=False))
    cb = checkbuild.from_api({"version": "0.28.1", "extensions": [tf, torch, NOT_BUILT_MX]})
    assert cb.section("controllers")["MPI"] is False  # False is an answer: horovodrun stops at it
    # horovod.torch imported without its library: [X] PyTorch, every capability call raised.
    bare = ext("horovod.torch", "torch", True, True, {}, {n: "AttributeError: no" for n in ALL_FALSE})
    cb = checkbuild.from_api({"version": "0.28.1", "extensions": [NOT_BUILT_TF, bare, NOT_BUILT_MX]})
    assert cb.section("frameworks")["PyTorch"] is True and not any(cb.section("controllers").values())


def test_from_api_refuses_what_it_cannot_answer():
    torch = ext("horovod.torch", "torch", True, True, ALL_FALSE)
    for record, why in [(None, "did not import horovod"), ({"extensions": []}, "__version__"),
                        ({"version": "0.28.1", "extensions": [torch]}, "did not try horovod.tensorflow"),
                        ({"version": "0.28.1", "extensions": [NOT_BUILT_TF, ext("horovod.torch", "torch", True, True,
                                                                               {"mpi_built": True}), NOT_BUILT_MX]},
                         "did not call horovod.torch.gloo_built()")]:
        with pytest.raises(checkbuild.ApiUnanswered, match=why.replace("(", r"\(").replace(")", r"\)")):
            checkbuild.from_api(record)
    # An extension failing beside another loaded framework (not Horovod's "has not been built"):
    # horovodrun imports it alone, so only horovodrun can say.
    mx = ext("horovod.mxnet", "mxnet", True, False, error="OSError: libmxnet.so: undefined symbol")
    with pytest.raises(checkbuild.ApiUnanswered, match="also loaded torch"):
        checkbuild.from_api({"version": "0.28.1", "extensions": [NOT_BUILT_TF, torch, mx]})
    # ... while alone in the process it is an answer (the same import fails in horovodrun's child).
    cb = checkbuild.from_api({"version": "0.28.1", "extensions": [
        NOT_BUILT_TF, ext("horovod.torch", "torch", False, False, error="ImportError: torch"), mx]})
    assert not any(cb.section("frameworks").values())


# -- real environments ---------------------------------------------------------------------

def linked_env(base, root, horovod_copy=False, crashing_mxnet=False):
    """A venv at ``root`` seeing ``base``'s site-packages; its ``bin/horovodrun`` logs each run to
    ``root/horovodrun.calls`` and then runs Horovod's ``run_commandline``."""
    base = Path(base)
    subprocess.run([str(base / "bin" / "python"), "-m", "venv", "--without-pip", str(root)], check=True)
    sp_src = next((base / "lib").glob("python*/site-packages"))
    sp = root / "lib" / sp_src.parent.name / "site-packages"
    if horovod_copy:  # without the compiled extensions
        shutil.copytree(sp_src / "horovod", sp / "horovod", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    if crashing_mxnet:
        (sp / "mxnet").mkdir()
        (sp / "mxnet" / "__init__.py").write_text("import ctypes\nctypes.string_at(0)  # SIGSEGV, a broken build\n")
    (sp / "zz-real-env.pth").write_text(str(sp_src) + "\n")
    calls = root / "horovodrun.calls"
    (root / "bin" / "horovodrun").write_text(
        f"#!{root / 'bin' / 'python'}\nimport sys\n"
        f"with open({str(calls)!r}, 'a') as f:\n    f.write(' '.join(sys.argv[1:]) + '\\n')\n"
        "from horovod.runner.launch import run_commandline\nsys.exit(run_commandline())\n")
    (root / "bin" / "horovodrun").chmod(0o755)
    return root


@pytest.fixture(scope="module")
def envs(cpu_horovod_env, tmp_path_factory):
    top = tmp_path_factory.mktemp("cb-envs")
    return {"tripwire": linked_env(cpu_horovod_env, top / "tripwire"),
            "crashing-mxnet": linked_env(cpu_horovod_env, top / "crashing-mxnet", crashing_mxnet=True),
            "unbuilt": linked_env(cpu_horovod_env, top / "unbuilt", horovod_copy=True)}


@pytest.mark.slow
def test_api_check_build_equals_real_horovodrun(cpu_horovod_env, envs):
    real = checkbuild.parse(vprobes.check_build_output(Path(cpu_horovod_env)))
    assert checkbuild.from_api(api_record(cpu_horovod_env)) == real
    assert real.section("frameworks")["PyTorch"] and real.section("controllers") == {"MPI": True, "Gloo": True}
    # Where the extension library is missing, both still agree (PyTorch [X], nothing else).
    unbuilt = checkbuild.parse(vprobes.check_build_output(envs["unbuilt"]))
    assert checkbuild.from_api(api_record(envs["unbuilt"])) == unbuilt
    assert unbuilt.section("frameworks")["PyTorch"] and not any(unbuilt.section("controllers").values())


@pytest.mark.slow
def test_doctor_answers_from_the_api_without_horovodrun(cpu_horovod_env, envs):
    env = envs["tripwire"]
    code, f = doctor_horovod_build(env, "--spec", "cpu-horovod")
    assert code == 0 and f["status"] == "ok", f
    d = f["details"]
    assert d["check_build_source"] == "api" and d["check_build_fallback_reason"] is None
    assert not (env / "horovodrun.calls").exists()  # doctor did not start horovodrun
    assert d["check_build"] == checkbuild.parse(vprobes.check_build_output(env)).to_dict()
    assert (env / "horovodrun.calls").read_text() == "--check-build\n"  # the tripwire works


@pytest.mark.slow
def test_doctor_falls_back_to_horovodrun_when_the_api_probe_dies(cpu_horovod_env, envs):
    env = envs["crashing-mxnet"]
    crash = subprocess.run([str(env / "bin" / "python"), "-c", "import mxnet"], capture_output=True)
    assert crash.returncode < 0  # killed by a signal, as the info probe will be
    calls = env / "horovodrun.calls"
    calls.unlink(missing_ok=True)
    code, f = doctor_horovod_build(env, "--spec", "cpu-horovod")
    d = f["details"]
    assert d["check_build_source"] == "horovodrun", d
    assert "info probe" in d["check_build_fallback_reason"]
    assert calls.read_text() == "--check-build\n"
    # horovodrun imports horovod.mxnet alone, where Horovod's library check raises before mxnet loads:
    # the same table as in the real env.
    assert d["check_build"] == checkbuild.parse(vprobes.check_build_output(Path(cpu_horovod_env))).to_dict()
    assert code == 0 and f["status"] == "ok", f
