"""A toy container runtime kept in the tests: proof that a new runtime is one implementation plus one
registration (``envtool.spec.registry.CONTAINER_RUNTIMES.register("toyrt", "helpers.toy_runtime:TOY")``).
Nothing here is run; it only writes the words of a run line."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple


class ToyRuntime:
    """``toyrun --flag=MODULE… --mount SRC:DST IMAGE argv…`` (made up; no such program exists)."""

    name = "toyrt"
    program = "toyrun"
    source = "tests/helpers/toy_runtime.py (a test-only toy)"
    modules: Optional[Tuple[str, ...]] = ("gpu",)
    path_image = True

    def words(self, modules: Sequence[str], image: str, binds: Sequence[Tuple[str, str]]) -> List[str]:
        """``toyrun [--flag=M…] [--mount S:D…] IMAGE``."""
        return ([self.program] + [f"--flag={m}" for m in modules]
                + [w for src, dst in binds for w in ("--mount", f"{src}:{dst}")] + [image])


TOY = ToyRuntime()
