#!/usr/bin/env python3
"""Which real component each test module exercises, counted from pytest's own collection (issue 37).

For every collected test, the fixtures it uses (the whole closure, as pytest resolves it), its
markers and its function's source decide which real components it runs:

* ``Horovod compile``  — uses a real Horovod build: ``cpu_horovod_env`` (the cpu-horovod environment,
  MPI + Gloo), ``twin`` (the site twin's Gloo-only build) or ``mpich_image`` (compiled inside an
  image against MPICH);
* ``multi-node Slurm`` — a test-cluster run (``multinode_cluster`` or the ``multinode`` marker);
* ``one-node Slurm``   — ``slurm_cluster`` or the ``slurm`` marker;
* ``images``           — ``envtool image`` or ``ch-run`` (fixtures ``image``, ``mpich_image``,
  ``image_dir``, ``ch_setup``, or the source runs ``"image"`` / ``ch-run``);
* ``Lmod``             — the ``lmod`` marker or fixture, a ``lmod`` parameter, the source naming
  ``LMOD_INIT``, or the twin (its module is Lmod's);
* ``Environment Modules`` — the ``envmodules`` fixture or parameter, or the source naming its tree;
* ``conda channel``    — a real conda channel built by the tests (``channel``, ``two_channels``,
  ``conda_env``, ``conda_spec``, ``twin``).

A count is of tests that use a component, not of builds (one build serves many tests), and a floor:
only the test function's own source is read, not the helpers it calls.

Usage (from the repository root; collection only, nothing runs)::

    python3 tests/coverage_table.py            # the Markdown table tests/README.md keeps
    python3 tests/coverage_table.py --json     # {module: {component: tests}}

Exit status 0; 2 when collection fails.
"""
from __future__ import annotations

import inspect
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest

COMPONENTS = ("Horovod compile", "multi-node Slurm", "one-node Slurm", "images", "Lmod", "Environment Modules",
              "conda channel")


def components(fixtures: set, markers: set, source: str, params: set = frozenset()) -> set:
    """The components one test exercises (see the module docstring); ``params``: the string values of
    its parametrisation (``lmod``, ``envmodules`` choose a module system)."""
    found = set()
    if fixtures & {"cpu_horovod_env", "twin", "mpich_image"}:
        found.add("Horovod compile")
    if "multinode_cluster" in fixtures or "multinode" in markers:
        found.add("multi-node Slurm")
    if "slurm_cluster" in fixtures or "slurm" in markers:
        found.add("one-node Slurm")
    if fixtures & {"image", "mpich_image", "image_dir", "mpich_image_dir", "ch_setup"} \
            or '"image"' in source or '"ch-run"' in source:
        found.add("images")
    if "lmod" in markers or fixtures & {"lmod", "twin"} or "LMOD_INIT" in source or "lmod" in params:
        found.add("Lmod")
    if "envmodules" in fixtures or "ENVMODULES_" in source or "envmodules" in params:
        found.add("Environment Modules")
    if fixtures & {"channel", "two_channels", "conda_env", "conda_spec", "twin"}:
        found.add("conda channel")
    return found


class _Collector:
    def __init__(self) -> None:
        self.table: dict = defaultdict(lambda: defaultdict(int))

    def pytest_collection_modifyitems(self, items):
        for item in items:
            fixtures = set(getattr(item, "fixturenames", ()))
            markers = {m.name for m in item.iter_markers()}
            try:
                source = inspect.getsource(item.function)
            except (OSError, TypeError, AttributeError):
                source = ""
            callspec = getattr(item, "callspec", None)
            params = {v for v in (callspec.params.values() if callspec else ()) if isinstance(v, str)}
            module = Path(str(item.fspath)).name
            self.table[module]["tests"] += 1
            for c in components(fixtures, markers, source, params):
                self.table[module][c] += 1


def collect(root: Path) -> dict:
    """``{module: {"tests": n, component: n, …}}`` for the tests under ``root/tests``."""
    collector = _Collector()
    os.environ.pop("PYTEST_ADDOPTS", None)  # .ci/run's --junitxml is for the run, not this collection
    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", str(root / "tests")], plugins=[collector])
    if code not in (0, 5):
        raise SystemExit(2)
    return {m: dict(v) for m, v in sorted(collector.table.items())}


def markdown(table: dict) -> str:
    """The table as Markdown: a row per module that exercises at least one component, and the totals."""
    head = "| module | tests | " + " | ".join(COMPONENTS) + " |"
    lines = [head, "|" + "---|" * (len(COMPONENTS) + 2)]
    totals = defaultdict(int)
    for module, row in table.items():
        for k, v in row.items():
            totals[k] += v
        if not any(row.get(c) for c in COMPONENTS):
            continue
        lines.append(f"| `{module}` | {row['tests']} | " + " | ".join(str(row.get(c, "")) for c in COMPONENTS) + " |")
    lines.append(f"| **all {len(table)} modules** | {totals['tests']} | "
                 + " | ".join(str(totals.get(c, 0)) for c in COMPONENTS) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))  # this checkout's envtool, whatever is installed
    table = collect(root)
    out = json.dumps(table, indent=1) if "--json" in argv else markdown(table)
    print("\n" + out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
