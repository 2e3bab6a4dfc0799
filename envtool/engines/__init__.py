"""Engines: how an environment is created, cloned and filled (venv/pip, conda via py-rattler or
an external conda/mamba/micromamba), behind the interface of :mod:`envtool.engines.base` and
looked up in :mod:`envtool.engines.registry`.

Importing this package imports no engine: :mod:`envtool.engines.registry` names the built-in
engines as ``module:attribute`` strings (``--help`` lists them in that order) and imports an
engine's module when the engine is first used. A new engine is one module plus one line there
(or, outside envtool, one ``engine.NAME`` entry point in the ``envtool.plugins`` group).
"""
