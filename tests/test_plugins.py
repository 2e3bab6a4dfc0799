"""The one registry idiom (:class:`envtool.core.plugins.Registry`) and the ``envtool.plugins``
entry-point group: names listed without imports, duplicates refused, built-ins never replaced by
a plug-in, unknown names exit 2, and a real plug-in distribution installed into a venv adds a
scheduler and a modulefile format that the CLI then uses."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_envtool
from envtool.core import plugins
from envtool.core.errors import UsageError
from envtool.core.plugins import Registry, UnknownPlugin

#: What ``envtool --help`` and listing every registry's names must not import.
HEAVY = ("rattler", "asyncio", "envtool.engines.rattler", "envtool.engines.rattler_api", "envtool.engines.base",
         "envtool.engines.venv", "envtool.engines.external", "envtool.scheduler.slurm", "envtool.scheduler.launchers",
         "importlib.metadata", "envtool.spec.model", "envtool.core.plan")


def _imported_after(code: str) -> list:
    """The :data:`HEAVY` modules in ``sys.modules`` after ``code`` ran in a fresh interpreter."""
    probe = code + f"\nimport sys, json\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(proc.stdout.splitlines()[-1])


def test_help_and_every_registrys_names_import_no_plug_in():
    names = """
import contextlib, io
from envtool.engines import registry as engines
from envtool.spec import registry as sched
from envtool.modules import registry as writers
assert engines.names()[:5] == ("venv", "rattler", "conda", "mamba", "micromamba"), engines.names()
assert "rattler: embedded py-rattler" in engines.choices_help()
assert "slurm" in sched.site_scheduler_names() and "srun" in sched.launcher_names()
assert "lua" in writers.names()
from envtool.cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(["--help"])
    except SystemExit as exc:  # argparse's --help
        assert exc.code == 0
assert "create" in out.getvalue()
"""
    assert _imported_after(names) == []
    # the probe can see an import: asking for the engine loads it (and py-rattler with asyncio)
    assert set(_imported_after("from envtool.engines import registry\nregistry.get_engine('rattler')")) >= {
        "envtool.engines.rattler", "asyncio"}


def test_a_lazy_entry_is_imported_on_first_use_only(tmp_path, monkeypatch):
    (tmp_path / "lazy_toy_mod.py").write_text("THING = {'loaded': True}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("test-lazy")
    reg.register("thing", "lazy_toy_mod:THING", summary="a lazy thing")
    assert reg.names() == ("thing",) and reg.summary("thing") == "a lazy thing"
    assert "lazy_toy_mod" not in sys.modules and reg.loaded() == {}
    assert reg.get("thing") == {"loaded": True}
    assert "lazy_toy_mod" in sys.modules and reg.loaded() == {"thing": {"loaded": True}}
    sys.modules.pop("lazy_toy_mod")


def test_duplicate_names_and_bad_entries_are_refused():
    reg = Registry("test-dup", check=lambda obj: None if isinstance(obj, int) else (_ for _ in ()).throw(
        TypeError(f"not an int: {obj!r}")))
    reg.register("one", 1)
    reg.register("one", 1)  # the same target again (a module imported twice) is no clash
    with pytest.raises(ValueError, match="test-dup one is already registered .by envtool."):
        reg.register("one", 2)
    with pytest.raises(ValueError, match="name 'bad name'"):
        reg.register("bad name", 3)
    with pytest.raises(ValueError, match="not 'module' or 'module:attribute'"):
        reg.register("two", "not a target!")
    reg.register("three", "json:dumps")
    with pytest.raises(TypeError, match="not an int"):
        reg.get("three")
    with pytest.raises(ValueError, match="a registry of kind 'test-dup' exists already"):
        Registry("test-dup")
    assert reg.names() == ("one", "three") and list(reg) == ["one", "three"] and "one" in reg


def test_a_built_in_wins_over_an_entry_point_of_its_name(monkeypatch):
    # the entry points as importlib.metadata would give them (the venv test below reads real ones)
    monkeypatch.setattr(plugins, "_ENTRY_POINTS", {"test-shadow": [("builtin", "json:loads", "evil-dist"),
                                                                  ("extra", "json:loads", "good-dist")]})
    reg = Registry("test-shadow")
    reg.register("builtin", "json:dumps")
    assert reg.names() == ("builtin", "extra")
    assert reg.origin("builtin") == "envtool" and reg.is_builtin("builtin")
    assert reg.origin("extra") == "entry point of good-dist" and not reg.is_builtin("extra")
    import json as json_mod
    assert reg.get("builtin") is json_mod.dumps and reg.get("extra") is json_mod.loads
    # a built-in registered after the entry points were read takes its name back
    late = Registry("test-late")
    monkeypatch.setattr(plugins, "_ENTRY_POINTS", {"test-late": [("name", "json:loads", "evil-dist")]})
    assert late.names() == ("name",)
    late.register("name", "json:dumps")
    assert late.get("name") is json_mod.dumps and late.is_builtin("name")


def test_an_unknown_name_is_a_usage_error_naming_the_choices():
    reg = Registry("test-unknown")
    reg.register("alpha", 1)
    with pytest.raises(UnknownPlugin) as e:
        reg.get("beta")
    assert isinstance(e.value, UsageError) and isinstance(e.value, KeyError) and e.value.exit_status == 2
    assert str(e.value) == "unknown test-unknown 'beta'; expected one of alpha"


@pytest.mark.parametrize("argv, words", [
    (("plan", "cpu-horovod", "--engine", "nosuch"), ("--engine", "nosuch", "rattler", "venv")),
    (("modulefile", "--prefix", ".", "--format", "nosuch"), ("--format", "nosuch", "lua", "tcl")),
])
def test_the_cli_refuses_an_unknown_plug_in_name_with_exit_2(argv, words):
    proc = run_envtool(*argv, "--json")
    assert proc.returncode == 2, proc.stderr
    assert all(w in proc.stderr for w in words) and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["exit"] == 2


PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "envtool-toy-plugins"
version = "0.1"

[tool.setuptools]
packages = ["envtool_toy"]

[project.entry-points."envtool.plugins"]
"scheduler.toy" = "envtool_toy.sched"
"modulefile.sh" = "envtool_toy.writer:WRITER"
# a plug-in cannot take a built-in's name: envtool's slurm stays slurm
"scheduler.slurm" = "envtool_toy.sched"
"""


def _site(path: Path, sched: str) -> Path:
    path.write_text(f"name: s-{sched}\nscheduler: {sched}\nlauncher: 'mpirun -np {{ranks}}'\ngpus_per_node: 0\n"
                    f"batch:\n  cpus_per_node: 8\n")
    return path


def test_a_plug_in_distribution_adds_a_scheduler_and_a_modulefile_format(tmp_path):
    """Builds a real distribution (setuptools) whose ``envtool.plugins`` entry points name the toy
    scheduler and the toy shell-script modulefile format of tests/helpers, installs it with pip into
    a venv that sees the system's envtool (and runs this checkout's, cwd first on sys.path), and
    uses both through ``python -m envtool``."""
    src = tmp_path / "plugin"
    (src / "envtool_toy").mkdir(parents=True)
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "envtool_toy" / "__init__.py").write_text("")
    helpers = REPO / "tests" / "helpers"
    (src / "envtool_toy" / "sched.py").write_text((helpers / "toy_scheduler.py").read_text())
    (src / "envtool_toy" / "writer.py").write_text((helpers / "shell_module_writer.py").read_text()
                                                   + "\n\nWRITER = ShellScriptWriter()\n")
    venv = tmp_path / "venv"
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("ENVTOOL_DEBUG", None)
    # virtualenv (a dependency of conda-lock) seeds the setuptools wheel it bundles, offline: this
    # machine's own setuptools (65, Python 3.11's ensurepip) needs the absent 'wheel' package to
    # build a wheel; setuptools >= 70.1 builds one itself. pip is the system's (system site-packages).
    subprocess.run([sys.executable, "-m", "virtualenv", "-q", "--system-site-packages", "--no-download",
                    "--no-periodic-update", "--setuptools", "bundle", "--no-wheel", "--no-pip", str(venv)],
                   check=True, env=env, capture_output=True)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation", "--no-deps", str(src)],
                   check=True, env=env, cwd=tmp_path, capture_output=True)

    def envtool(*args):
        return subprocess.run([py, "-m", "envtool", *map(str, args)], capture_output=True, text=True, env=env,
                              cwd=REPO, timeout=120)

    # --help names the plug-in format (without importing it); the system interpreter does not see it
    assert "{lua,tcl,sh}" in envtool("modulefile", "--help").stdout
    assert "{lua,tcl}" in run_envtool("modulefile", "--help").stdout
    # a site file may name the plug-in scheduler, and a job script gets its directives
    job = envtool("jobscript", "--site-file", _site(tmp_path / "toy.yaml", "toy"), "--module", "m", "--nodes", "2",
                  "--ranks-per-node", "1", "--", "true")
    assert job.returncode == 0, job.stderr
    assert "#TOY nodes 2" in job.stdout
    # the entry point named slurm changed nothing: envtool's Slurm writes the job script
    slurm = envtool("jobscript", "--site-file", _site(tmp_path / "slurm.yaml", "slurm"), "--module", "m",
                    "--nodes", "2", "--ranks-per-node", "1", "--", "true")
    assert slurm.returncode == 0 and "#SBATCH" in slurm.stdout and "#TOY" not in slurm.stdout, slurm.stderr
    # modulefile --format sh writes the plug-in's format
    root = tmp_path / "modules"
    made = envtool("modulefile", "--prefix", venv, "--format", "sh", "--root", root, "--name", "toy/1.0")
    assert made.returncode == 0, made.stderr
    text = (root / "toy" / "1.0.sh").read_text()
    assert text.startswith("# toy/1.0: written by envtool's toy shell-script module writer")
    assert f"export VIRTUAL_ENV={venv}" in text


def test_a_broken_plug_in_is_a_usage_error_naming_its_distribution(monkeypatch):
    """An entry point whose module is missing, or whose object fails the kind's check, exits 2 naming
    the distribution (not 3, a bug of envtool's); a broken built-in still raises as the bug it is."""
    from envtool.core.plugins import BrokenPlugin

    monkeypatch.setattr(plugins, "_ENTRY_POINTS", {"test-broken": [("gone", "no_such_module_xyz:X", "bad-dist"),
                                                                   ("wrong", "json:loads", "odd-dist")]})

    def must_be_a_type(obj):
        if not isinstance(obj, type):
            raise TypeError("expected a class")

    reg = Registry("test-broken", check=must_be_a_type)
    reg.register("builtin", "no_such_module_abc:Y")
    with pytest.raises(BrokenPlugin) as e:
        reg.get("gone")
    assert e.value.exit_status == 2 and "bad-dist" in str(e.value) and "ModuleNotFoundError" in str(e.value)
    with pytest.raises(BrokenPlugin) as e:
        reg.get("wrong")
    assert "odd-dist" in str(e.value) and "expected a class" in str(e.value)
    with pytest.raises(ImportError):
        reg.get("builtin")
