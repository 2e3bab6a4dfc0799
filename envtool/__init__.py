"""envtool: provision distributed deep-learning environments on HPC systems.

Layers (one sub-package each): ``spec`` (the spec model and catalog), ``engines``
(venv/pip, conda), ``horovod`` (build flags, fix rules, wheel cache, check-build parsing),
``steps`` (the planner and the executor), ``validate`` (probes run inside an environment),
``cli`` (the command line, a thin layer over the rest).
"""

__version__ = "0.1.0"
