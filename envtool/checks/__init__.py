"""``envtool doctor``'s checks: small independent units that each say whether one aspect of a
deep-learning environment will work at scale, and how to fix it.

Modelled on conda's health-check plugins (``conda doctor``): every check has an ``id``, a
``title``, a ``run(ctx) -> Finding`` function and a ``fix`` hint, and is registered in
:mod:`envtool.checks.registry`. :func:`envtool.checks.runner.run_checks` runs the selected
checks in a thread pool; the expensive environment probes (``horovodrun --check-build``, one
interpreter probe, one DataLoader probe) are started once, concurrently, and shared.

Modules:
    model: :class:`~envtool.checks.model.Finding`, :class:`~envtool.checks.model.Check`,
        :class:`~envtool.checks.model.Context` (plain data and the shared probe cache).
    registry: the check registry.
    runner: parallel execution.
    envprobe: the subprocess probes run with the environment's own interpreter.
    scan: the static ``--script`` scan (``ast``, no execution).
    versions, horovod_build, start_method, script, launchers, gpu, hygiene, runtime: the checks.
"""
from envtool.checks.model import STATUSES, Check, Context, Finding

__all__ = ["STATUSES", "Check", "Context", "Finding"]
