"""``python -m envtool``: the same entry point as the ``envtool`` console script."""
from envtool.cli.main import main

raise SystemExit(main())
