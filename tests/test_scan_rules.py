"""The scan's rule contract (issue 28): every registered rule has an id, a severity, a docstring
naming its public source, and examples it fires on and stays quiet on, checked with the real
scanner on real source text; a toy rule kept in the tests (tests/helpers/scan_toy_rule.py: one file,
one registration) passes the same contract and is run by the scanner like envtool's own rules."""
import importlib
import inspect
import re
import sys
import textwrap
from typing import Dict, List

import pytest

from envtool.checks import scan
from envtool.checks.scan import registry
from envtool.checks.scan.program import Program
from envtool.checks.scan.rule import LEVELS, Rule

_ID = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_SOURCE = re.compile(r"https://\S+|[\w.-]+/[\w.-]+@[\w.-]+:\S+|[\w.-]+@v?[\d.]+:\S+|[\w-]+/[\w-]+:\S+")


def contract_problems(rule: Rule) -> List[str]:
    """What ``rule`` lacks of the contract, one string per problem (empty: it passes)."""
    problems: List[str] = []
    if not isinstance(getattr(rule, "id", None), str) or not _ID.match(rule.id):
        problems.append(f"id {getattr(rule, 'id', None)!r} is not a lower-case dashed word")
    if getattr(rule, "severity", None) not in LEVELS:
        problems.append(f"severity {getattr(rule, 'severity', None)!r} not in {LEVELS}")
    if not getattr(rule, "title", ""):
        problems.append("no title")
    doc = inspect.getdoc(type(rule)) or ""
    if len(doc) < 80:
        problems.append("docstring missing or too short to say what it finds and why it matters")
    if not rule.sources:
        problems.append("no sources")
    if not _SOURCE.search(doc) or not any(s in doc for s in rule.sources):
        problems.append("the docstring cites none of its sources (a URL or repo@tag:path)")
    if not rule.fires_on:
        problems.append("no example it fires on")
    if not rule.quiet_on:
        problems.append("no example it stays quiet on")
    for i, text in enumerate(rule.fires_on):
        found = [x.rule for x in scan.scan_source(text, f"fires_{i}.py")]
        if rule.id not in found:
            problems.append(f"fires_on[{i}]: the scanner does not report {rule.id} (found {found})")
    for i, text in enumerate(rule.quiet_on):
        found = [x.rule for x in scan.scan_source(text, f"quiet_{i}.py")]
        if rule.id in found:
            problems.append(f"quiet_on[{i}]: the scanner reports {rule.id}")
    return problems


@pytest.mark.parametrize("rule", registry.all_rules(), ids=lambda r: r.id)
def test_every_registered_rule_passes_the_contract(rule):
    assert contract_problems(rule) == []


def test_one_rule_per_module_and_the_public_tables_follow_the_registry():
    rules = registry.all_rules()
    ids = [r.id for r in rules]
    assert len(ids) == len(set(ids))
    by_module: Dict[str, List[str]] = {}
    for r in rules:
        by_module.setdefault(type(r).__module__, []).append(r.id)
    assert {m: len(v) for m, v in by_module.items()} == {f"envtool.checks.scan.rules.{m}": 1 for m in registry.MODULES}
    assert list(scan.RULES) == ids
    assert set(scan.MECHANISMS) <= set(ids)
    # the rule ids the benchmark's truth file may use are exactly the registered ones (issue 26's set)
    assert {"dataloader-workers", "dead-supports-context", "fork-start-method", "no-main-guard", "lr-not-scaled",
            "no-broadcast", "checkpoint-all-ranks", "syntax", "hvd-init-missing", "hvd-init-late",
            "no-gpu-pinning", "optimizer-not-wrapped", "data-not-sharded", "checkpoint-local-rank",
            # issue 42's rules (info until their held-out precision is measured)
            "sampler-no-set-epoch", "unseeded-split", "log-all-ranks", "download-all-ranks"} == set(ids)


class _Quiet(Rule):
    """Reports nothing; its examples claim otherwise (https://example.org/nothing)."""

    id = "quiet-rule"
    title = "a rule that never fires"
    sources = ("https://example.org/nothing",)
    fires_on = ("print('hello')\n",)
    quiet_on = ("print('hello')\n",)

    def check(self, prog: Program) -> None:
        pass


def test_the_contract_fails_a_rule_that_does_not_fire_on_its_example():
    problems = contract_problems(_Quiet())
    assert any("fires_on[0]: the scanner does not report quiet-rule" in p for p in problems), problems
    assert any("docstring missing or too short" in p for p in problems), problems


def test_registry_refuses_a_second_rule_with_an_id_taken_and_a_bad_severity():
    class Twin(_Quiet):
        """Another rule with the id of envtool's no-broadcast rule."""

        id = "no-broadcast"

    class Loud(_Quiet):
        """A severity that is no level."""

        id = "loud-rule"
        severity = "error"

    with pytest.raises(ValueError, match="duplicate scan rule id 'no-broadcast'"):
        registry.rule(Twin)
    with pytest.raises(ValueError, match="severity 'error'"):
        registry.rule(Loud)
    assert "loud-rule" not in {r.id for r in registry.all_rules()}


@pytest.fixture
def toy_rule():
    """The toy rule of tests/helpers/scan_toy_rule.py, registered by importing its module (and
    removed again so that no other test sees it)."""
    sys.modules.pop("helpers.scan_toy_rule", None)
    module = importlib.import_module("helpers.scan_toy_rule")
    try:
        yield module.StrayBreakpoint
    finally:
        registry.unregister(module.StrayBreakpoint.id)
        sys.modules.pop("helpers.scan_toy_rule", None)


def test_a_new_rule_takes_one_file_and_one_registration(toy_rule, tmp_path):
    registered = {type(r): r for r in registry.all_rules()}
    assert toy_rule in registered
    assert contract_problems(registered[toy_rule]) == []
    # the scanner runs it on a project read from disk, with envtool's own rules, suppressions included
    (tmp_path / "train.py").write_text(textwrap.dedent('''\
        from helpers_of_mine import setup

        def main():
            setup()
            breakpoint()
            breakpoint()  # envtool: ignore[toy-stray-breakpoint]

        if __name__ == "__main__":
            main()
        '''))
    (tmp_path / "helpers_of_mine.py").write_text("def setup():\n    breakpoint()\n")
    report = scan.scan_project([tmp_path])
    found = sorted((i.path.rsplit("/", 1)[-1], i.line, i.rule) for i in report.issues)
    assert found == [("helpers_of_mine.py", 2, "toy-stray-breakpoint"), ("train.py", 5, "toy-stray-breakpoint")]
    assert [(i.line, i.rule) for i in report.suppressed] == [(6, "toy-stray-breakpoint")]


def test_the_toy_rule_is_gone_once_unregistered():
    assert "toy-stray-breakpoint" not in {r.id for r in registry.all_rules()}
    assert [i.rule for i in scan.scan_source("breakpoint()\n")] == []
