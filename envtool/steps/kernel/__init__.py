"""The workflow kernel: what every command that changes the machine runs on.

* :mod:`.runner` — the one :class:`~envtool.steps.kernel.runner.Runner`: runs a plan's typed steps
  (:class:`envtool.core.plan.Step`) in order, writes the build log, shows progress, records each
  step's result and cleans up on failure or interrupt;
* :mod:`.transaction` — build into a temporary sibling and rename into place (all or nothing);
* :mod:`.aside` — what proves a directory beside a prefix a dead envtool run's (the one test
  ``create``'s sweep and ``remove`` apply before deleting);
* :mod:`.machine` — the facts planning needs about this machine, probed once, up front, so that
  composing a plan does no I/O;
* :mod:`.progress` — progress lines that fit the terminal;
* :mod:`.relocate` — rewrite a prefix inside a moved environment (create, clone, pack).

The workflow packages beside it (:mod:`envtool.steps.create`, :mod:`~envtool.steps.validate`,
:mod:`~envtool.steps.image`, :mod:`~envtool.steps.pack`, :mod:`~envtool.steps.publish`,
:mod:`~envtool.steps.jobscript`, :mod:`~envtool.steps.lifecycle`) compose plans; the kernel imports
none of them (an import-linter contract in ``pyproject.toml``).
"""
