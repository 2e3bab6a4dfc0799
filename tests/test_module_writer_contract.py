"""The contract every registered modulefile writer passes (issue 28), and a toy writer that passes it.

For each writer in :mod:`envtool.modules.registry` — ``lua`` and ``tcl`` today — plus the toy
shell-script writer of ``tests/helpers/shell_module_writer.py`` (registered here, as a new format
would be in the registry):

* it renders modulefiles for two real prefixes (venvs made with ``python3 -m venv``) in a temporary
  module tree, each at ``<root>/<name>/<version><suffix>``;
* ``envtool modulefile`` and ``envtool publish`` offer it as a ``--format`` choice;
* its default marker names the version marked and no other;
* with every module system that the writer names in ``systems``, in a real ``bash`` started with
  a clean environment: ``load NAME`` loads the marked default (the ``python`` found first is the
  default prefix's), ``load NAME/VERSION`` the other one, unloading restores the environment
  exactly (the bookkeeping ``tests/test_modulefile.py`` documents aside); without the marker the
  default is no longer the one loaded (so the marker is what decides), and marking again works.

Module systems: ``lmod`` (Debian's ``lmod``), ``envmodules`` (Environment Modules unpacked into
/opt/envmodules by ``tests/setup.d/modules.sh``), ``bash-source`` (the toy's: ``. FILE load``).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Tuple

import pytest

from helpers.shell_module_writer import ShellScriptWriter
from test_modulefile import BASE_ENV, ENVMODULES_INIT, LMOD_INIT, _need, assert_same_env, normalise, read_env0

from envtool.modules import build_content, default_markers, registry, write_modulefile
from envtool.modules.writer import ModuleWriter
from helpers.speed import scaled

TOY = ShellScriptWriter()
NAME = "contract"


@pytest.fixture(params=[*registry.names(), TOY.name])
def writer(request):
    """A registered writer; the toy is registered for the test and removed afterwards."""
    if request.param == TOY.name:
        registry.register(TOY)
        try:
            yield registry.get(TOY.name)
        finally:
            registry.unregister(TOY.name)
    else:
        yield registry.get(request.param)


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory) -> Dict[str, Path]:
    """Two real venvs (no pip: fast), one per module version."""
    out = {}
    for version in ("1.0", "2.0"):
        prefix = tmp_path_factory.mktemp("contract") / f"env-{version}"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=scaled(300))
        out[version] = prefix
    return out


def _script(writer: ModuleWriter, system: str, root: Path, module: str, tmp: Path) -> Tuple[str, str]:
    """``(init, body)``: a bash script that dumps the environment, loads ``module``, prints the
    ``sys.prefix`` of the ``python`` found first, unloads it and dumps the environment again."""
    if system in ("lmod", "envmodules"):
        init = _need(LMOD_INIT if system == "lmod" else ENVMODULES_INIT,
                     "Lmod" if system == "lmod" else "Environment Modules")
        pre, load, unload = f"source {init} || exit 90\nmodule use {root}", f"module load {module}", f"module unload {NAME}"
    elif system == "bash-source":
        name, _, version = module.partition("/")
        path = root / name / (writer.filename(version) if version else writer.default_marker)
        pre, load, unload = "", f". {path} load", f". {path} unload"
    else:
        pytest.fail(f"writer {writer!r} names module system {system!r}, which this contract cannot load yet: "
                    "add a loader for it to _script")
    return system, textwrap.dedent(f"""\
        {pre}
        env -0 > {tmp}/before
        {load} || exit 91
        python -c 'import sys; print("PREFIX=" + sys.prefix)' || exit 93
        {unload} || exit 92
        env -0 > {tmp}/after
        """)


def load_unload(writer: ModuleWriter, system: str, root: Path, module: str, tmp: Path) -> subprocess.CompletedProcess:
    """Run :func:`_script` in a real ``bash --noprofile --norc`` with a clean environment (``env -i``)."""
    _, script = _script(writer, system, root, module, tmp)
    for dump in ("before", "after"):
        (tmp / dump).unlink(missing_ok=True)
    return subprocess.run(["env", "-i", *[f"{k}={v}" for k, v in BASE_ENV.items()], "bash", "--noprofile", "--norc",
                           "-c", script], capture_output=True, text=True, timeout=scaled(180))


def loaded_prefix(proc: subprocess.CompletedProcess) -> str:
    return next((line[len("PREFIX="):] for line in proc.stdout.splitlines() if line.startswith("PREFIX=")), "")


def test_parser_offers_every_registered_format(writer):
    from envtool.cli.main import build_parser

    for command in ("modulefile", "publish"):
        parser = build_parser(only=command)
        sub = next(a for a in parser._actions if a.choices and command in a.choices)  # the subcommands
        fmt = next(a for a in sub.choices[command]._actions if "--format" in a.option_strings)
        assert writer.name in fmt.choices, (command, fmt.choices)


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
@pytest.mark.lmod
def test_writer_contract(writer, prefixes, tmp_path):
    root = tmp_path / "modulefiles"
    paths = {}
    for version, prefix in prefixes.items():
        content = build_content(prefix, name=NAME, version=version)
        paths[version] = write_modulefile(content, root, writer.name, default=(version == "1.0"))
        assert paths[version] == root / NAME / (version + writer.suffix)
        assert paths[version].is_file() and paths[version].name.endswith(writer.suffix)
        assert str(prefix) in paths[version].read_text()

    directory = root / NAME
    markers = writer.default_markers(directory, "1.0")
    assert markers and all(m.parent == directory for m in markers), markers
    assert writer.default_markers(directory, "2.0") == []
    assert set(markers) <= set(default_markers(root, NAME, "1.0"))

    assert writer.systems, f"{writer!r} names no module system that loads it"
    for system in writer.systems:
        for module, expected in ((NAME, prefixes["1.0"]), (f"{NAME}/2.0", prefixes["2.0"]),
                                 (f"{NAME}/1.0", prefixes["1.0"])):
            proc = load_unload(writer, system, root, module, tmp_path)
            assert proc.returncode == 0, (system, module, proc.stdout + proc.stderr)
            assert loaded_prefix(proc) == str(expected), (system, module, proc.stdout + proc.stderr)
            assert_same_env(normalise(read_env0(tmp_path / "before"), system),
                            normalise(read_env0(tmp_path / "after"), system))

    # the marker decides: without it NAME is no longer 1.0 (module systems take the highest version)
    for marker in markers:
        marker.unlink()
    for system in writer.systems:
        proc = load_unload(writer, system, root, NAME, tmp_path)
        assert loaded_prefix(proc) != str(prefixes["1.0"]), (system, proc.stdout + proc.stderr)
    # marking replaces an earlier marker of the same format
    writer.mark_default(directory, "2.0")
    assert writer.mark_default(directory, "1.0") in writer.default_markers(directory, "1.0")
    assert writer.default_markers(directory, "2.0") == []
    for system in writer.systems:
        proc = load_unload(writer, system, root, NAME, tmp_path)
        assert loaded_prefix(proc) == str(prefixes["1.0"]), (system, proc.stdout + proc.stderr)


def test_registry_refuses_a_clash():
    class Clash(ShellScriptWriter):
        name = "lua-again"
        suffix = ".lua"

    with pytest.raises(ValueError, match="clashes"):
        registry.register(Clash())
    assert "lua-again" not in registry.names()
