"""Engines: how an environment is created, cloned and filled (venv/pip, conda via py-rattler or
an external conda/mamba/micromamba), behind the interface of :mod:`envtool.engines.base` and
looked up in :mod:`envtool.engines.registry`.

The built-in engine modules are imported here, once; each registers itself at its
end (``--help`` lists them in registration order). A new engine is one module plus its import here.
"""
from envtool.engines import rattler, external, venv  # noqa: F401,I001  (imported to register the engines)
