"""Command-line conventions shared with conda, pixi and uv (issue 38, "A researcher's first hour
outside our machines"): ``--dry-run`` on whatever deletes or replaces, a confirmation on a
terminal, a subcommand's own usage for an unknown option, one JSON envelope for every command,
``envtool config``, and ``--prefix`` as the one way to name an environment.

Every test runs the real CLI (a subprocess, or :func:`envtool.cli.main.main` in this process
where only argument parsing is exercised) on real files in a temporary directory.
"""
from __future__ import annotations

import argparse
import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_envtool

from envtool.cli.common import CONFIRMING, DESTRUCTIVE
from envtool.cli.main import build_parser, main


def leaf_commands():
    """Every command as typed (``cache prune``) with its parser, walked from envtool's own parser."""
    out = {}

    def walk(parser, words):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            out[" ".join(words)] = parser
            return
        for name, child in subs[0].choices.items():
            walk(child, words + [name])

    walk(build_parser(), [])
    return out


def options(parser):
    return {o for a in parser._actions for o in a.option_strings}


def helptext(parser) -> str:
    return " ".join([parser.description or ""] + [a.help or "" for a in parser._actions])


def home(tmp_path: Path) -> dict:
    """Variables that give a run its own configuration files, cache and state."""
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "ENVTOOL_SYSTEM_CONFIG": str(tmp_path / "etc" / "config.yaml"),
            "ENVTOOL_CACHE_DIR": str(tmp_path / "cache"), "XDG_STATE_HOME": str(tmp_path / "state"),
            "PYTHONPATH": str(REPO), "ENVTOOL_LOCK_TIMEOUT": "", "ENVTOOL_INSTALLER": ""}


# ------------------------------------------------------------------ 1. --dry-run, confirmation
#: words in a command's help that say it deletes or replaces something
DELETING = re.compile(r"\b(delete|deletes|remove|removes|replace|replaces|prune|purge)\b", re.I)


def test_every_command_that_deletes_or_replaces_has_dry_run():
    commands = leaf_commands()
    assert set(DESTRUCTIVE) <= set(commands), set(DESTRUCTIVE) - set(commands)
    for name in DESTRUCTIVE:
        assert "--dry-run" in options(commands[name]), f"{name} deletes or replaces but has no --dry-run"
    # and the list is complete: a command whose help speaks of deleting or replacing, or that has a
    # --force, is declared (config unset removes a setting from a file: a line, not a file)
    for name, parser in commands.items():
        if name in ("config unset",):
            continue
        if DELETING.search(helptext(parser)) or "--force" in options(parser):
            assert name in DESTRUCTIVE, f"{name}'s help speaks of deleting or replacing: declare it in DESTRUCTIVE"
    for name in CONFIRMING:
        assert {"-y", "--yes", "--dry-run"} <= options(commands[name]), name


def old_log(cache: Path) -> Path:
    log = cache / "logs" / "old.log"
    log.parent.mkdir(parents=True)
    log.write_text("a build log\n")
    old = time.time() - 90 * 86400
    os.utime(log, (old, old))
    return log


def test_cache_prune_dry_run_deletes_nothing_and_says_what(tmp_path):
    env = home(tmp_path)
    log = old_log(tmp_path / "cache")
    proc = run_envtool("cache", "prune", "--dry-run", env=env)
    assert proc.returncode == 0 and log.exists(), proc.stderr
    assert "would delete 1 build log" in proc.stdout and "nothing was deleted" in proc.stdout
    data = json.loads(run_envtool("cache", "prune", "--dry-run", "--json", env=env).stdout)
    assert data["ok"] and data["dry_run"] is True and data["logs"]["deleted"] == 1 and log.exists()


def on_terminal(args, answer: bytes, env):
    """``envtool ARGS`` with stdin and stdout on a pseudo-terminal, ``answer`` typed; returns
    (exit status, what it wrote)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "envtool", *args], stdin=slave, stdout=slave, stderr=slave,
                            env=dict(os.environ, **env), cwd=REPO, start_new_session=True)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"Proceed ([y]/n)? " not in seen and time.monotonic() < deadline and proc.poll() is None:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
        os.write(master, answer)
        while time.monotonic() < deadline:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        return proc.wait(timeout=30), seen.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_cache_prune_asks_on_a_terminal_and_yes_skips_the_question(tmp_path):
    env = home(tmp_path)
    log = old_log(tmp_path / "cache")
    rc, out = on_terminal(["cache", "prune"], b"n\n", env)
    assert rc == 0 and "Proceed ([y]/n)?" in out and "nothing was deleted" in out and log.exists(), out
    rc, out = on_terminal(["cache", "prune"], b"\n", env)  # an empty answer is yes, as conda's
    assert rc == 0 and "deleted 1 build log" in out and not log.exists(), out
    log = old_log(tmp_path / "cache2")
    rc, out = on_terminal(["cache", "prune", "-y"], b"", dict(env, ENVTOOL_CACHE_DIR=str(tmp_path / "cache2")))
    assert rc == 0 and "Proceed" not in out and not log.exists(), out


# ------------------------------------------------------------------ 2. a subcommand's own usage
@pytest.mark.parametrize("args, usage", [
    (["cache", "prune", "--bogus"], "usage: envtool cache prune"),
    (["remove", "--bogus"], "usage: envtool remove"),
    (["specs", "--bogus"], "usage: envtool specs"),
    (["config", "set", "a", "b", "--bogus"], "usage: envtool config set"),
])
def test_an_unknown_option_prints_the_subcommands_usage(capsys, args, usage):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and "unrecognized arguments: --bogus" in err, err
    assert main(args + ["--json"]) == 2
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert captured.err.startswith(usage)
    assert data["ok"] is False and data["exit"] == 2 and "--bogus" in data["error"], data


# ------------------------------------------------------------------ 3. one JSON envelope
def test_every_command_has_json_and_an_unknown_option_is_the_envelope(capsys):
    for name, parser in leaf_commands().items():
        assert "--json" in options(parser), f"{name} has no --json"
        assert main(name.split() + ["--json", "--no-such-option"]) == 2
        data = json.loads(capsys.readouterr().out)
        assert list(data)[:3] == ["ok", "error", "exit"] and data["exit"] == 2, (name, data)


@pytest.mark.parametrize("args, key", [(["specs"], "specs"), (["doctor", "--list"], "checks")])
def test_listings_are_in_the_envelope_too(args, key):
    proc = run_envtool(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert isinstance(data, dict) and data["ok"] is True and data["error"] is None and data["exit"] == 0
    assert isinstance(data[key], list) and data[key] and all("id" in r or "name" in r for r in data[key])


# ------------------------------------------------------------------ 4. envtool config
def test_config_set_get_list_unset_round_trip(tmp_path):
    env = home(tmp_path)
    user = tmp_path / "config" / "envtool" / "config.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("installer: pip\n")  # another setting, kept
    proc = run_envtool("config", "set", "lock_timeout", "600", env=env)
    assert proc.returncode == 0 and str(user) in proc.stdout, proc.stderr
    assert user.read_text() == "installer: pip\nlock_timeout: 600\n"
    assert run_envtool("config", "get", "lock_timeout", env=env).stdout == "600\n"
    data = json.loads(run_envtool("config", "list", "--json", env=env).stdout)
    rows = {r["setting"]: r for r in data["settings"]}
    assert rows["lock_timeout"]["value"] == "600" and rows["lock_timeout"]["origin"] == "user"
    assert rows["lock_timeout"]["default"] == "300" and rows["installer"]["value"] == "pip"
    assert rows["public_index"]["origin"] == "default" and rows["public_index"]["effective"] == "https://pypi.org/simple"
    text = run_envtool("config", "list", env=env).stdout
    assert re.search(r"^lock_timeout +?= 600  \[user file; default 300\]$", text, re.M), text
    assert re.search(r"^public_index +?= https://pypi.org/simple  \[default\]$", text, re.M), text
    proc = run_envtool("config", "unset", "lock_timeout", env=env)
    assert proc.returncode == 0 and user.read_text() == "installer: pip\n", proc.stderr
    assert run_envtool("config", "get", "lock_timeout", env=env).stdout == "300\n"  # the default again
    info = run_envtool("info", "--no-size", env=env).stdout
    assert re.search(r"lock_timeout +300 \(default\)", info), info  # info shows defaults too


def test_config_set_refuses_an_unknown_key_and_a_bad_value(tmp_path):
    env = home(tmp_path)
    user = tmp_path / "config" / "envtool" / "config.yaml"
    proc = run_envtool("config", "set", "lock_timout", "5", "--json", env=env)
    data = json.loads(proc.stdout)
    assert proc.returncode == 2 and "did you mean lock_timeout?" in data["error"] and not user.exists(), data
    for key, value, said in (("lock_timeout", "-5", "greater than 0"), ("installer", "conda", "uv, pip"),
                             ("public_index", "ftp://x", "http(s) or file URL")):
        proc = run_envtool("config", "set", key, value, env=env)
        assert proc.returncode == 2 and f"{user}: {key}: " in proc.stderr and said in proc.stderr, proc.stderr
        assert not user.exists()
    proc = run_envtool("config", "set", "site", "x", "--system", env=env)  # no /etc directory here
    assert proc.returncode == 2 and str(tmp_path / "etc") in proc.stderr and not (tmp_path / "etc").exists()
    (tmp_path / "etc").mkdir()  # a site-wide directory this user may write: --system writes there
    assert run_envtool("config", "set", "site", "local", "--system", env=env).returncode == 0
    assert (tmp_path / "etc" / "config.yaml").read_text() == "site: local\n" and not user.exists()
    row = json.loads(run_envtool("config", "get", "site", "--json", env=env).stdout)
    assert row["effective"] == "local" and row["origin"] == "system", row


def test_config_shows_an_environment_variable_overriding_the_file(tmp_path):
    env = home(tmp_path)
    assert run_envtool("config", "set", "installer", "pip", env=env).returncode == 0
    data = json.loads(run_envtool("config", "get", "installer", "--json", env=dict(env, ENVTOOL_INSTALLER="uv")).stdout)
    assert data["effective"] == "uv" and data["origin"] == "environment" and data["from"] == "environment ($ENVTOOL_INSTALLER)"
    # a misspelt setting in the file makes every command refuse it; config unset still mends it
    user = tmp_path / "config" / "envtool" / "config.yaml"
    user.write_text("installer: pip\ninstaler: uv\n")
    assert run_envtool("config", "list", env=env).returncode == 2
    proc = run_envtool("config", "unset", "instaler", env=env)
    assert proc.returncode == 0 and user.read_text() == "installer: pip\n", proc.stderr


# ------------------------------------------------------------------ 5. --prefix everywhere
def made_env(path: Path) -> Path:
    """A directory that envtool's own record says envtool made there (what ``remove`` trusts)."""
    (path / ".envtool").mkdir(parents=True)
    (path / ".envtool" / "create.json").write_text(json.dumps({"spec": "bare", "prefix": str(path),
                                                               "created": time.time()}))
    return path


def test_remove_and_pack_take_prefix_and_the_positional_alias(tmp_path):
    env = home(tmp_path)
    prefix = made_env(tmp_path / "env")
    for args in (["--prefix", prefix], [prefix], [prefix, "--prefix", prefix]):
        proc = run_envtool("remove", *args, "--dry-run", env=env)
        assert proc.returncode == 0 and f"would remove {prefix}" in proc.stdout and prefix.is_dir(), proc.stderr
    for command in (["remove", "--dry-run"], ["pack", "--format", "tar", "--dry-run"]):
        proc = run_envtool(*command, tmp_path / "other", "--prefix", prefix, "--json", env=env)
        data = json.loads(proc.stdout)
        assert proc.returncode == 2 and "name different environments" in data["error"], (command, data)
    # every command that takes the positional alias takes --prefix too (the documented way)
    with_alias = {name for name, parser in leaf_commands().items()
                  if any(a.dest == "prefix_positional" for a in parser._actions)}
    assert with_alias == {"remove", "pack", 'image'}  # ('image' is only parsed here, never run)
    assert all("--prefix" in options(leaf_commands()[name]) for name in with_alias)
