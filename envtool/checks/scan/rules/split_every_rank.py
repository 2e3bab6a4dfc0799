"""Rule ``unseeded-split``: a random train/validation split drawn on every rank without a common seed."""
from __future__ import annotations

import ast
from typing import Optional

from envtool.checks.scan.astutil import kwarg, last_name, rank_kind
from envtool.checks.scan.facts import CallSite
from envtool.checks.scan.program import Edit, Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule

#: torch.utils.data.random_split draws from the global generator unless given ``generator=``
#: (https://pytorch.org/docs/stable/data.html#torch.utils.data.random_split).
TORCH_SPLIT = "https://pytorch.org/docs/stable/data.html#torch.utils.data.random_split"
#: scikit-learn's train_test_split shuffles with ``random_state`` (None: a different split per process,
#: https://scikit-learn.org/stable/modules/generated/sklearn.model_selection.train_test_split.html).
SKLEARN_SPLIT = "https://scikit-learn.org/stable/modules/generated/sklearn.model_selection.train_test_split.html"
#: split call → the keyword that seeds it.
SPLITS = {"random_split": "generator", "train_test_split": "random_state"}
#: calls that seed the global generators (a constant seed makes random_split agree on every rank).
SEEDS = {"manual_seed", "seed", "seed_everything", "set_seed", "set_random_seed"}


@rule
class UnseededSplit(Rule):
    """``random_split(...)`` without ``generator=`` (and no global ``torch.manual_seed`` with one value on
    every rank), or ``train_test_split(...)`` without ``random_state``, reached on every rank.

    Why it matters at scale: each rank draws its own split, so one rank's training samples are another's
    validation samples: validation leaks into training and the scores mean nothing (PyTorch random_split,
    https://pytorch.org/docs/stable/data.html#torch.utils.data.random_split; scikit-learn train_test_split, https://scikit-learn.org/stable/modules/generated/sklearn.model_selection.train_test_split.html). Ships at ``warn``:
    its precision on the held-out corpus is 1.00 (docs/reference/scan-rules.md).
    """

    id = "unseeded-split"
    title = "random train/validation split drawn on every rank without a common seed"
    severity = "warn"
    sources = (TORCH_SPLIT, SKLEARN_SPLIT)
    mechanisms = ("random_split(..., generator=torch.Generator().manual_seed(S)); train_test_split(..., "
                  "random_state=S)",
                  "torch.manual_seed(S) / seed_everything(S) / np.random.seed(S) with S the same on every rank",
                  "the split made on one rank only (under a rank test)")
    order = 120
    fires_on = ("import torch\nimport torch.distributed as dist\nfrom torch.utils.data import random_split\n\n\n"
                "def main():\n    dist.init_process_group('gloo')\n    train, val = random_split(list(range(10)), [8, 2])\n\n\n"
                "if __name__ == '__main__':\n    main()\n",)
    quiet_on = (fires_on[0].replace("[8, 2])", "[8, 2], generator=torch.Generator().manual_seed(0))"),
                fires_on[0].replace("    train, val", "    torch.manual_seed(0)\n    train, val"))

    def applies(self, prog: Program) -> bool:
        """Programs with a distributed launch."""
        return prog.launch != "single"

    def _seeded_alike(self, prog: Program, c: CallSite) -> Optional[CallSite]:
        """A reached global seeding with one value on every rank (not built from the rank), else None."""
        numpy = last_name(c.node.func) == "train_test_split"
        for s in prog.calls:
            last = last_name(s.node.func)
            if last not in SEEDS or not s.node.args and not s.node.keywords:
                continue
            q = prog.qualname(s)
            if last == "seed" and not (q.startswith(("np.", "numpy.")) or ".random.seed" in q):
                continue
            if numpy and last == "manual_seed":
                continue
            if not any(rank_kind(a, s.module.rank_aliases) for a in list(s.node.args) + [k.value for k in s.node.keywords]):
                return s
        return None

    def check(self, prog: Program) -> None:
        """``unseeded-split``: a split with no seed of its own, reached on every rank."""
        for c in prog.calls:
            last = last_name(c.node.func)
            key = SPLITS.get(last)
            if key is None or prog.resolve(c) or prog.covered(c):
                continue
            given = kwarg(c.node, key)
            if given is not None and not (isinstance(given, ast.Constant) and given.value is None):
                continue
            if last == "random_split" and len(c.node.args) > 2:
                continue  # generator passed by position
            if self._seeded_alike(prog, c) is not None:
                continue
            seed = ("generator=torch.Generator().manual_seed(0)" if last == "random_split" else "random_state=0")
            prog.add(c.module, c.node.lineno, self.id,
                     f"{last}(...) draws a different split on each rank (no {key}= and no common seed): one rank's "
                     "validation samples are another's training samples",
                     f"give it a seed common to all ranks: {last}(..., {seed})", self.severity,
                     Edit.add_arg(c.module, c.node, seed))
