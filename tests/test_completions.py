"""Shell completion generated ahead of time (shtab): the committed files match the parser, and a
real bash completes subcommands, spec and site names (bundled and $ENVTOOL_SPEC_PATH's); zsh
loads the zsh file and lists the path names the same way."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.speed import scaled

REPO = Path(__file__).resolve().parent.parent
BASH = REPO / "completions" / "envtool.bash"
ZSH = REPO / "completions" / "_envtool"


def complete_bash(*words, env=None):
    """What bash's completion offers for the last of ``words`` (``envtool`` first)."""
    script = (f"source {BASH}; COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
              "_shtab_envtool; printf '%s\\n' \"${COMPREPLY[@]}\"")
    proc = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, timeout=scaled(30),
                          env=dict(os.environ, **(env or {})), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return [l for l in proc.stdout.splitlines() if l]


def test_committed_completions_are_up_to_date():
    pytest.importorskip("shtab")
    proc = subprocess.run([sys.executable, "scripts/gen_completions.py", "--check"], cwd=REPO, capture_output=True,
                          text=True, timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr


def test_bash_completes_commands_specs_sites_and_options(tmp_path):
    assert complete_bash("envtool", "ca") == ["cache"]
    assert complete_bash("envtool", "cache", "pu") == ["publish"]
    assert complete_bash("envtool", "create", "cpu-hor") == ["cpu-horovod"]
    assert complete_bash("envtool", "diff-specs", "cpu-horovod", "cpu-hor") == ["cpu-horovod"]
    assert complete_bash("envtool", "show", "x", "--site", "perl") == ["perlmutter"]
    assert "--older-than" in complete_bash("envtool", "cache", "prune", "--")
    assert set(complete_bash("envtool", "specs", "-")) >= {"-v", "--verbose", "-q", "--json"}
    (tmp_path / "mystack.yaml").write_text("name: mystack\n")
    assert complete_bash("envtool", "plan", "mys", env={"ENVTOOL_SPEC_PATH": f"/nonexistent:{tmp_path}"}) == ["mystack"]
    assert complete_bash("envtool", "plan", "mys") == []


def test_zsh_loads_the_completion_and_lists_path_names(tmp_path):
    if not shutil.which("zsh"):
        if os.geteuid() == 0:
            subprocess.run(["bash", str(REPO / "tests" / "setup.d" / "zsh.sh")], check=True, timeout=scaled(600))
        else:
            pytest.skip("zsh missing (tests/setup.d/zsh.sh installs it as root)")
    assert subprocess.run(["zsh", "-n", str(ZSH)], capture_output=True).returncode == 0
    (tmp_path / "a.yaml").write_text("name: a\n")
    (tmp_path / "b.yml").write_text("name: b\n")
    script = (f'autoload -Uz compinit; compinit -u -D; eval "$(<{ZSH})"; '
              'print -r -- "compdef=$_comps[envtool]"; _envtool_path_names ENVTOOL_SPEC_PATH; '
              'grep -c _envtool_specs ' + str(ZSH))
    proc = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True, timeout=scaled(60),
                          env=dict(os.environ, ENVTOOL_SPEC_PATH=f"{tmp_path}:/nonexistent"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "compdef=_shtab_envtool" and lines[1:3] == ["a", "b"] and int(lines[3]) >= 8, lines
