"""A toy scheduler kept in the tests: one file plus one registration
(``envtool.spec.registry.register_scheduler("toy", "helpers.toy_scheduler")``) make it a scheduler
a site file can name (``scheduler: toy``), and it passes the same contract as the real ones
(tests/test_scheduler_contract.py).

It runs a job script as a background process of this machine: ``submit_argv`` starts it in its own
session and prints its process id (the job id); ``status_argv`` is ``ps -o pid=,stat= -p ID``
(procps ps(1): ``stat`` codes R running, S sleeping, D disk wait, T stopped, Z zombie);
``cancel_argv`` is ``kill ID``.
"""
from __future__ import annotations

import re
import subprocess
from typing import Dict, List, Optional, Tuple

from envtool.scheduler.model import JobRequest, JobState, SchedulerOutputError, output_error

NAME = "toy"
DIRECTIVE: Optional[str] = "#TOY"
DEFAULT_LAUNCHER: Optional[str] = None
SUBMIT_STDIN = False


def directives(req: JobRequest) -> List[Tuple[str, ...]]:
    """``#TOY nodes N``."""
    return [("nodes", str(req.layout.nodes))]


def submit_argv(script: str) -> List[str]:
    """``sh -c 'setsid sh SCRIPT & echo $!'``: start the script in the background, print its pid."""
    return ["sh", "-c", 'setsid sh "$1" >/dev/null 2>&1 </dev/null & echo "$!"', "toy-submit", script]


def parse_submit(stdout: str) -> str:
    """The process id the submit command printed.

    Raises:
        SchedulerOutputError: no line holding only digits.
    """
    m = re.search(r"^\s*(\d+)\s*$", stdout, re.M)
    if not m:
        raise output_error("toy submit", "a process id", stdout)
    return m.group(1)


def status_argv(job_id: str) -> List[str]:
    """``ps -o pid=,stat= -p ID``."""
    return ["ps", "-o", "pid=,stat=", "-p", str(job_id)]


def parse_status(stdout: str) -> Dict[str, JobState]:
    """Process id → :class:`JobState` from ``ps -o pid=,stat=`` lines (Z: done; else running).

    Raises:
        SchedulerOutputError: a line that is not ``PID STAT``.
    """
    out: Dict[str, JobState] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        m = re.fullmatch(r"\s*(\d+)\s+([A-Za-z<+ls]+)\s*", line)
        if not m:
            raise output_error("ps -o pid=,stat=", "lines of a process id and a state (1234 S)", stdout)
        st = m.group(2)
        out[m.group(1)] = JobState("done" if st.startswith("Z") else "running", st)
    return out


def state(job_id: str) -> JobState:
    """The job's :class:`JobState`: ``done`` (state ``gone``) once ps no longer lists it."""
    try:
        proc = subprocess.run(status_argv(job_id), capture_output=True, text=True, timeout=30)
        found = parse_status(proc.stdout)
    except (OSError, subprocess.TimeoutExpired, SchedulerOutputError):
        return JobState("unknown", "?")
    return found.get(str(job_id), JobState("done", "gone"))


def cancel_argv(job_id: str) -> List[str]:
    """``kill ID``."""
    return ["kill", str(job_id)]
