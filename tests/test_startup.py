"""Start-up work: each YAML file parsed once per process (callers get their own copies), and a
command line builds only the parser of its command (every command for --help)."""
import subprocess
import sys

from envtool.cli.main import COMMANDS, _command_module, build_parser
from envtool.spec import yamlload


def test_each_file_is_parsed_once_and_callers_get_copies(tmp_path, monkeypatch):
    f = tmp_path / "s.yaml"
    f.write_text("name: a\npackages:\n  pip: [x==1]\n")
    calls = []
    real = yamlload.load_yaml_text
    monkeypatch.setattr(yamlload, "load_yaml_text", lambda text, path: calls.append(path) or real(text, path))
    first = yamlload.load_yaml(f)
    first["packages"]["pip"].append("changed")
    first["name"] = "edited"
    second = yamlload.load_yaml(f)
    assert len(calls) == 1
    assert second == {"name": "a", "packages": {"pip": ["x==1"]}}
    assert second.line_of("packages") == 2 and second["packages"].line_of("pip") == 3
    f.write_text("name: b\n")  # a changed file (size differs) is parsed again
    assert yamlload.load_yaml(f) == {"name": "b"} and len(calls) == 2


def test_command_module_picks_the_command_word():
    assert _command_module(["-v", "check-build", "--prefix", "x"]) == "check_build"
    assert _command_module(["--help"]) is None and _command_module(["nosuch"]) is None
    assert set(build_parser()._subparsers._group_actions[0].choices) >= {"specs", "cache", "check-build"}
    assert list(build_parser(only="specs")._subparsers._group_actions[0].choices) == ["specs"]


def test_help_still_lists_every_command():
    proc = subprocess.run([sys.executable, "-m", "envtool", "--help"], capture_output=True, text=True, check=True)
    for name in COMMANDS:
        assert name.replace("_", "-") in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "envtool", "specz"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'specz'" in bad.stderr and "'specs'" in bad.stderr
