"""Engines: how an environment is created, cloned and filled (venv/pip, conda via py-rattler or
an external conda/mamba/micromamba), behind the small interface of :mod:`envtool.engines.base`."""
