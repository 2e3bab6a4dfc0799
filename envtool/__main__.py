"""``python -m envtool``: the same entry point as the ``envtool`` console script."""
from envtool.cli.entry import entry

entry()
