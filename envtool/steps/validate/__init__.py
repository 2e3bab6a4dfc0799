"""The ``validate`` workflow: create's validate step, ``validate`` here and ``validate --submit``.

* :mod:`.here`: ``envtool validate`` on this machine, a plan of steps run by the one runner.
* :mod:`.job`: ``envtool validate --submit``: pre-flight, write script, submit, watch, collect, judge.
* :mod:`.reframe_export`: ``validate --export reframe``.

The checks both run are data: :mod:`envtool.validate.checks`.
"""
