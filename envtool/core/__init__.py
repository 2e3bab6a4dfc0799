"""The core layer: what every other layer of envtool may use, and which uses none of them.

* :mod:`envtool.core.errors` — the exception classes and their exit statuses;
* :mod:`envtool.core.platforms` — conda platforms and interpreter identity;
* :mod:`envtool.core.plan` — the plan model (``PlanOptions``, ``Step``, ``Plan``): plain data;
* :mod:`envtool.core.prefix` — the one reader of an environment prefix (conda records, pip
  distributions);
* :mod:`envtool.core.frameworks` — the one table of deep-learning frameworks and their names;
* :mod:`envtool.core.paths` — envtool's cache directories;
* :mod:`envtool.core.procs` — child processes in their own process groups, killed as a group.

The spec model (:mod:`envtool.spec`) sits beside the core: it imports only the core.
"""
