"""No scheduler: a plain bash script run on this machine (one node), launching with the site's
template (``horovodrun -np {ranks} -H localhost:{ranks}`` for the ``local`` site).

``envtool validate --submit`` runs it directly with ``bash`` (a child process, killed on Ctrl-C).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from envtool.core.errors import UsageError

NAME = "local"
DIRECTIVE = None
LAUNCHER = "horovodrun"


def directives(req) -> List[Tuple[str, ...]]:
    """None; refuses more than one node.

    Raises:
        UsageError: ``--nodes`` above 1 for a site without a scheduler.
    """
    if req.layout.nodes != 1:
        raise UsageError(f"site {req.site.name} has no scheduler (scheduler: none in {req.site.path}): "
                         f"it runs on this machine only; use --nodes 1, not {req.layout.nodes}")
    return []


def launch_argv(req, layout, whole_job: bool = True) -> List[str]:
    """The site's launcher template for ``layout.ranks`` ranks."""
    from envtool.scheduler import launcher

    return launcher.for_site(req.site).argv(layout.ranks)


def submit_argv(script: str) -> List[str]:
    """``bash SCRIPT`` (run in the foreground)."""
    return ["bash", script]


def parse_job_id(text: str) -> Optional[str]:
    """No job ids: None."""
    return None


def cancel_argv(job_id: str) -> List[str]:
    """Nothing to call (the child process is killed)."""
    return []


def state(job_id: str) -> Tuple[str, str, Optional[int]]:
    """Not queued anywhere: ``("unknown", "local", None)``."""
    return "unknown", "local", None
