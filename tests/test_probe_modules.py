"""The probe scripts of envtool/probes/: standalone, importable for their logic, runnable by old
interpreters, and read right by envtool (fast); run for real in the cpu-horovod env (slow)."""
import ast
import json
import os
import platform
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from envtool import probes
from envtool.probes import allreduce, dataloader, env_info, framework_versions
from envtool.validate import probes as vprobes
from helpers.speed import scaled

PROBE_DIR = Path(probes.__file__).resolve().parent
#: What the probes may import besides the standard library (only inside functions).
PROBED = {"torch", "horovod", "tensorflow", "mxnet", "importlib_metadata", "pkg_resources", "numpy"}


def torch_importable(python=sys.executable):
    return subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode == 0


def run_by_path(python, name, *args, timeout=None):
    """``python envtool/probes/NAME.py ARGS`` from an empty directory (as envtool runs it)."""
    return subprocess.run([str(python), str(probes.probe_path(name)), *args], capture_output=True, text=True,
                          timeout=scaled(120) if timeout is None else timeout, env=probes.clean_env(), cwd="/")


# -- the package: names, paths, the standalone contract ---------------------------------------

def test_every_probe_file_is_listed_and_found():
    files = {p.stem for p in PROBE_DIR.glob("*.py") if p.name != "__init__.py"}
    assert files == set(probes.NAMES) | set(probes.HELPERS)
    for name in probes.NAMES:
        path = probes.probe_path(name)
        assert path.is_absolute() and path.is_file() and path.parent == PROBE_DIR
    for bad in ("nope", "dataloader.py", "__init__"):
        with pytest.raises(ValueError, match="unknown probe"):
            probes.probe_path(bad)


def test_probe_names_shadow_no_module_they_could_import():
    # the script's own directory comes first on sys.path when it runs by path
    stdlib = getattr(sys, "stdlib_module_names", None)
    if stdlib is None:
        pytest.skip("sys.stdlib_module_names needs Python 3.10")
    for name in probes.NAMES + probes.HELPERS:
        assert name not in stdlib and name not in PROBED, name


@pytest.mark.parametrize("name", probes.NAMES)
def test_probe_is_a_standalone_script(name):
    source = probes.probe_path(name).read_text()
    tree = ast.parse(source, feature_version=(3, 6))  # Python 3.6: the oldest a bundled spec names
    assert ast.get_docstring(tree), "module docstring"
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "main" in functions and ast.get_docstring(functions["main"])
    for fn in functions.values():
        if not fn.name.startswith("_"):
            assert ast.get_docstring(fn), f"{name}.{fn.name} has no docstring"
    assert any(isinstance(n, ast.If) and "__main__" in ast.dump(n.test) for n in tree.body)
    stdlib = getattr(sys, "stdlib_module_names", None)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            roots = [(node.module or "").split(".")[0]]
            assert node.module != "__future__", "from __future__ imports need Python 3.7"
        elif isinstance(node, ast.Import):
            roots = [a.name.split(".")[0] for a in node.names]
        else:
            continue
        for root in roots:
            assert root != "envtool", f"{name} imports envtool, which the target env does not have"
            if node in tree.body and stdlib is not None:  # module level: the standard library only
                assert root in stdlib, f"{name} imports {root} at module level"
            elif stdlib is not None:
                assert root in stdlib or root in PROBED or root in probes.HELPERS, root
    import importlib

    module = importlib.import_module(f"envtool.probes.{name}")
    assert module.MARKER == probes.MARKER


@pytest.mark.parametrize("name", probes.HELPERS)
def test_probe_helper_is_standalone(name):
    # imported by probes and by the rank probe from their own directory: same contract, no main
    path = PROBE_DIR / f"{name}.py"
    tree = ast.parse(path.read_text(), feature_version=(3, 6))
    assert ast.get_docstring(tree)
    stdlib = getattr(sys, "stdlib_module_names", None) or set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            roots = [a.name.split(".")[0] for a in node.names] if isinstance(node, ast.Import) else [node.module]
            assert not stdlib or all(r in stdlib for r in roots), f"{name} imports {roots} at module level"
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            assert ast.get_docstring(node), f"{name}.{node.name} has no docstring"


def test_parse_records_keeps_marked_json_objects_only():
    text = ("banner {\"default\": 1}\n"
            "ENVTOOL-PROBE {\"default\": \"fork\"}\n"
            "ENVTOOL-PROBE [1, 2]\n"
            "ENVTOOL-PROBE {\"method\": \"fork\", \"tot\n"  # cut off by a kill
            "[1,0]<stdout>:ENVTOOL-PROBE {\"x\": 1}\n"
            "ENVTOOL-PROBE {\"method\": \"spawn\", \"total\": 140}\n")
    assert probes.parse_records(text) == [{"default": "fork"}, {"method": "spawn", "total": 140}]


# -- the probes' own logic, imported directly (no torch) ----------------------------------------

def test_dataloader_logic():
    assert dataloader.expected_total() == 140 == vprobes.DATALOADER_TOTAL
    ds = dataloader.Squares()
    assert len(ds) == dataloader.ITEMS and [ds[i] for i in range(len(ds))] == [i * i for i in range(8)]
    with pytest.raises(IndexError):
        ds[8]
    assert dataloader.resolve_methods(["default", "forkserver"], "fork") == ["fork", "forkserver"]
    assert dataloader.resolve_methods(["default", "fork", "default"], "fork") == ["fork"]
    assert dataloader.resolve_methods(["spawn", "default"], "forkserver") == ["spawn", "forkserver"]
    args = dataloader.parse_args(["--hvd-init", "default", "spawn"])
    assert args.hvd_init and args.methods == ["default", "spawn"]
    with pytest.raises(SystemExit) as exc:
        dataloader.parse_args([])
    assert exc.value.code == 2
    assert dataloader.one_line(ValueError("bad\nsecond line")) == "ValueError: bad"
    assert len(dataloader.one_line(RuntimeError("x" * 1000))) == dataloader.ERROR_CHARS


def test_dataloader_load_judges_what_a_loader_returns():
    class Batch(list):
        def sum(self):
            return sum(self)

    def loader(dataset, batch_size, num_workers, multiprocessing_context):
        if multiprocessing_context == "bogus":
            raise ValueError("cannot find context for 'bogus'")
        items = [dataset[i] for i in range(len(dataset))]
        return [Batch(items[i:i + batch_size]) for i in range(0, len(items), batch_size)]

    rec = dataloader.load(loader, "fork")
    assert rec["method"] == "fork" and rec["total"] == 140 and rec["seconds"] >= 0
    rec = dataloader.load(loader, "bogus")
    assert rec["error"] == "ValueError: cannot find context for 'bogus'" and "total" not in rec


def test_env_info_logic():
    maps = ["7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4",
            "7f02-7f03 r-xp 0 08:01 2 /usr/lib/x86_64-linux-gnu/libmpi_cxx.so.40.30.1",
            "7f04-7f05 r--p 0 08:01 1 /usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4",
            "7f06-7f07 rw-p 0 00:00 0 ",
            "7f08-7f09 r-xp 0 08:01 3 /opt/mpich/lib/libmpich.so.12"]
    assert env_info.mpi_libraries(maps) == ["/opt/mpich/lib/libmpich.so.12",  # MPICH's library is libmpich
                                            "/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4"]
    assert env_info.is_mpi_library("/x/libmpi.so") and not env_info.is_mpi_library("/x/libmpi_usempif08.so")
    assert not env_info.is_mpi_library("/x/libmpi_mpifh.so.40") and not env_info.is_mpi_library("/x/libm.so.6")

    class Ext:
        def init(self):
            pass

        def gloo_built(self):
            return True

        def nccl_built(self):
            raise RuntimeError("no")

    assert env_info.extension_built(Ext(), "")
    assert not env_info.extension_built(Ext(), "Extension horovod.torch has not been built: /x not found")
    assert not env_info.extension_built(object(), "") and not env_info.extension_built(None, "")
    assert env_info.call_api(Ext(), ["gloo_built", "nccl_built", "ccl_built"]) == {
        "gloo_built": True, "nccl_built": None, "ccl_built": None}
    mod, rec = env_info.try_import("envtool_no_such_module")
    assert mod is None and rec["ok"] is False and rec["error"].startswith("ModuleNotFoundError: ")
    mod, rec = env_info.try_import("json", capture=True)
    assert mod is json and rec["ok"] is True and rec["file"] == json.__file__
    with pytest.raises(SystemExit) as exc:
        env_info.parse_args(["not json"])
    assert exc.value.code == 2
    assert env_info.parse_args(['[["torch", "horovod.torch"]]', '["gloo_built"]']) == (
        [("torch", "horovod.torch")], ["gloo_built"])


def test_framework_versions_logic():
    assert framework_versions.python_tag("cpython-311") == "cp311"
    assert framework_versions.python_tag("pypy39") == "pypy39"
    have = {"tensorflow-cpu": "2.9.0", "torch": "2.13.0+cpu"}

    def version(name):
        if name not in have:
            raise LookupError(name)
        return have[name]

    dists = {"pytorch": ["torch"], "tensorflow": ["tensorflow", "tensorflow-cpu"], "mxnet": ["mxnet"]}
    assert framework_versions.installed(dists, version) == {"pytorch": ["torch", "2.13.0+cpu"],
                                                            "tensorflow": ["tensorflow-cpu", "2.9.0"]}
    real = framework_versions.metadata_version()  # importlib.metadata's "not found" becomes LookupError
    assert real("pip") == metadata.version("pip")
    with pytest.raises(LookupError):
        real("envtool-no-such-distribution")


def test_allreduce_logic_matches_the_parser():
    assert allreduce.expected_average(2) == 1.5 and allreduce.expected_average(4) == 2.5
    line = probes.MARKER + json.dumps({"rank": 0, "size": 1, "value": allreduce.expected_average(1)})
    assert vprobes.parse_allreduce(line, 1)


# -- envtool reading the DataLoader probe ----------------------------------------------------------

def read(records, methods, timed_out=False, error=None, tail=""):
    return vprobes.read_dataloader(probes.ProbeRun(tuple(records), None if timed_out else 0, timed_out, tail,
                                                   1.0, error), methods, 30)


def test_read_dataloader_judges_each_method():
    probe = read([{"default": "fork"}, {"hvd_init": True, "controller": "gloo", "size": 1},
                  {"method": "fork", "total": 140, "seconds": 0.1},
                  {"method": "forkserver", "total": 139, "seconds": 0.2},
                  {"method": "forkserver", "total": 140, "seconds": 0.2}],  # a repeat is ignored
                 ["default", "forkserver"])
    assert probe.error is None and probe.default == "fork" and probe.hvd_init and probe.controller == "gloo"
    assert [(r.method, r.ok, r.error) for r in probe.results] == [
        ("fork", True, None), ("forkserver", False, "wrong total 139 (expected 140)")]
    assert probe.to_dict()["results"][0]["default_method"] == "fork"


def test_read_dataloader_hang_keeps_finished_methods():
    probe = read([{"default": "fork"}, {"method": "fork", "total": 140, "seconds": 0.1}],
                 ["default", "spawn"], timed_out=True, error="no answer within 30 s")
    assert [(r.method, r.ok, r.error) for r in probe.results] == [
        ("fork", True, None), ("spawn", False, "no result within 30 s (hung workers?)")]
    probe = read([{"default": "fork"}], ["spawn"], tail="...\nSegmentation fault")
    assert probe.results[0].error == "probe died: Segmentation fault"
    probe = read([], ["fork"], error="cannot run /x/bin/python: No such file or directory")
    assert probe.error == "cannot run /x/bin/python: No such file or directory" and not probe.results


def test_read_dataloader_tells_missing_torch_from_broken_torch():
    probe = read([{"default": "fork"}, {"torch": False, "installed": False, "error": "ModuleNotFoundError: x"}],
                 ["fork"])
    assert probe.error == "torch is not installed" and probe.default == "fork" and not probe.results
    probe = read([{"default": "fork"}, {"torch": False, "installed": True, "error": "OSError: libtorch.so"}],
                 ["fork"])
    assert probe.error == "cannot import torch: OSError: libtorch.so"


# -- real runs with interpreters that have no torch ------------------------------------------------

def make_venv(root: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    return next((root / "lib").glob("python*/site-packages"))


def test_dataloader_probe_without_torch():
    if torch_importable():
        pytest.skip("the test interpreter has torch")
    result = vprobes.dataloader(Path(sys.executable), "fork", timeout=scaled(60))
    assert not result.ok and result.error == "torch is not installed" and result.default_method == "fork"
    proc = run_by_path(sys.executable, "dataloader", "fork")
    assert proc.returncode == 1
    assert probes.parse_records(proc.stdout)[-1]["installed"] is False


def test_dataloader_probe_with_a_torch_that_does_not_import(tmp_path):
    sp = make_venv(tmp_path / "venv")
    (sp / "torch").mkdir()
    (sp / "torch" / "__init__.py").write_text("raise OSError('libtorch_cpu.so: cannot open shared object file')\n")
    probe = vprobes.dataloader_methods(tmp_path / "venv" / "bin" / "python", ["default"], timeout=scaled(60))
    assert probe.default == "fork"
    assert probe.error == "cannot import torch: OSError: libtorch_cpu.so: cannot open shared object file"


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_dataloader_probe_hang_is_cut_and_reports_what_finished(tmp_path):
    # A stand-in torch.utils.data whose DataLoader never returns under "spawn" (as workers forked
    # from a fork-unsafe MPI stack can): the real probe script, subprocess and timeout handling.
    sp = make_venv(tmp_path / "venv")
    data = sp / "torch" / "utils" / "data"
    data.mkdir(parents=True)
    (sp / "torch" / "__init__.py").write_text("")
    (sp / "torch" / "utils" / "__init__.py").write_text("")
    (data / "__init__.py").write_text(textwrap.dedent("""\
        import time

        class _Batch(list):
            def sum(self):
                return sum(self)

        class DataLoader:
            def __init__(self, dataset, batch_size, num_workers, multiprocessing_context):
                self.items = [dataset[i] for i in range(len(dataset))]
                self.size, self.method = batch_size, multiprocessing_context

            def __iter__(self):
                if self.method == "spawn":
                    time.sleep(600)
                for i in range(0, len(self.items), self.size):
                    yield _Batch(self.items[i:i + self.size])
        """))
    probe = vprobes.dataloader_methods(tmp_path / "venv" / "bin" / "python", ["default", "spawn"], timeout=5)
    assert probe.seconds < scaled(60) and probe.error is None and probe.hvd_init is None
    assert [(r.method, r.ok, r.error) for r in probe.results] == [
        ("fork", True, None), ("spawn", False, "no result within 5 s (hung workers?)")]


def test_env_info_probe_by_path():
    proc = run_by_path(sys.executable, "env_info", '[["json", "json.decoder"]]', '["gloo_built"]')
    assert proc.returncode == 0, proc.stderr
    [info] = probes.parse_records(proc.stdout)
    assert info["start_method_default"] == "fork"  # Linux, Python < 3.14
    assert info["python"] == platform.python_version() and info["prefix"] == sys.prefix
    assert str(PROBE_DIR) not in info["sys_path"] and info["sys_path"]
    assert info["modules"]["json"]["ok"] is True and "json.decoder" not in info["modules"]
    proc = run_by_path(sys.executable, "env_info", "{bad")
    assert proc.returncode == 2 and "FRAMEWORKS_JSON" in proc.stderr and not proc.stdout


def test_framework_versions_probe_by_path():
    proc = run_by_path(sys.executable, "framework_versions",
                       json.dumps({"p": ["envtool-no-such-dist", "pip"], "none": ["envtool-no-such-dist"]}))
    assert proc.returncode == 0, proc.stderr
    tag = "cp%d%d" % sys.version_info[:2]
    assert probes.parse_records(proc.stdout) == [{"python_tag": tag,
                                                  "frameworks": {"p": ["pip", metadata.version("pip")]}}]
    proc = run_by_path(sys.executable, "framework_versions")
    assert proc.returncode == 2 and "usage: framework_versions.py" in proc.stderr


def other_interpreters():
    """Runnable CPython 3 interpreters other than this one: ``$ENVTOOL_TEST_PYTHONS`` (os.pathsep
    separated) or those found as ``pythonX.Y`` on PATH and under ``$PYENV_ROOT``/``~/.pyenv``."""
    found = {}
    given = os.environ.get("ENVTOOL_TEST_PYTHONS")
    candidates = [Path(p) for p in given.split(os.pathsep) if p] if given else []
    if not given:
        import shutil

        candidates += [Path(p) for m in range(6, 14) if (p := shutil.which(f"python3.{m}"))]
        root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
        candidates += sorted(root.glob("versions/3.*/bin/python3"))
    for path in candidates:
        try:
            out = subprocess.run([str(path), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=scaled(20))
        except (OSError, subprocess.TimeoutExpired):
            continue
        version = out.stdout.strip()
        if out.returncode == 0 and version and version not in found and version != "%d.%d" % sys.version_info[:2]:
            found[version] = path
    return sorted(found.items(), key=lambda kv: tuple(map(int, kv[0].split("."))))


@pytest.mark.parametrize("version,python", other_interpreters() or [pytest.param(None, None, marks=pytest.mark.skip(
    reason="no other Python 3 interpreter found (set ENVTOOL_TEST_PYTHONS)"))])
def test_torch_free_probes_run_under_other_pythons(version, python):
    proc = run_by_path(python, "framework_versions", json.dumps({"p": ["envtool-no-such-dist", "pip"]}))
    assert proc.returncode == 0, proc.stderr
    [rec] = probes.parse_records(proc.stdout)
    assert rec["python_tag"] == "cp" + version.replace(".", "") and rec["frameworks"]["p"][0] == "pip"
    proc = run_by_path(python, "env_info", '[["json", "json.decoder"]]', '["gloo_built"]')
    assert proc.returncode == 0, proc.stderr
    [info] = probes.parse_records(proc.stdout)
    assert info["python"].startswith(version + ".") and info["modules"]["json"]["ok"] is True
    if not torch_importable(python):
        probe = vprobes.dataloader_methods(python, ["default"], timeout=scaled(60))
        assert probe.default in ("fork", "forkserver") and probe.error == "torch is not installed"


# -- the real cpu-horovod environment -------------------------------------------------------------

@pytest.mark.slow
def test_one_dataloader_probe_after_hvd_init_in_cpu_env(cpu_horovod_env):
    python = cpu_horovod_env / "bin" / "python"
    probe = vprobes.dataloader_methods(python, ["default", "forkserver", "spawn", "fork", "bogus"], timeout=scaled(300),
                                       hvd_init=True)
    assert probe.error is None and probe.default == "fork"
    assert probe.hvd_init is True and probe.controller == "gloo" and probe.init_error is None
    assert [r.method for r in probe.results] == ["fork", "forkserver", "spawn", "bogus"]
    assert all(r.ok and r.seconds is not None for r in probe.results[:3]), probe
    assert not probe.results[3].ok and probe.results[3].error.startswith("ValueError: ")
    proc = run_by_path(python, "dataloader", "forkserver", timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr
    assert [r.get("method") for r in probes.parse_records(proc.stdout)] == [None, "forkserver"]
    assert run_by_path(python, "dataloader", "bogus", timeout=scaled(300)).returncode == 1


@pytest.mark.slow
def test_rank_probes_dataloader_check_names_workers_that_send_nothing(cpu_horovod_env):
    """The validation job's DataLoader check (envtool/validate/rank_probe.py) gives up on workers that
    send no batch within its timeout, naming the method and the wait, instead of hanging the rank;
    the same check passes with workers that answer."""
    code = textwrap.dedent("""
        import json, sys, time
        sys.path.insert(0, sys.argv[1])
        import rank_probe
        print(json.dumps(rank_probe.dataloader_check("fork", timeout=30)))
        rank_probe.Squares.__getitem__ = lambda self, i: time.sleep(60)  # the forked workers inherit it
        print(json.dumps(rank_probe.dataloader_check("fork", timeout=2)))
    """)
    proc = subprocess.run([str(cpu_horovod_env / "bin" / "python"), "-c", code,
                           str(Path(vprobes.__file__).parent)], capture_output=True, text=True, timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr
    good, stuck = (json.loads(line) for line in proc.stdout.splitlines())
    assert good["ok"] and good["method"] == "fork" and good["error"] is None, good
    assert not stuck["ok"] and 2 <= stuck["seconds"] < 30, stuck
    assert "start method fork" in stuck["error"] and "within 2 s" in stuck["error"], stuck


@pytest.mark.slow
def test_env_info_probe_in_cpu_env(cpu_horovod_env):
    from envtool.checks import envprobe

    run = probes.run_probe(cpu_horovod_env / "bin" / "python", "env_info",
                           [json.dumps([list(f) for f in envprobe.FRAMEWORKS]), json.dumps(envprobe.API_PROBES)], 300)
    assert run.error is None and run.returncode == 0, run.output_tail
    [info] = run.records
    assert info["prefix"] == str(cpu_horovod_env) and info["enable_user_site"] is False
    assert info["modules"]["torch"]["version"].startswith("2.13.0")
    assert info["modules"]["horovod"]["version"] == "0.28.1"
    assert info["modules"]["horovod.torch"]["built"] is True
    caps = info["capabilities"]
    assert caps["from"] == "horovod.torch" and caps["gloo_built"] is True and caps["mpi_built"] is True
    assert not caps["nccl_built"] and caps["cuda_built"] is False
    assert "Open MPI" in info["mpi"]["version"] and "libmpi.so" in info["mpi"]["library"]
    assert info["cuda"]["torch_cuda"] is None and info["cuda"]["available"] is False
    assert info["horovod_metadata_path"].endswith("horovod/metadata.json")


@pytest.mark.slow
def test_framework_versions_probe_in_cpu_env(cpu_horovod_env, tmp_path):
    from envtool.steps.create.horovod_build import probe_env
    from envtool.steps.kernel.runner import Runner

    with Runner(tmp_path / "build.log") as runner:
        info = probe_env(runner, str(cpu_horovod_env / "bin" / "python"))
    assert info == {"python_tag": "cp311", "frameworks": {"pytorch": ["torch", "2.13.0+cpu"]}}
    assert "envtool/probes/framework_versions.py" in (tmp_path / "build.log").read_text()
