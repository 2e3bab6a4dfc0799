"""Rule ``no-main-guard``: spawn/forkserver used while a script runs code at module level unguarded."""
from __future__ import annotations

from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._loaders import start_methods


@rule
class NoMainGuard(Rule):
    """A program chooses the ``spawn`` or ``forkserver`` start method and one of its scripts (a
    module nothing imports) runs code at module level without ``if __name__ == "__main__":``.

    Why it matters at scale: spawn and forkserver start each worker by importing the main module
    again, so unguarded top-level code (the training itself) runs again in every DataLoader worker
    of every rank, or fails at start-up (Python's multiprocessing guidelines, "Safe importing of
    main module", https://docs.python.org/3/library/multiprocessing.html#multiprocessing-programming).
    """

    id = "no-main-guard"
    title = "spawn/forkserver without an if __name__ == \"__main__\": guard"
    sources = ("https://docs.python.org/3/library/multiprocessing.html#multiprocessing-programming",)
    order = 20
    fires_on = ("import multiprocessing as mp\nmp.set_start_method('spawn')\nprint('training')\n",)
    quiet_on = ("import multiprocessing as mp\n\ndef main():\n    mp.set_start_method('spawn')\n    "
                "print('training')\n\nif __name__ == '__main__':\n    main()\n",)

    def check(self, prog: Program) -> None:
        """Report each unguarded script of a program that spawns."""
        spawnish = [(c, m) for c, m, _ in start_methods(prog).uses if m in ("spawn", "forkserver") and c.dead_if is None]
        if not spawnish:
            return
        for m in prog.modules:
            if m.path in prog.imported or m.main_guard or m.first_toplevel_call is None:
                continue
            here = [c for c, _ in spawnish if c.module is m and c.func is None]
            line = here[0].node.lineno if here else m.first_toplevel_call
            c, method = spawnish[0]
            prog.add(m, line, self.id,
                     f"start method {method!r} ({c.module.shown}:{c.node.lineno}) re-imports the main module "
                     "in every worker, and this script runs code at module level without an "
                     "if __name__ == \"__main__\": guard", 'move the entry point under '
                     'if __name__ == "__main__":')
