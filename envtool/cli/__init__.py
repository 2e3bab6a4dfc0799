"""The command line: a thin layer over the spec, engine, step and check layers.

One module per command (``envtool/cli/<command>.py``) with ``register(subparsers)``; each sets
``func(args) -> int`` on its parser. Heavy libraries are imported inside ``func``, never at
module level, so ``envtool --help`` stays fast.
"""
