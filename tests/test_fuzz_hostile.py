"""Fuzz: generated hostile specs, names and prefixes through plan, show, modulefile and doctor.

Hypothesis builds spec documents (valid skeletons with hostile values: newlines, command
substitutions, ``..`` paths, control characters, huge or deeply nested values, anchors and
aliases) and hostile option values, and runs the real CLI on them. Every run must end with
exit 0 or 2 within its time bound, print no traceback and no "internal error", and create no
file outside its work directory (every hostile string that would create a file names a marker
inside a watched directory; that directory must stay empty).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conftest import REPO  # noqa: E402
from helpers.speed import scaled  # noqa: E402

#: Seconds one CLI run may take (start-up is ~0.4 s; a bounded error must come well within this).
BOUND = 30
WATCH = Path(os.environ.get("TMPDIR", "/tmp")) / f"envtool-fuzz-watch-{os.getpid()}"
WORK = Path(os.environ.get("TMPDIR", "/tmp")) / f"envtool-fuzz-work-{os.getpid()}"

_evil_atoms = [
    f"$(touch {WATCH}/cmdsub)", f"`touch {WATCH}/backtick`", f"; touch {WATCH}/semi", "\n", "\r", "\x1b[31m",
    "\x00", "../../escaped", "/etc/passwd", "'", '"', "\\", "*", "~", "-rf", "--force", "#", "%", "\t", " ",
    "é", "\u202e", "${HOME}", "a" * 300,
]
evil_text = st.lists(st.one_of(st.sampled_from(_evil_atoms), st.text(min_size=0, max_size=8)), min_size=1,
                     max_size=4).map("".join)
scalar = st.one_of(evil_text, st.integers(), st.booleans(), st.none(), st.floats(allow_nan=True))
value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(evil_text, inner, max_size=3)), max_leaves=8)

spec_doc = st.fixed_dictionaries(
    {"name": st.one_of(evil_text, st.just("fuzz"))},
    optional={
        "engine": st.one_of(st.sampled_from(["venv", "conda"]), evil_text),
        "channels": st.lists(evil_text, max_size=2),
        "packages": st.fixed_dictionaries({}, optional={"pip": st.lists(evil_text, max_size=2),
                                                        "conda": st.lists(evil_text, max_size=2)}),
        "env": st.dictionaries(evil_text, evil_text, max_size=2),
        "site": st.fixed_dictionaries({}, optional={"modules": st.lists(evil_text, max_size=2),
                                                    "base_env": evil_text, "env": st.dictionaries(evil_text, evil_text,
                                                                                                  max_size=2)}),
        "horovod": st.fixed_dictionaries({}, optional={"version": evil_text, "frameworks": st.lists(evil_text,
                                                                                                   max_size=2)}),
        "platforms": st.lists(evil_text, max_size=2),
        "summary": value,
        "extends": evil_text,
    })


def yaml_text(doc, tail: str) -> str:
    """The document as YAML, plus an optional hostile tail (anchors, nesting, junk)."""
    return yaml.safe_dump(doc, allow_unicode=True) + tail


hostile_tail = st.sampled_from([
    "",
    "x: &a [1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(f"y{i}: &a{i} [" + ", ".join(["*a" if i == 0 else f"*a{i - 1}"] * 8)
                                                 + "]\n" for i in range(7)),
    "deep: " + "[" * 3000 + "]" * 3000 + "\n",
    "bad: [\n",
    "\t- tab\n",
])


def run_cli(args, cwd: Path):
    env = dict(os.environ, PYTHONPATH=str(REPO), HOME=str(cwd), ENVTOOL_CACHE_DIR=str(cwd / "cache"),
               ENVTOOL_SPEC_PATH=str(cwd / "specs"))
    env.pop("ENVTOOL_DEBUG", None)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envtool", *map(str, args)], capture_output=True, text=True,
                          errors="replace", cwd=cwd, env=env, timeout=scaled(BOUND * 2))
    return proc, time.monotonic() - started


def check(proc, seconds, args):
    assert proc.returncode in (0, 2), (args, proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-2000:]
    assert seconds < scaled(BOUND), (args, seconds)
    assert len(proc.stderr) < 20_000  # values echoed in errors are capped
    assert list(WATCH.iterdir()) == [], list(WATCH.iterdir())


@pytest.fixture(scope="module")
def fuzz_env():
    """A work directory with a bare venv to point ``doctor``/``modulefile`` at."""
    WATCH.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "specs").mkdir(exist_ok=True)
    prefix = WORK / "venv"
    if not (prefix / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    outside_before = sorted(p.name for p in WORK.parent.iterdir() if p.name.startswith(("escaped", "fuzz")))
    yield WORK, prefix
    outside_after = sorted(p.name for p in WORK.parent.iterdir() if p.name.startswith(("escaped", "fuzz")))
    assert outside_after == outside_before
    assert list(WATCH.iterdir()) == []
    import shutil

    shutil.rmtree(WORK, ignore_errors=True)
    shutil.rmtree(WATCH, ignore_errors=True)


FUZZ = settings(max_examples=int(os.environ.get("ENVTOOL_FUZZ_EXAMPLES", "15")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
@FUZZ
@given(doc=spec_doc, tail=hostile_tail, command=st.sampled_from(["plan", "show"]))
def test_hostile_specs_through_plan_and_show(fuzz_env, doc, tail, command):
    work, _ = fuzz_env
    spec = work / "specs" / "fuzz.yaml"
    spec.write_text(yaml_text(doc, tail))
    args = [command, spec] + (["--prefix", work / "envs" / "p"] if command == "plan" else [])
    proc, seconds = run_cli(args, work)
    check(proc, seconds, args)
    assert not (work / "envs").exists()  # plan creates nothing


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
@FUZZ
@given(name=evil_text, prefix_tail=evil_text, module=evil_text)
def test_hostile_names_and_prefixes_through_modulefile_and_plan(fuzz_env, name, prefix_tail, module):
    work, venv = fuzz_env
    for args in (["modulefile", "--prefix", venv, "--root", work / "mods", "--name", module],
                 ["modulefile", "--prefix", str(work / "nope") + prefix_tail, "--root", work / "mods"],
                 ["plan", name, "--prefix", str(work / "envs") + "/" + prefix_tail],
                 ["show", name]):
        try:
            proc, seconds = run_cli(args, work)
        except ValueError:  # a NUL byte cannot even be passed to exec: nothing to test
            continue
        check(proc, seconds, args)
    # whatever modulefile wrote stays under its --root
    for p in (work / "mods").rglob("*") if (work / "mods").exists() else []:
        assert p.resolve().is_relative_to((work / "mods").resolve())


@FUZZ
@given(doc=spec_doc, timeout=st.sampled_from(["5", "-1", "0", "nan", "inf", "1e309", "x"]))
def test_hostile_specs_and_options_through_doctor(fuzz_env, doc, timeout):
    work, venv = fuzz_env
    spec = work / "specs" / "fuzz.yaml"
    spec.write_text(yaml_text(doc, ""))
    args = ["doctor", "--prefix", venv, "--spec", spec, "--only", "versions", "user-site",
            "--timeout", timeout]
    proc, seconds = run_cli(args, work)
    # doctor may also say "a check failed" (1) about a spec that loads: that is not a bad-input outcome
    if proc.returncode == 1:
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
        assert list(WATCH.iterdir()) == []
        return
    check(proc, seconds, args)
