"""Planning looks at the machine once, up front (:func:`envtool.steps.kernel.machine.probe`); composing the
steps from that value starts no process. Watched with a real CPython audit hook
(``subprocess.Popen`` and ``os.exec*``/``os.posix_spawn`` events, PEP 578), not a mock."""
from __future__ import annotations

import sys

from envtool.core.plan import PlanOptions
from envtool.spec.catalog import load_spec
from envtool.steps.kernel import machine
from envtool.steps.create.planner import make_plan

_EVENTS = ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.system")
_seen: list = []
_watching = [False]


def _hook(event, args):
    if _watching[0] and event.startswith(_EVENTS):
        _seen.append((event, str(args[:2])[:200]))


sys.addaudithook(_hook)  # audit hooks cannot be removed; it only records while _watching is set


def _processes(fn):
    _seen.clear()
    _watching[0] = True
    try:
        result = fn()
    finally:
        _watching[0] = False
    return result, list(_seen)


def test_composing_a_plan_from_probed_facts_starts_no_process(tmp_path):
    spec = load_spec("cpu-horovod")  # builds Horovod with pip: cmake, c++ and mpirun are probed
    options = PlanOptions(prefix=tmp_path / "env", from_lock=None, preview=True)
    probed, started = _processes(lambda: machine.probe(spec, options))
    assert started, "the probe is where the machine is asked (uv --version, pip config, cmake, c++, mpirun)"
    assert probed.machine is not None and probed.machine.build is not None
    plan, started = _processes(lambda: make_plan(spec, probed))
    assert started == [], started
    # the same plan as one that probes for itself
    again = make_plan(spec, options)
    assert [s.to_dict() for s in plan.steps] == [s.to_dict() for s in again.steps]
    assert plan.to_dict() == again.to_dict()
    assert not (tmp_path / "env").exists()


def test_a_spec_that_builds_nothing_probes_no_toolchain(tmp_path):
    import dataclasses

    spec = load_spec("cpu-horovod")
    spec = dataclasses.replace(spec, horovod=dataclasses.replace(spec.horovod, install="none"))
    probed, started = _processes(lambda: machine.probe(spec, PlanOptions(prefix=tmp_path / "env", preview=True)))
    assert probed.machine is not None and probed.machine.build is None
    assert not any("cmake" in a or "mpirun" in a for _, a in started), started
