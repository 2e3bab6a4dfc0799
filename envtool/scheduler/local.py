"""No scheduler: a plain bash script run on this machine (one node), launching with the site's
template (``horovodrun -np {ranks} -H localhost:{ranks}`` for the ``local`` site).

``envtool validate --submit`` runs it directly with ``bash`` (a child process, killed on Ctrl-C).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from envtool.core.errors import UsageError
from envtool.scheduler.model import Capabilities, JobRequest, JobState, output_error

NAME = "local"
DIRECTIVE: Optional[str] = None
#: None: job scripts use the site's ``launcher`` template as written (horovodrun on localhost)
DEFAULT_LAUNCHER: Optional[str] = None
SUBMIT_STDIN = False
#: the job script runs here, as a child process; nothing is queued
CAPABILITIES = Capabilities(submits=False)


def directives(req: JobRequest) -> List[Tuple[str, ...]]:
    """None; refuses more than one node.

    Raises:
        UsageError: ``--nodes`` above 1 for a site without a scheduler.
    """
    site = req.site
    if req.layout.nodes != 1:
        raise UsageError(f"site {site.name} has no scheduler (scheduler: none in {site.path}): "
                         f"it runs on this machine only; use --nodes 1, not {req.layout.nodes}")
    return []


def submit_argv(script: str) -> List[str]:
    """``bash SCRIPT`` (run in the foreground)."""
    return ["bash", script]


def parse_submit(stdout: str) -> str:
    """A local run has no job id.

    Raises:
        SchedulerOutputError: always (``validate --submit`` runs the script as a child instead).
    """
    raise output_error("bash SCRIPT", "nothing to parse: a run without a scheduler has no job id", stdout)


def status_argv(job_id: str) -> List[str]:
    """Nothing to call: []."""
    return []


def parse_status(stdout: str) -> Dict[str, JobState]:
    """No queue to read: {}."""
    return {}


def cancel_argv(job_id: str) -> List[str]:
    """Nothing to call (the child process is killed)."""
    return []


def state(job_id: str) -> JobState:
    """Not queued anywhere: ``JobState("unknown", "local")``."""
    return JobState("unknown", "local")
