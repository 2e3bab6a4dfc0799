"""The ``jobscript`` step: a batch script for a site's scheduler, from an environment (a prefix or
a module) and a layout. Composes :mod:`envtool.scheduler` (directives, launcher) with the spec and
site file (modules, runtime variables, start method).

What goes in, in order: the site's directives for the layout; ``cd`` to the working directory;
``module use``/``module load`` of the site's modules, the stack's, then the environment's own
module; the environment's activation (for ``--prefix``); the variables — ``OMP_NUM_THREADS``
from the CPUs per rank, then the interface variables of the site's ``batch.interface``
(:data:`envtool.scheduler.model.INTERFACE_VARIABLES`, each with a comment naming the file), the
site's ``fabric`` variables that apply to the node count and loaded modules (those its module sets are a
comment, not exported), the site's ``env``, its ``batch.env``, the spec's ``env`` (a later one wins), and
``ENVTOOL_START_METHOD`` where the spec expects a DataLoader start method; then the launcher lines.

The package: :mod:`~envtool.steps.jobscript.target` (the site, spec, modules and variables),
:mod:`~envtool.steps.jobscript.staged` (``--stage``: the node-local copy of a pack),
:mod:`~envtool.steps.jobscript.container_run` (``--image``: ranks in an image through the site's
container runtime; also what ``validate --image`` runs), :mod:`~envtool.steps.jobscript.request`
(the request and the script), :mod:`~envtool.steps.jobscript.workflow` (the command as a plan of
steps run by the one runner).
"""
from __future__ import annotations

from envtool.steps.jobscript.request import build_request, gpu_mismatch, render
from envtool.steps.jobscript.staged import resolve_staged
from envtool.steps.jobscript.target import Target, job_env, resolve_target, spec_of_prefix

__all__ = ["Target", "build_request", "gpu_mismatch", "job_env", "render", "resolve_staged", "resolve_target",
           "spec_of_prefix"]
