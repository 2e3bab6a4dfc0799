#!/usr/bin/env python3
"""Benchmark: where a test-suite run's time goes, against CI's budget (issue 37).

Reads the JUnit XML of one pytest run (``--junitxml``; `.ci/run` writes one under CI=true) and
prints:

* the whole run's wall time against the budget (default 40 min = 2400 s), and the machine's load
  average when the summary was made;
* time per phase:

  - ``set-up``     — from ``--started`` (the epoch second `.ci/run` began) to pytest's start
    (the XML's ``timestamp``): ``scripts/setup.sh --test`` (system packages, envtool, the test extra);
  - ``builds``     — the set-up phase of one-node tests (fixtures: environments, images, the twin,
    conda channels, one-node Slurm);
  - ``one-node``   — the call and teardown phases of one-node tests;
  - ``multi-node`` — every phase of tests marked ``multinode`` (cluster start included);

  Phases come from the per-phase durations ``tests/conftest.py`` records as JUnit properties
  (``setup_s``, ``call_s``, ``teardown_s``, ``markers``), with the CPU seconds pytest and the
  children it waited for used (``setup_cpu_s``, ``cpu_s``; daemons such as Slurm's are not in
  them, and the cpu-horovod build the suite starts in a background thread is charged to whichever
  test runs when it ends: CPU figures are rough per test, right in total); an XML without them (an older run) counts
  each test's whole time as ``one-node``. The phase sums are test-seconds: where tests run in
  parallel (pytest-xdist) they add up to more than the wall time, and the ratio says how much;
* the slowest items (``--top``, default 25): a test, or a fixture's set-up when that is what took
  the time.

Usage::

    python3 benchmarks/bench_suite.py JUNIT.xml [--started EPOCH] [--budget 2400] [--top 25] [--json]

Exit status: 0 when the wall time is within the budget, 1 when over it, 2 for a missing or
unreadable file.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional, Tuple


def _props(case: ET.Element) -> Dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


def _suite(root: ET.Element) -> ET.Element:
    if root.tag == "testsuite":
        return root
    suite = root.find("testsuite")
    if suite is None:
        raise ValueError("no <testsuite> element")
    return suite


def summarise(path: Path, started: Optional[float] = None, budget: float = 2400.0, top: int = 25,
              ended: Optional[float] = None) -> dict:
    """The summary of one JUnit XML run.

    Args:
        path: the JUnit XML file pytest wrote (``--junitxml``).
        started: epoch seconds when the whole run (set-up included) began; None: the set-up phase is
            unknown and the wall time is pytest's own.
        budget: the budget in seconds for the whole run.
        top: how many slowest items to list.
        ended: epoch seconds when the run ended (default: pytest's start plus its duration).
    Returns:
        ``{"wall_s", "pytest_s", "budget_s", "within_budget", "phases": {name: seconds},
        "test_seconds", "parallelism", "counts": {outcome: n}, "slowest": [{"name", "phase", "s"}],
        "workers": {worker: {"tests", "busy_s", "first_s", "last_s"}} (seconds since pytest's start;
        from the ``started``/``worker`` properties, empty for runs that lack them),
        "load": [1, 5, 15 min]}``; seconds are floats.
    Raises:
        OSError: the file cannot be read.
        ValueError: it is not a JUnit XML of pytest (``xml.etree.ElementTree.ParseError`` included).
    """
    root = ET.parse(path).getroot()
    suite = _suite(root)
    pytest_s = float(suite.get("time", "0"))
    stamp = suite.get("timestamp")
    t0 = datetime.fromisoformat(stamp).timestamp() if stamp else None
    phases = {"set-up": 0.0, "builds": 0.0, "one-node": 0.0, "multi-node": 0.0}
    cpu = {"set-up": None, "builds": 0.0, "one-node": 0.0, "multi-node": 0.0}
    if started is not None and t0 is not None:
        phases["set-up"] = max(0.0, t0 - started)
    counts: Dict[str, int] = {}
    items: List[Tuple[float, str, str]] = []
    workers: Dict[str, Dict[str, float]] = {}
    for case in suite.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = tag
                break
        counts[outcome] = counts.get(outcome, 0) + 1
        total = float(case.get("time", "0"))
        props = _props(case)
        if "setup_s" in props:
            setup, call, down = (float(props.get(k, "0")) for k in ("setup_s", "call_s", "teardown_s"))
            multinode = "multinode" in props.get("markers", "").split(",")
        else:
            setup, call, down, multinode = 0.0, total, 0.0, False
        setup_cpu, run_cpu = float(props.get("setup_cpu_s", "0")), float(props.get("cpu_s", "0"))
        if "worker" in props and float(props.get("started", "0")) > 0:
            w = workers.setdefault(props["worker"], {"tests": 0, "busy_s": 0.0, "first": float("inf"), "last": 0.0})
            begin = float(props["started"])
            w["tests"] += 1
            w["busy_s"] += setup + call + down
            w["first"], w["last"] = min(w["first"], begin), max(w["last"], begin + setup + call + down)
        if multinode:
            phases["multi-node"] += setup + call + down
            cpu["multi-node"] += setup_cpu + run_cpu
        else:
            phases["builds"] += setup
            phases["one-node"] += call + down
            cpu["builds"] += setup_cpu
            cpu["one-node"] += run_cpu
        if setup >= call and setup > 1.0:
            items.append((setup, name, "set-up"))
            if call + down > 1.0:
                items.append((call + down, name, "call"))
        else:
            items.append((setup + call + down, name, "test"))
    items.sort(reverse=True)
    test_seconds = phases["builds"] + phases["one-node"] + phases["multi-node"]
    if ended is None and t0 is not None:
        ended = t0 + pytest_s
    wall = (ended - started) if (started is not None and ended is not None) else pytest_s + phases["set-up"]
    return {"file": str(path), "wall_s": wall, "pytest_s": pytest_s, "budget_s": budget,
            "within_budget": wall <= budget, "phases": phases, "cpu_seconds": cpu, "test_seconds": test_seconds,
            "parallelism": (test_seconds / pytest_s) if pytest_s else 0.0, "counts": counts,
            "slowest": [{"name": n, "phase": ph, "s": s} for s, n, ph in items[:top]],
            "workers": {name: {"tests": int(w["tests"]), "busy_s": w["busy_s"],
                               "first_s": (w["first"] - t0) if t0 is not None else None,
                               "last_s": (w["last"] - t0) if t0 is not None else None}
                        for name, w in sorted(workers.items())},
            "load": list(os.getloadavg())}


def _mmss(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def render(summary: dict) -> str:
    """The summary as lines for a terminal (what `.ci/run` prints at its end)."""
    s = summary
    verdict = "within" if s["within_budget"] else "OVER"
    lines = [f"suite: {_mmss(s['wall_s'])} ({s['wall_s']:.0f} s) of the {_mmss(s['budget_s'])} budget "
             f"({s['wall_s'] / s['budget_s']:.2f}x, {verdict}); pytest {s['pytest_s']:.0f} s; "
             f"load {' '.join(f'{x:.2f}' for x in s['load'])}",
             "  " + ", ".join(f"{k} {v}" for k, v in sorted(s["counts"].items())),
             "phase        seconds   share   CPU seconds"]
    denom = s["phases"]["set-up"] + s["test_seconds"] or 1.0
    for name, sec in s["phases"].items():
        c = s["cpu_seconds"].get(name)
        lines.append(f"{name:<11} {sec:8.0f}   {sec / denom:5.1%}   {'-' if c is None else f'{c:8.0f}'}")
    lines.append(f"(test-seconds {s['test_seconds']:.0f} over {s['pytest_s']:.0f} s of pytest: "
                 f"{s['parallelism']:.2f} at a time)")
    for name, w in s.get("workers", {}).items():   # runs before the start times were recorded have none
        span = "" if w["first_s"] is None else f", from {w['first_s']:.0f} s to {w['last_s']:.0f} s of pytest"
        lines.append(f"worker {name}: {w['tests']} tests, {w['busy_s']:.0f} s in tests{span}")
    lines.append(f"slowest {len(s['slowest'])}:")
    for item in s["slowest"]:
        lines.append(f"  {item['s']:7.1f} s  {item['phase']:<6} {item['name']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("junit", type=Path, help="the JUnit XML of the run (pytest --junitxml)")
    ap.add_argument("--started", type=float, default=None,
                    help="epoch seconds when the run began (set-up included); .ci/run passes it")
    ap.add_argument("--ended", type=float, default=None, help="epoch seconds when it ended (default: pytest's end)")
    ap.add_argument("--budget", type=float, default=2400.0, help="seconds (default 2400: 40 minutes)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        summary = summarise(args.junit, args.started, args.budget, args.top, args.ended)
    except (OSError, ValueError, ET.ParseError) as exc:
        print(f"bench_suite: {args.junit}: not a readable JUnit XML ({exc})", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1) if args.json else render(summary))
    return 0 if summary["within_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())
