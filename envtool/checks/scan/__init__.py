"""Static scan of training scripts (``doctor --script``): Python ``ast``, nothing is executed.

The scan reads a *project*, not one file: the files and directories given, plus the local
modules they import (modules beside a script, the package it belongs to, relative imports).
Files joined by imports form one *component*; facts are gathered across a component (a
broadcast in ``train.py`` satisfies ``main.py``). Calls between functions of a component are
followed: a checkpoint write inside a helper is judged at the helper's call sites, a learning
rate that arrives as a parameter is judged at the call that passes it, and ``**kwargs`` built
from dict literals are resolved.

Rules (ids in :data:`RULES`; one module each under ``rules/``, see :mod:`envtool.checks.scan.rule`),
from OLCF's Summit WML-CE page ("Problems Distributing Pytorch with
Multiple Data Loader Workers", https://docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html),
Horovod's usage steps (https://horovod.readthedocs.io/en/v0.28.1/pytorch.html) and the seven steps
of ALCF's "Distributed Deep Learning" tutorial (https://github.com/argonne-lcf/sdl_ai_workshop:
init, pin GPU, scale the learning rate, distributed optimizer, broadcast,
checkpoint on rank 0, shard the data); the mechanisms that satisfy each rule are listed in
:data:`MECHANISMS`:

* ``dataloader-workers``: ``DataLoader(…)`` with ``num_workers`` > 0 and no
  ``multiprocessing_context`` (and no ``set_start_method("forkserver"|"spawn")``): workers
  are forked, the Linux default before Python 3.14. When the context is set only under the
  ``mp._supports_context`` guard of Horovod's examples (PR #1824), the guard is named as the
  reason: ``torch.multiprocessing`` has no ``_supports_context`` any more, the guard is
  always false;
* ``dead-supports-context``: that guard where no ``DataLoader`` of the project depends on it;
* ``fork-start-method``: ``set_start_method("fork")``, ``get_context("fork")`` or
  ``multiprocessing_context="fork"``;
* ``no-main-guard``: spawn/forkserver is used and an entry script runs code at module level
  without ``if __name__ == "__main__":`` (workers re-import the main module);
* ``lr-not-scaled``: an optimizer's learning rate does not involve ``hvd.size()`` (step 3);
  ``hvd.local_size()`` is reported; Adam-family optimizers give ``info``; ``OneCycleLR``/``CyclicLR``
  ``max_lr`` is judged too;
* ``no-broadcast``: Horovod is used and nothing broadcasts the initial state (step 5);
* ``checkpoint-all-ranks``: a checkpoint write reached without a rank test (step 6);
* ``checkpoint-local-rank``: a checkpoint or log write under a local-rank test only (once per node);
* ``hvd-init-missing`` / ``hvd-init-late``: no ``hvd.init()``, or a Horovod call before it (step 1);
* ``no-gpu-pinning``: CUDA used and no GPU chosen from the local rank (step 2);
* ``optimizer-not-wrapped``: no DistributedOptimizer/DistributedGradientTape/DDP (step 4);
* ``data-not-sharded``: no sampler and nothing sharding the data by rank (ALCF step 7).

Program scope: the scan starts from entry points (files named, ``--entry``, files with a
``__main__`` guard, then modules nothing else reaches), follows imports from each, and judges
each program alone with only the functions its entry point can reach. Launch: each program's
launch (a key of :data:`LAUNCHES`) is decided from its code (or ``--launch``); the MPI rules
(forked workers, fork, the dead guard) hold for Horovod/MPI only, the Horovod rules for Horovod,
and a subset (checkpoint, pinning, wrapping, sharding) for torch.distributed programs that call
``init_process_group``. Documentation: ``docs/script-checks.md``.

Every issue has a ``level``: ``warn`` when the scan resolved the values it judged,
``info`` when it could not (a value it cannot see, such as a parameter with no call site).
The Horovod rules apply to components that import a Horovod framework binding
(``horovod.torch``, ``horovod.tensorflow``, ``horovod.keras``, ``horovod.mxnet``,
``horovod.spark.*``, ``horovod.ray``). Time and memory are linear in the size of the sources.

Layout: :mod:`~envtool.checks.scan.loader` reads the project, :mod:`~envtool.checks.scan.facts`
records each file's facts in one pass, :mod:`~envtool.checks.scan.program` (the resolver) answers
what names and values refer to, :mod:`~envtool.checks.scan.project` runs every rule registered in
:mod:`~envtool.checks.scan.registry` on every program, :mod:`~envtool.checks.scan.model` holds the
result types. Adding a rule: one module in ``rules/`` plus its name in
:data:`envtool.checks.scan.registry.MODULES`.
"""
from __future__ import annotations

from typing import Dict, Tuple

from envtool.checks.scan.api import scan_paths, scan_project, scan_source
from envtool.checks.scan.astutil import dotted
from envtool.checks.scan.loader import load_project
from envtool.checks.scan.model import LAUNCHES, Limits, ScanIssue, ScanReport
from envtool.checks.scan.registry import all_rules

#: rule id → one-line description (from the registered rules).
RULES: Dict[str, str] = {r.id: r.title for r in all_rules()}

#: rule id → the mechanisms that satisfy it (what the scan recognises), with their sources;
#: rules whose title says it all have none.
MECHANISMS: Dict[str, Tuple[str, ...]] = {r.id: r.mechanisms for r in all_rules() if r.mechanisms}

__all__ = ["LAUNCHES", "MECHANISMS", "RULES", "Limits", "ScanIssue", "ScanReport", "dotted", "load_project",
           "scan_paths", "scan_project", "scan_source"]
