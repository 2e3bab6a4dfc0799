"""Composing a plan (issue 39, item 5): the engine is resolved once per plan, the machine is probed
once before composing (:func:`envtool.steps.kernel.machine.probe`) and composing runs no probe, and a lock's
built entries are left to the build step (:meth:`envtool.engines.base.LockInstall.managed`).

In-process and fast: nothing is installed; the counters wrap the real registry lookup and the real
process and ``PATH`` functions, and fail the test when composing reaches them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from envtool.core.plan import PlanOptions
from envtool.engines import registry
from envtool.engines.base import LockInstall
from envtool.lock.model import LockedPackage
from envtool.spec.catalog import load_spec
from envtool.steps.create import planner

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "lockfiles" / "cpu-horovod.conda-lock.yml"


def _conda_env(path: Path) -> Path:
    """A directory clone source resolution takes as a conda environment (planning reads no more)."""
    (path / "conda-meta").mkdir(parents=True)
    (path / "conda-meta" / "history").write_text("")
    return path


def _options(kind: str, tmp_path: Path) -> PlanOptions:
    """Plan options for a solve, a lock install or a clone of ``cpu-horovod`` (venv spec)."""
    if kind == "lock":
        return PlanOptions(prefix=tmp_path / "env", from_lock=LOCK)
    if kind == "clone":
        return PlanOptions(prefix=tmp_path / "env", clone=str(_conda_env(tmp_path / "base")), engine="rattler")
    return PlanOptions(prefix=tmp_path / "env")


class _Probed(AssertionError):
    pass


def _refuse(what):
    def probe(*args, **kwargs):
        raise _Probed(f"{what}{args[:1]} while composing a plan")
    return probe


@pytest.mark.parametrize("kind", ["solve", "lock", "clone"])
def test_one_engine_lookup_per_plan_and_no_probe_while_composing(kind, tmp_path, monkeypatch):
    """:func:`planner.make_plan` looks the engine up in the registry once (the counter wraps the real
    lookup) and probes the machine once, up front (:func:`machine.probe`); with those facts given,
    composing the same plan again runs no subprocess and looks nothing up on ``PATH`` or in a
    directory, and makes the same steps."""
    calls = []
    real = registry.get_engine

    def counted(name):
        calls.append(name)
        return real(name)

    monkeypatch.setattr(registry, "get_engine", counted)
    spec = load_spec("cpu-horovod")
    plan = planner.make_plan(spec, _options(kind, tmp_path))
    assert calls == ["rattler" if kind == "clone" else "venv"], calls
    facts = plan.options.machine
    assert facts is not None and facts.base_python
    expected = plan.to_dict()
    # the spec builds Horovod 0.28.1 against torch >= 2.1: the C++17 fix (and its real compiler) is planned
    assert any("ENVTOOL_REAL_CXX" in str(s.get("env")) for s in expected["steps"]), expected["steps"]
    for mod, attr in ((subprocess, "run"), (subprocess, "Popen"), (subprocess, "check_output"),
                      (shutil, "which"), (os, "scandir"), (os, "listdir")):
        monkeypatch.setattr(mod, attr, _refuse(f"{mod.__name__}.{attr}"))
    assert planner.make_plan(spec, plan.options).to_dict() == expected


def _entry(name: str, manager: str = "pip", built: str = "") -> LockedPackage:
    return LockedPackage(manager=manager, name=name, version="1.0", platform="linux-64", built=built,
                         url=f"https://example.invalid/{name}-1.0.tar.gz", sha256="0" * 64)


def test_a_locks_built_entries_are_not_the_engines_to_install(tmp_path):
    """Horovod in a lock is built by ``build-horovod`` from its source archive: no engine installs it
    (``install-locked-pip`` leaves it out too), so :meth:`LockInstall.managed` leaves it out."""
    entries = (_entry("alpha"), _entry("horovod", built="horovod==0.28.1"), _entry("zlib", manager="conda"))
    lock = LockInstall(path=tmp_path / "x.conda-lock.yml", entries=entries, channels=(), platform="linux-64")
    assert [p.name for p in lock.managed("pip")] == ["alpha"]
    assert [p.name for p in lock.managed("conda")] == ["zlib"]
    # the toy engine (one file, one registration) installs exactly what it manages
    import helpers.toy_engine as toy

    try:
        steps = toy.ToyEngine().locked_steps(load_spec("cpu-horovod"), PlanOptions(prefix=tmp_path / "e"),
                                             LockInstall(path=lock.path, entries=entries[:2], channels=(),
                                                         platform="linux-64"))
    finally:
        registry.unregister("toy")
    assert steps[-1].data.packages == (("alpha", "1.0"),)
