"""The ``validate`` workflow: create's validate step, ``validate`` here and ``validate --submit``.

* :mod:`.create_step`: the ``validate`` step of ``create``'s plan (check-build, DataLoader, 2-rank
  Gloo allreduce, clean imports).
* :mod:`.here`: ``envtool validate`` on this machine, a plan of steps run by the one runner.
* :mod:`.job`: ``envtool validate --submit``: pre-flight, write script, submit, watch, collect, judge.
* :mod:`.reframe_export`: ``validate --export reframe``.

The checks both run are data: :mod:`envtool.validate.checks`.
"""
from envtool.steps.validate.create_step import ValidateData, format_report, import_modules, plan_steps

__all__ = ["ValidateData", "format_report", "import_modules", "plan_steps"]
