"""The ``create`` workflow (also ``plan`` and ``clone``): :mod:`.planner` composes the plan of typed
steps for a spec and a target (:mod:`.from_lock`, :mod:`.horovod_build`, :mod:`.lock_step`,
:mod:`.modulefile_step`, :mod:`.clone` make their steps), :mod:`.workflow` runs it with the kernel's
Runner into a temporary prefix and renames it into place.
"""
