"""The ``list`` and ``remove`` workflows (:mod:`.remove`): the environments envtool made, and their
removal (only what envtool's own record proves it made)."""
