"""The contract every registered engine keeps (parametrised over the registry), and the proof that a
new engine is one file plus one registration: the toy engine of ``tests/helpers/toy_engine.py`` is
registered by importing that file (its one ``register`` call) and passes the same contract, and
``envtool plan --engine toy`` plans with it without any other change to envtool.

Real files and processes throughout: the lock installs run ``python -m venv`` into a temporary
directory and the toy engine writes its records there.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envtool.core.errors import UsageError
from envtool.core.plan import Installer, PlanOptions
from envtool.engines import registry
from envtool.engines.base import Engine, LockInstall
from envtool.lock.model import LockedPackage
from envtool.spec.catalog import load_spec
from envtool.spec.model import ENGINES
from envtool.steps.kernel.runner import Runner

BUILTIN = registry.names()
import helpers.toy_engine as toy  # noqa: E402  (its one registration call runs on import)

ALL = registry.names()
# the toy engine is registered only while a test of this module uses it (other modules of the session
# see the built-in registry)
registry.unregister("toy")

#: a bundled spec of each kind (``engine:`` value) for planning
SPEC_OF_KIND = {"venv": "cpu-horovod", "conda": "nersc-pytorch-1.13.1"}


@pytest.fixture(params=ALL)
def name(request):
    if request.param == "toy":
        registry.register(toy.ToyEngine)
        yield "toy"
        registry.unregister("toy")
    else:
        yield request.param


def _snapshot(root: Path):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_toy_engine_is_one_file_and_one_registration():
    assert "toy" not in BUILTIN and ALL == BUILTIN + ("toy",)
    # the built-in engines, the new vocabulary: conda is the external conda, rattler the embedded one
    assert {"venv", "rattler", "conda", "mamba", "micromamba"} <= set(BUILTIN)


def test_engine_describes_itself(name):
    engine = registry.get_engine(name)
    assert isinstance(engine, Engine) and engine.name == name
    assert engine.summary and name in registry.choices_help()
    assert engine.spec_engine in ENGINES
    assert isinstance(engine.install_step_ids, frozenset) and all(isinstance(i, str) for i in engine.install_step_ids)
    assert registry.engine_for(engine.spec_engine, name).name == name


def test_planning_writes_nothing_and_steps_serialise(name, tmp_path):
    engine = registry.get_engine(name)
    spec = load_spec(SPEC_OF_KIND[engine.spec_engine])
    if name == "toy":
        import dataclasses

        spec = dataclasses.replace(spec, packages=dataclasses.replace(spec.packages, conda=()))
    options = PlanOptions(prefix=tmp_path / "env", build_prefix=tmp_path / ".env-build")
    try:
        steps = engine.create_steps(spec, options)
    except UsageError as exc:  # an external tool that is not installed: a clear usage error naming it
        assert name in str(exc) and not shutil.which(name), exc
        return
    assert steps and len({s.id for s in steps}) == len(steps)
    json.dumps([s.to_dict() for s in steps])
    assert all(s.action is None or callable(s.action) for s in steps)
    assert _snapshot(tmp_path) == []  # planning made nothing


def test_clone_of_a_missing_source_is_a_usage_error(name, tmp_path):
    engine = registry.get_engine(name)
    options = PlanOptions(prefix=tmp_path / "env")
    with pytest.raises(UsageError):
        engine.clone_steps(None, str(tmp_path / "no-such-env"), options)
    assert _snapshot(tmp_path) == []


def _pip_lock(tmp_path: Path) -> LockInstall:
    entries = tuple(LockedPackage(manager="pip", name=n, version=v, platform="linux-64",
                                  url=f"https://example.invalid/{n}-{v}-py3-none-any.whl", sha256="0" * 64)
                    for n, v in (("alpha", "1.0"), ("beta", "2.5")))
    return LockInstall(path=tmp_path / "x.conda-lock.yml", entries=entries, channels=(), platform="linux-64",
                       notes=("toy lock",))


def test_installs_a_prefix_from_a_lock_for_real(name, tmp_path):
    """Every engine makes a working prefix from a (pip-only) lock; its steps run for real through the
    runner's context, write only under the build prefix, and the engine can read the result."""
    engine = registry.get_engine(name)
    spec = load_spec("cpu-horovod")
    uv = shutil.which("uv")
    # uv seeds the venv offline from ensurepip's wheels (fast); without uv, plain venv
    inst = Installer(name="uv", program=uv) if uv else None
    options = PlanOptions(prefix=tmp_path / "env", build_prefix=tmp_path / "build", install_with=inst)
    lock = _pip_lock(tmp_path)
    steps = engine.locked_steps(spec, options, lock)
    assert steps and all(set(lock.notes) <= set(s.notes) for s in steps[:1])
    with Runner(log_path=tmp_path / "log", quiet=True) as runner:
        for i, step in enumerate(steps, 1):
            runner.run_step(step, i, len(steps))
    assert set(_snapshot(tmp_path)) - {"log"} == {p for p in _snapshot(tmp_path) if p == "build" or p.startswith("build/")}
    py = engine.python(tmp_path / "build")
    assert subprocess.run([str(py), "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True,
                          check=True).stdout.strip() == str(tmp_path / "build")
    got = engine.installed(tmp_path / "build")
    if name == "toy":
        assert [(p.name, p.version) for p in got] == [("alpha", "1.0"), ("beta", "2.5")]
        assert engine.holds(tmp_path / "build")


def test_a_lock_with_conda_entries_is_refused_or_planned(name, tmp_path):
    """A venv-kind engine refuses a lock with conda entries with a clear usage error naming the lock;
    a conda-kind engine plans it (no solve: the records are looked up when it runs)."""
    engine = registry.get_engine(name)
    conda = LockedPackage(manager="conda", name="zlib", version="1.2.13", platform="linux-64",
                          url="https://conda.anaconda.org/conda-forge/linux-64/zlib-1.2.13-h0_0.conda", sha256="0" * 64)
    lock = LockInstall(path=tmp_path / "y.conda-lock.yml", entries=(conda,), channels=("conda-forge",),
                       platform="linux-64")
    options = PlanOptions(prefix=tmp_path / "env")
    if engine.spec_engine == "venv":
        with pytest.raises(UsageError, match="y.conda-lock.yml"):
            engine.locked_steps(load_spec("cpu-horovod"), options, lock)
    else:
        steps = engine.locked_steps(load_spec(SPEC_OF_KIND["conda"]), options, lock)
        assert [s.id for s in steps] == ["install-locked-conda"] and "install-locked-conda" in engine.install_step_ids
    assert _snapshot(tmp_path) == []


def test_plan_engine_toy_through_the_cli(capsys, monkeypatch, tmp_path):
    """``envtool plan --engine toy`` takes the registered engine: the option's choices come from the
    registry, and the planner needs no other change."""
    from envtool.cli.main import main

    registry.register(toy.ToyEngine)
    try:
        code = main(["plan", "cpu-horovod", "--engine", "toy", "--resolve", "--json", "--prefix", str(tmp_path / "p")])
    finally:
        registry.unregister("toy")
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert out["engine"] == "toy" and [s["id"] for s in out["steps"]][:2] == ["toy-venv", "toy-install"]
    assert not (tmp_path / "p").exists()


def test_deprecated_conda_external_still_works_with_a_warning(capsys, tmp_path):
    from envtool.cli.main import main

    code = main(["plan", "nersc-pytorch-1.13.1", "--engine", "conda-external", "--resolve", "--json",
                 "--platform-mismatch-ok", "--prefix", str(tmp_path / "p")])
    cap = capsys.readouterr()
    assert "--engine conda-external is deprecated; use --engine conda" in cap.err
    out = json.loads(cap.out)
    if shutil.which("conda"):
        assert code == 0 and out["engine"] == "conda"
    else:  # the external conda is not installed: a usage error naming it (exit 2)
        assert code == 2 and "conda is not on PATH" in out["error"]


def test_engine_help_lists_every_registered_engine():
    proc = subprocess.run([sys.executable, "-m", "envtool", "create", "--help"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "400"}, cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 0
    for n in BUILTIN:
        assert f"{n}: " in proc.stdout, n
    assert "{" + ",".join(BUILTIN) + "}" in proc.stdout
