"""Every bad input a clear exit 2, bounded; every printed command safe to paste (issue 12).

Each test feeds the real CLI a file or option of one class of bad input and checks the exit
status, that the message names the file/field, and that nothing ran or escaped.
"""
from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from conftest import run_envtool as _run_envtool
from helpers.speed import scaled


def run_envtool(*args, env=None, cwd=None, timeout=None):
    """The real CLI of this checkout, also when run from another directory (``cwd``)."""
    return _run_envtool(*args, env=dict(env or {}, PYTHONPATH=str(REPO)), cwd=cwd,
                        timeout=scaled(600) if timeout is None else timeout)

PWN = "touch {marker}"


def write(path: Path, text) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def assert_usage_error(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    for w in words:
        assert w in proc.stderr, (w, proc.stderr)


# ----------------------------------------------------------------------------- names at input
@pytest.mark.parametrize("body, words", [
    ("name: ../../escaped\nengine: venv\n", ["name:", "../../escaped"]),
    ("name: ok\nenv:\n  \"touchme\\n\": x\n", ["env:", "touchme"]),
    ("name: ok\nsite:\n  modules: [\"gcc\\n$(touch /tmp/x)\"]\n", ["site.modules"]),
    ("name: ok\nenv:\n  FOO: \"a\\nb\"\n", ["env.FOO"]),
    ("name: ok\nsite:\n  base_env: \"/opt/env\\n\"\n", ["site.base_env"]),
])
def test_names_that_cannot_be_valid_are_refused(tmp_path, body, words):
    spec = write(tmp_path / "s.yaml", body)
    for cmd in ("plan", "show"):
        proc = run_envtool(cmd, spec, "--prefix" if cmd == "plan" else "--json", *([tmp_path / "e"] if cmd == "plan" else []),
                           cwd=tmp_path)
        assert_usage_error(proc, str(spec), *words)
    assert not (tmp_path.parent / "escaped").exists() and not (tmp_path / "envs").exists()


def test_spec_name_never_becomes_a_path_outside_envs(tmp_path):
    spec = write(tmp_path / "s.yaml", "name: ../../escaped\nengine: venv\n")
    proc = run_envtool("create", spec, cwd=tmp_path, env={"ENVTOOL_CACHE_DIR": str(tmp_path / "cache")})
    assert_usage_error(proc, "name")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


@pytest.mark.parametrize("args", [
    ["create", "cpu-horovod", "--prefix", "/tmp/x\ny"],
    ["plan", "cpu-horovod", "--prefix", "/tmp/x\ty"],
    ["modulefile", "--prefix", "/tmp", "--name", "foo/1\n"],
    ["doctor", "--prefix", "/usr\n"],
    ["clone", "/tmp", "--prefix", "/tmp/a\x1bb"],
    ["doctor", "--timeout", "-1"],
    ["doctor", "--timeout", "0"],
    ["doctor", "--timeout", "nan"],
    ["plan", "cpu-horovod", "--jobs", "0"],
])
def test_bad_options_are_usage_errors(tmp_path, args):
    proc = run_envtool(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_module_name_with_trailing_newline_is_refused(tmp_path):
    # ``$`` in a regex matches before a trailing newline; names are checked with fullmatch
    from envtool.modules import parse_module_name

    with pytest.raises(Exception) as info:
        parse_module_name("foo/1\n")
    assert getattr(info.value, "exit_status", None) == 2


# ----------------------------------------------------------------------------- bounded YAML
def test_non_utf8_spec_and_site_name_the_file(tmp_path):
    spec = write(tmp_path / "bin.yaml", b"name: bin\nsummary: caf\xe9\n")
    assert_usage_error(run_envtool("plan", spec, cwd=tmp_path), str(spec), "UTF-8")
    site = write(tmp_path / "site.yaml", b"name: s\nmodules: [caf\xe9]\n")
    ok = write(tmp_path / "ok.yaml", "name: ok\nengine: venv\n")
    assert_usage_error(run_envtool("plan", ok, "--site-file", site, cwd=tmp_path), str(site), "UTF-8")


BOMB = "name: bomb\n" + "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 8)) + \
    "platforms: [" + ", ".join(["*a7"] * 9) + "]\n"


@pytest.mark.parametrize("name, body, word", [
    ("bomb", BOMB, "aliases"),
    ("deep", "name: deep\nplatforms: " + "[" * 5000 + "]" * 5000 + "\n", "nesting"),
    ("big", "name: big\nsummary: " + "x" * (10 << 20) + "\n", "bytes"),
], ids=["alias-bomb", "deep", "10MB"])
def test_hostile_yaml_is_refused_quickly_and_briefly(tmp_path, name, body, word):
    spec = write(tmp_path / f"{name}.yaml", body)
    started = time.monotonic()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "envtool", "plan", str(spec)],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, timeout=scaled(60))
    seconds = time.monotonic() - started
    peak_kb = int(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 2, proc.stderr
    assert word in proc.stderr and str(spec) in proc.stderr
    assert len(proc.stderr) < 2000          # no multi-megabyte echo
    assert seconds < scaled(20) and peak_kb < 200_000, (seconds, peak_kb)


def test_long_values_are_cut_in_messages(tmp_path):
    spec = write(tmp_path / "s.yaml", "name: s\nengine: " + "y" * 100_000 + "\n")
    proc = run_envtool("plan", spec, cwd=tmp_path)
    assert_usage_error(proc, "engine")
    assert len(proc.stderr) < 2000


def test_one_bad_file_does_not_break_the_catalog(tmp_path):
    specs = tmp_path / "specs"
    write(specs / "good-one.yaml", "name: good-one\nengine: venv\nsummary: fine\n")
    write(specs / "bad.yaml", b"name: bad\nsummary: caf\xe9\n")
    proc = run_envtool("specs", env={"ENVTOOL_SPEC_PATH": str(specs)})
    assert proc.returncode == 2
    assert "good-one" in proc.stdout and "cpu-horovod" in proc.stdout
    assert str(specs / "bad.yaml") in proc.stderr and "Traceback" not in proc.stderr


def test_gpu_build_without_a_framework_is_refused(tmp_path):
    spec = write(tmp_path / "g.yaml", "name: g\nengine: venv\ncuda: '12.2'\nhorovod:\n  version: 0.28.1\n"
                                      "  frameworks: []\n  controllers: [gloo]\n  gpu_operations: nccl\n")
    assert_usage_error(run_envtool("plan", spec, cwd=tmp_path), "horovod.frameworks")


# ----------------------------------------------------------------------------- paste safety
def test_plan_quotes_every_value_it_prints(tmp_path):
    marker = tmp_path / "PWNED"
    evil = f"$(touch {marker})"
    spec = write(tmp_path / "h.yaml", f"name: h\nengine: conda\nchannels: ['file:///x {evil}']\n"
                                      f"packages:\n  conda: [python]\nenv:\n  FOO: 'a {evil} b'\n")
    prefix = tmp_path / f"p {evil}"
    proc = run_envtool("plan", spec, "--prefix", prefix, "--modulefile-root", tmp_path / "m", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [l.strip() for l in proc.stdout.splitlines()]
    pasted = [l[2:] for l in lines if l.startswith("$ ")] + [l[5:] for l in lines if l.startswith("env: ")]
    assert pasted
    for line in pasted:  # every value stays one word and nothing runs when the line is pasted
        words = shlex.split(line, comments=False)
        assert any(str(prefix) in w or "FOO=a " in w or "file:///x" in w for w in words) or line.startswith("#"), line
        subprocess.run(["bash", "-c", "set -f; printf '%s\\n' " + line], capture_output=True, timeout=scaled(10))
    env_line = next(l for l in lines if l.startswith("env: "))
    assert shlex.split(env_line[5:]) == [f"FOO=a {evil} b"]
    assert not marker.exists()


def test_comment_lines_cannot_be_broken_out_of():
    from envtool.core.plan import Step

    step = Step(id="x", title="x", commands=(("#", "install into /p\n$(touch /tmp/y)"),
                                              ("#", "envtool", "modulefile", "s", "--prefix", "/a b\nc")))
    lines = step.shell_lines()
    assert all("\n" not in l for l in lines)
    assert lines[0].startswith("# ") and "\\n" in lines[0]
    assert "'/a b\\nc'" in lines[1] or "'/a b" in lines[1]


def test_doctor_fix_lines_are_quoted(tmp_path):
    marker = tmp_path / "PWNED"
    prefix = tmp_path / f"e $(touch {marker})"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    spec = write(tmp_path / "s.yaml", "name: s\nengine: venv\npackages:\n  pip: ['torch==2.13.0']\n")
    proc = run_envtool("doctor", "--prefix", prefix, "--spec", spec, "--only", "versions", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # torch is missing: a check failed
    fixes = [l.split("fix:", 1)[1].strip() for l in proc.stdout.splitlines() if "fix:" in l]
    assert fixes, proc.stdout
    for fix in fixes:
        command = fix.split(": ", 1)[1] if ": " in fix else fix
        words = shlex.split(command)
        assert str(prefix) in words, words
        subprocess.run(["bash", "-c", "printf '%s\\n' " + command], capture_output=True, timeout=scaled(10))
    assert not marker.exists()


@pytest.mark.parametrize("argv", [
    ["show", "../../x" + "a" * 300],
    ["show", "cpu-horovod", "--site-file", "/tmp/" + "b" * 300 + ".yaml"],
    ["lock", "../" + "c" * 300 + ".yaml"],
    ["diff-specs", "../" + "d" * 300, "cpu-horovod"],
    ["specs", "--site-file", "/tmp/" + "e" * 300],
    ["jobscript", "cpu-horovod", "--site-file", "/tmp/" + "f" * 300, "--", "true"],
])
def test_a_spec_or_site_file_name_too_long_for_the_system_is_exit_2(argv):
    # found by the fuzz test: Path.is_file() raises ENAMETOOLONG (it only swallows "not there")
    proc = run_envtool(*argv)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
