"""Modulefiles (issue 6), checked with the real module systems.

* Lmod from Debian's ``lmod`` package, Environment Modules from Debian's ``environment-modules``
  unpacked into /opt/envmodules (the two packages conflict; ``tests/setup.d/modules.sh``).
* Every module command runs in a real ``bash --noprofile --norc`` started with a clean
  environment (``env -i``), so the before/after comparison sees only what the module systems do.
* Escaping is also checked directly: each literal is read back by the real ``lua`` and ``tclsh``.

Bookkeeping that the comparisons of ``env`` before ``module load`` and after ``module unload``
ignore, and why:
* Lmod: ``__LMOD_REF_COUNT_<VAR>`` for a path variable that a module changed (Lmod keeps its
  per-entry reference counts once it has touched a variable, even at count 1), and
  ``_ModuleTableNNN_`` chunks numbered above ``_ModuleTable_Sz_`` (Lmod writes its module table
  in base64 chunks and does not unset chunks it no longer uses; ``_ModuleTable_Sz_`` and the
  live chunks are compared exactly), and ``__LMOD_STACK_<VAR>`` when it holds (base64) exactly
  the current value of ``<VAR>`` (``pushenv`` over a variable the user had set leaves that
  one-entry stack behind after restoring the value).
* Environment Modules: ``LOADEDMODULES`` / ``_LMFILES_`` empty versus unset (its bash init sets
  ``LOADEDMODULES=``; unloading the last module unsets it).
Everything else — ``PATH``, ``CONDA_PREFIX``, variables that were set before and overridden by
the module, ``MODULEPATH`` — must be byte-for-byte the same.
"""
from __future__ import annotations

import base64
import glob
import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import run_envtool

from dataclasses import replace

from envtool.modules import build_content, write_modulefile
from envtool.modules import EnvChange
from envtool.modules.lmod import lua_long_string, lua_string
from envtool.modules.tcl import tcl_string
from helpers.speed import scaled

ENVMODULES_INIT = Path(os.environ.get("ENVMODULES_ROOT", "/opt/envmodules")) / "usr/share/modules/init/bash"


def _lmod_init():
    hits = [p for p in ["/usr/share/lmod/lmod/init/bash"] + sorted(glob.glob("/usr/share/lmod/*/init/bash"))
            if Path(p).is_file()]
    return hits[0] if hits else None


LMOD_INIT = _lmod_init()


def _need(path, what):
    if path and Path(path).is_file():
        return str(path)
    msg = f"{what} is not installed (run tests/setup.d/modules.sh as root)"
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture
def lmod():
    return _need(LMOD_INIT, "Lmod")


@pytest.fixture
def envmodules():
    return _need(ENVMODULES_INIT, "Environment Modules")


BASE_ENV = {"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/bin:/bin", "LANG": "C"}


def module_shell(init: str, script: str, env=None, timeout=None) -> subprocess.CompletedProcess:
    """Run ``script`` in a clean, real bash after sourcing the module system's init file."""
    full = dict(BASE_ENV)
    full.update(env or {})
    code = f"source {init} || exit 90\n{script}"
    return subprocess.run(["env", "-i", *[f"{k}={v}" for k, v in full.items()], "bash", "--noprofile", "--norc",
                           "-c", code], capture_output=True, text=True,
                          timeout=scaled(120) if timeout is None else timeout)


def read_env0(path: Path) -> dict:
    out = {}
    for item in path.read_bytes().split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode()] = value.decode(errors="replace")
    return out


def normalise(env: dict, system: str) -> dict:
    """Drop only the bookkeeping named in the module docstring."""
    env = dict(env)
    env.pop("_", None)
    if system == "lmod":
        size = int(env.get("_ModuleTable_Sz_", "0") or 0)
        for key in list(env):
            m = re.fullmatch(r"_ModuleTable(\d+)_", key)
            if m and int(m.group(1)) > size:
                del env[key]
            elif key.startswith("__LMOD_REF_COUNT_") and key != "__LMOD_REF_COUNT_MODULEPATH":
                del env[key]
            elif key.startswith("__LMOD_STACK_"):
                # what pushenv leaves once it has restored the value: a one-entry stack (base64)
                # holding exactly the variable's current value. Anything else is a difference.
                var = key[len("__LMOD_STACK_"):]
                if base64.b64decode(env[key]).decode(errors="replace") == env.get(var):
                    del env[key]
    else:
        for key in ("LOADEDMODULES", "_LMFILES_"):
            if env.get(key) == "":
                del env[key]
    return env


def load_unload(init: str, system: str, root: Path, module: str, tmp: Path, check: str = "", env=None,
                extra_roots=()):
    """``module use``; dump env; load (then run ``check``); unload; dump env. Returns (before, after, proc)."""
    uses = " ".join(str(r) for r in (*extra_roots, root))
    script = textwrap.dedent(f"""\
        module use {uses}
        env -0 > {tmp}/before
        module load {module} || exit 91
        {check}
        module unload {module.split('/')[0]} || exit 92
        env -0 > {tmp}/after
        """)
    proc = module_shell(init, script, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return normalise(read_env0(tmp / "before"), system), normalise(read_env0(tmp / "after"), system), proc


def assert_same_env(before: dict, after: dict):
    changed = {k: (before.get(k), after.get(k)) for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert not changed, f"module unload did not restore the environment: {changed}"


# --- test data -------------------------------------------------------------------------------

NASTY = ("a ]] b ]=] c ]==] \"double\" 'single' $(touch {canary}/c1) `touch {canary}/c2` "
         "[exec touch {canary}/c3] ${{HOME}} %s %d \\ \\n {{brace}} ; & | > < #\nsecond line\n  ]]")


def write_spec(dirpath: Path, name: str, body: str) -> Path:
    dirpath.mkdir(parents=True, exist_ok=True)
    path = dirpath / f"{name}.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def fake_conda_prefix(path: Path) -> Path:
    """A conda-like prefix for modulefile content only: conda-meta records, an activate.d script."""
    (path / "conda-meta").mkdir(parents=True)
    (path / "bin").mkdir()
    for name, version in (("python", "3.10.8"), ("pytorch", "1.12.0"), ("horovod", "0.27.0"),
                          ("nccl", "2.15.5.1"), ("bad name", "1")):
        (path / "conda-meta" / f"{name.replace(' ', '_')}-{version}-0.json").write_text(
            json.dumps({"name": name, "version": version, "build": "0", "build_number": 0}))
    (path / "conda-meta" / "history").write_text("")
    act = path / "etc" / "conda" / "activate.d"
    act.mkdir(parents=True)
    (act / "10-nccl.sh").write_text(textwrap.dedent("""\
        export NCCL_HOME="$CONDA_PREFIX"
        export LD_LIBRARY_PATH="$CONDA_PREFIX/lib:$CONDA_PREFIX/lib64:$LD_LIBRARY_PATH"
        export MANPATH="$MANPATH:$CONDA_PREFIX/man"
        """))
    (act / "20-misc.sh").write_text(textwrap.dedent("""\
        export XLA_FLAGS="--xla_gpu_cuda_data_dir=$CONDA_PREFIX"
        unset CPATH
        """))
    (act / "ignored.csh").write_text("setenv NOT_SH 1\n")
    return path


# --- escaping, read back by the real interpreters ----------------------------------------------

STRINGS = ["plain", "]]", "]=]x]==]", 'q"uote', "back\\slash\\", "$(id) `id` ${X}", "new\nline\r\n", "\ttab\x01\x7f",
           "[exec id] {brace} ;", "ünïcødé", "]=", "ends with ]"]


def test_lua_string_reads_back_exactly(tmp_path):
    for text in STRINGS:
        # the long bracket form drops carriage returns (lua_long_string's docstring)
        for literal, expected in ((lua_string(text), text), (lua_long_string(text), text.replace("\r", ""))):
            script = tmp_path / "t.lua"
            script.write_bytes(f"io.write({literal})".encode("utf-8"))
            out = subprocess.run(["lua", str(script)], capture_output=True, timeout=scaled(30))
            assert out.returncode == 0, (literal, out.stderr)
            assert out.stdout.decode("utf-8") == expected, literal


def test_tcl_string_reads_back_exactly(tmp_path):
    for text in STRINGS + ["{", "}", "\\", "x\\}"]:
        # as a word, and inside a braced body (how pushenv is written: if {..} {pushenv X "…"})
        for line in (f"puts -nonewline {tcl_string(text)}", f"if {{1}} {{puts -nonewline {tcl_string(text)}}}"):
            script = tmp_path / "t.tcl"
            script.write_text("fconfigure stdout -translation binary -encoding utf-8\n" + line + "\n",
                              encoding="utf-8")
            out = subprocess.run(["tclsh8.6", str(script)], capture_output=True, timeout=scaled(30))
            assert out.returncode == 0, (line, out.stderr)
            assert out.stdout.decode("utf-8") == text, line


# --- content (plain data) ------------------------------------------------------------------------

def test_conda_prefix_content(tmp_path):
    prefix = fake_conda_prefix(tmp_path / "build")
    final = tmp_path / "final"
    content = build_content(prefix, name="stack", version="1.0", runtime_prefix=final)
    ops = [(c.op, c.name, c.value) for c in content.changes]
    assert ops[0] == ("prepend_path", "PATH", f"{final}/bin")
    assert ("pushenv", "CONDA_PREFIX", str(final)) in ops
    assert ("pushenv", "CONDA_DEFAULT_ENV", str(final)) in ops
    assert ("pushenv", "NCCL_HOME", str(final)) in ops
    # kept in order: lib before lib64 once both are prepended
    ld = [v for op, n, v in ops if n == "LD_LIBRARY_PATH"]
    assert [op for op, n, v in ops if n == "LD_LIBRARY_PATH"] == ["prepend_path", "prepend_path"]
    assert ld == [f"{final}/lib64", f"{final}/lib"]
    assert ("append_path", "MANPATH", f"{final}/man") in ops
    assert ("pushenv", "XLA_FLAGS", f"--xla_gpu_cuda_data_dir={final}") in ops
    assert not any(str(prefix) in v for _, _, v in ops), "the build prefix leaked into the modulefile"
    assert "NOT_SH" not in {n for _, n, _ in ops}
    assert any("unsets CPATH" in n for n in content.notes)  # reported, not applied
    # --extensions spec (default): without a spec, the frameworks and Horovod only
    assert dict(content.extensions) == {"pytorch": "1.12.0", "horovod": "0.27.0"}
    every = build_content(prefix, name="stack", version="1.0", runtime_prefix=final, extensions="all")
    assert dict(every.extensions) == {"pytorch": "1.12.0", "horovod": "0.27.0", "nccl": "2.15.5.1"}
    assert build_content(prefix, name="stack", version="1.0", extensions="none").extensions == ()
    assert "Packages: python 3.10.8, pytorch 1.12.0, horovod 0.27.0, nccl 2.15.5.1" in content.whatis
    assert content.family == "python" and content.conflicts == ("stack",)


@pytest.mark.slow
def test_venv_content_and_cli_json(tmp_path, cpu_horovod_env):
    proc = run_envtool("modulefile", "cpu-horovod", "--prefix", cpu_horovod_env, "--root", tmp_path / "mods",
                       "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["module"] == "cpu-horovod/2026.11"
    assert out["path"] == str(tmp_path / "mods" / "cpu-horovod" / "2026.11.lua")
    changes = {(c["op"], c["name"]): c["value"] for c in out["content"]["changes"]}
    assert changes[("pushenv", "VIRTUAL_ENV")] == str(cpu_horovod_env)
    assert changes[("pushenv", "OMP_NUM_THREADS")] == "1"
    assert ("pushenv", "CONDA_PREFIX") not in changes
    exts = dict(e.split("/", 1) for e in out["content"]["extensions"])
    assert exts["horovod"] == "0.28.1" and exts["torch"].startswith("2.13.0")
    text = Path(out["path"]).read_text()
    assert 'extensions("' in text and "horovod/0.28.1" in text
    assert "horovodrun -np 4 -H localhost:4 python train.py" in text  # the site's launcher, in help
    assert f"envtool clone {cpu_horovod_env}" in text


def test_bad_input_exit_2(tmp_path):
    specs = tmp_path / "specs"
    write_spec(specs, "nl", """\
        name: nl
        summary: newline in an env value
        engine: venv
        env:
          BAD: "one\\ntwo"
        """)
    prefix = tmp_path / "p"
    (prefix / "bin").mkdir(parents=True)
    env = {"ENVTOOL_SPEC_PATH": str(specs)}
    proc = run_envtool("modulefile", "nl", "--prefix", prefix, "--root", tmp_path / "m", env=env)
    assert proc.returncode == 2 and "env.BAD" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = run_envtool("modulefile", "--prefix", prefix, "--name", "x/../y", "--root", tmp_path / "m")
    assert proc.returncode == 2 and "--name" in proc.stderr, proc.stderr
    proc = run_envtool("modulefile", "--prefix", tmp_path / "missing", "--root", tmp_path / "m")
    assert proc.returncode == 2 and "not a directory" in proc.stderr, proc.stderr
    assert not (tmp_path / "m").exists()


# --- Lmod ------------------------------------------------------------------------------------------

FOUR = [("lua", "lmod"), ("tcl", "lmod"), ("tcl", "envmodules")]
FOUR_IDS = ["lua-lmod", "tcl-lmod", "tcl-envmodules"]


@pytest.mark.lmod
@pytest.mark.parametrize("fmt,system", FOUR + [("lua", "envmodules")], ids=FOUR_IDS + ["lua-envmodules"])
def test_conda_prefix_load_unload_exact(tmp_path, fmt, system, request):
    """Every module combination restores variables the user had set before ``module load``.

    Lua under Environment Modules: Environment Modules 5.2 does not read Lua modulefiles, so
    that combination checks that it refuses the file (nothing changes) rather than half-loading.
    """
    init = request.getfixturevalue(system)
    prefix = fake_conda_prefix(tmp_path / "env")
    root = tmp_path / "mods"
    content = build_content(prefix, name="stack", version="1.0")
    content = replace(content, changes=content.changes + (EnvChange("pushenv", "OMP_NUM_THREADS", "1", "spec env"),
                                                          EnvChange("pushenv", "FRESH_VAR", "new", "spec env")))
    path = write_modulefile(content, root, fmt)
    assert path == root / "stack" / ("1.0.lua" if fmt == "lua" else "1.0")
    # The user already has things set: the module must override and then restore them.
    env = {"CONDA_PREFIX": "/opt/base", "CONDA_DEFAULT_ENV": "base", "OMP_NUM_THREADS": "16",
           "LD_LIBRARY_PATH": "/opt/x/lib", "CPATH": "/opt/x/include"}
    check = textwrap.dedent("""\
        echo "PATH=$PATH"; echo "CONDA_PREFIX=$CONDA_PREFIX"; echo "LD=$LD_LIBRARY_PATH"
        echo "CPATH=$CPATH"; echo "CDE=$CONDA_DEFAULT_ENV"; echo "OMP=$OMP_NUM_THREADS"; echo "FRESH=$FRESH_VAR"
        """)
    if (fmt, system) == ("lua", "envmodules"):
        proc = module_shell(init, f"module use {root}; env -0 > {tmp_path}/before; module load stack/1.0; "
                                  f"env -0 > {tmp_path}/after", env=env)
        assert proc.returncode == 0 and "stack/1.0" in proc.stderr, proc.stderr
        assert_same_env(normalise(read_env0(tmp_path / "before"), system),
                        normalise(read_env0(tmp_path / "after"), system))
        return
    before, after, proc = load_unload(init, system, root, "stack/1.0", tmp_path, env=env, check=check)
    assert f"PATH={prefix}/bin:/usr/bin:/bin" in proc.stdout
    assert f"CONDA_PREFIX={prefix}\n" in proc.stdout and f"CDE={prefix}\n" in proc.stdout, proc.stdout
    assert "OMP=1\n" in proc.stdout and "FRESH=new\n" in proc.stdout, proc.stdout
    assert f"LD={prefix}/lib:{prefix}/lib64:/opt/x/lib\n" in proc.stdout
    assert "CPATH=/opt/x/include\n" in proc.stdout  # an unset cannot be undone: not applied
    assert (before["CONDA_PREFIX"], before["CONDA_DEFAULT_ENV"], before["OMP_NUM_THREADS"]) == \
        ("/opt/base", "base", "16")
    assert "FRESH_VAR" not in after
    assert_same_env(before, after)


@pytest.mark.lmod
def test_lmod_tree_syntax_and_spider(tmp_path, lmod):
    prefix = fake_conda_prefix(tmp_path / "env")
    root = tmp_path / "mods"
    write_modulefile(build_content(prefix, name="stack", version="1.0"), root, "lua", default=True)
    assert os.readlink(root / "stack" / "default") == "1.0.lua"
    proc = module_shell(lmod, f'"$LMOD_DIR/check_module_tree_syntax" {root}')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = module_shell(lmod, f"module use {root}; module spider horovod 2>&1; module spider nccl/2.15.5.1 2>&1")
    assert "stack/1.0" in proc.stdout, proc.stdout
    assert "horovod/0.27.0" in proc.stdout
    # The checker can fail: a broken modulefile in the same tree is reported.
    (root / "stack" / "2.0.lua").write_text('setenv("X", "unterminated)\n')
    proc = module_shell(lmod, f'"$LMOD_DIR/check_module_tree_syntax" {root}')
    assert proc.returncode != 0 and "stack/2.0" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


SITE_TREE = {"cudnn/8.7.0": ("TEST_CUDNN_VERSION", "8.7.0"), "evp-patch": ("TEST_EVP_PATCH", "1")}


def site_tree(root: Path, fmt: str) -> Path:
    """A test module tree with the modules a Perlmutter-like spec depends on."""
    for mod, (var, value) in SITE_TREE.items():
        name, _, version = mod.partition("/")
        path = root / name / ((version or "1.0") + (".lua" if fmt == "lua" else ""))
        path.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "lua":
            path.write_text(f'setenv("{var}", "{value}")\n')
        else:
            path.write_text(f"#%Module1.0\nsetenv {var} {value}\n")
    return root


def weird_value(canary: Path) -> str:
    return "a'b\"c $(touch " + str(canary) + "/c4) `id` ; \\ & | > x {y} [z] %d ]] ]==]"


def site_spec(specs: Path, canary: Path) -> None:
    nasty = NASTY.format(canary=canary)
    source = json.dumps("https://example.org/$(touch " + str(canary) + "/c5)")
    weird = json.dumps(weird_value(canary))
    write_spec(specs, "site-stack", f"""\
        name: site-stack
        summary: {json.dumps(nasty)}
        distribution: {{name: site, version: "2.0"}}
        sources:
          weird: {source}
        engine: venv
        site:
          name: testsite
          launcher: "srun -n {{ranks}} --gpus-per-node=4"
          modules: [cudnn/8.7.0, evp-patch]
        env:
          OMP_NUM_THREADS: "2"
          WEIRD: {weird}
        """)


@pytest.mark.lmod
@pytest.mark.parametrize("fmt,system", [("lua", "lmod"), ("tcl", "envmodules"), ("tcl", "lmod")])
def test_site_modules_and_injection(tmp_path, fmt, system, request):
    """depends_on loads the spec's site modules from a test tree; nothing a spec says runs or breaks out.

    The Tcl form is also loaded by Lmod (sites running Lmod with Tcl modulefiles)."""
    init = request.getfixturevalue(system if system == "lmod" else "envmodules")
    canary = tmp_path / "canary"
    canary.mkdir()
    specs = tmp_path / "specs"
    site_spec(specs, canary)
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text("version = 3.11.7\n")
    root = tmp_path / "mods"
    proc = run_envtool("modulefile", "site-stack", "--prefix", prefix, "--root", root, "--format", fmt,
                       env={"ENVTOOL_SPEC_PATH": str(specs)})
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip())
    assert path == root / "site-stack" / ("2.0.lua" if fmt == "lua" else "2.0")
    site = site_tree(tmp_path / "site", "lua" if system == "lmod" else "tcl")
    nasty = NASTY.format(canary=canary)
    weird = weird_value(canary)
    check = textwrap.dedent(f"""\
        printf '%s' "$WEIRD" > {tmp_path}/weird
        echo "CUDNN=$TEST_CUDNN_VERSION EVP=$TEST_EVP_PATCH OMP=$OMP_NUM_THREADS VENV=$VIRTUAL_ENV"
        echo "LOADED=$LOADEDMODULES"
        module whatis site-stack > {tmp_path}/whatis 2>&1
        module help site-stack > {tmp_path}/help 2>&1
        """)
    # A value the user had before is restored by pushenv, in every combination.
    preset = {"OMP_NUM_THREADS": "16"}
    before, after, proc = load_unload(init, system, root, "site-stack/2.0", tmp_path, check=check,
                                      extra_roots=(site,), env=preset)
    assert f"CUDNN=8.7.0 EVP=1 OMP=2 VENV={prefix}" in proc.stdout, proc.stdout + proc.stderr
    loaded = re.search(r"LOADED=(.*)", proc.stdout).group(1).split(":")
    assert loaded.index("cudnn/8.7.0") < loaded.index("site-stack/2.0")
    assert any(m.startswith("evp-patch") for m in loaded)
    assert (tmp_path / "weird").read_text() == weird
    assert list(canary.iterdir()) == [], "a command inside a spec string was run"
    whatis = (tmp_path / "whatis").read_text()
    assert nasty.split("\n")[0] in whatis, whatis
    help_text = (tmp_path / "help").read_text()
    for line in nasty.split("\n"):
        assert line in help_text, (line, help_text)
    assert "srun -n 4 --gpus-per-node=4 python train.py" in help_text
    # unload took the site modules away again and restored OMP_NUM_THREADS=16
    assert before.get("OMP_NUM_THREADS") == preset.get("OMP_NUM_THREADS")
    assert_same_env(before, after)


@pytest.mark.lmod
@pytest.mark.parametrize("fmt", ["lua", "tcl"])
def test_default_version(tmp_path, fmt, request):
    init = request.getfixturevalue("lmod" if fmt == "lua" else "envmodules")
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    root = tmp_path / "mods"
    for version, default in (("1.0", True), ("2.0", False)):
        proc = run_envtool("modulefile", "--prefix", prefix, "--root", root, "--format", fmt,
                           "--name", f"stack/{version}", *(["--default"] if default else []))
        assert proc.returncode == 0, proc.stderr
    proc = module_shell(init, f'module use {root}; module load stack && echo "LOADED=$LOADEDMODULES"')
    assert "LOADED=stack/1.0" in proc.stdout, proc.stdout + proc.stderr
    # 2.0 is the highest version, so without the marker it would win: the marker is what decides.
    (root / "stack" / ("default" if fmt == "lua" else ".version")).unlink()
    proc = module_shell(init, f'module use {root}; module load stack && echo "LOADED=$LOADEDMODULES"')
    assert "LOADED=stack/2.0" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.lmod
@pytest.mark.parametrize("fmt", ["lua", "tcl"])
def test_family_one_python_stack_at_a_time(tmp_path, fmt, request):
    """family("python"): Lmod swaps the first stack out; Environment Modules refuses the second."""
    init = request.getfixturevalue("lmod" if fmt == "lua" else "envmodules")
    root = tmp_path / "mods"
    for name in ("one", "two"):
        prefix = tmp_path / name
        (prefix / "bin").mkdir(parents=True)
        write_modulefile(build_content(prefix, name=name, version="1"), root, fmt)
    proc = module_shell(init, f'module use {root}; module load one/1; module load two/1; '
                              f'echo "LOADED=$LOADEDMODULES"; echo "PATH=$PATH"')
    if fmt == "lua":
        assert "LOADED=two/1\n" in proc.stdout, proc.stdout + proc.stderr
        assert f"PATH={tmp_path}/two/bin:/usr/bin:/bin\n" in proc.stdout
    else:
        assert "LOADED=one/1\n" in proc.stdout, proc.stdout + proc.stderr
        assert f"PATH={tmp_path}/one/bin:/usr/bin:/bin\n" in proc.stdout
        assert "conflict" in proc.stderr
    # another version of the same module: never both (Lmod reloads with the new version,
    # Environment Modules refuses it: conflict with itself)
    prefix2 = tmp_path / "one-2"
    (prefix2 / "bin").mkdir(parents=True)
    write_modulefile(build_content(prefix2, name="one", version="2"), root, fmt)
    proc = module_shell(init, f'module use {root}; module load one/1; module load one/2; echo "LOADED=$LOADEDMODULES"')
    loaded = re.search(r"LOADED=(.*)", proc.stdout).group(1)
    assert loaded == ("one/2" if fmt == "lua" else "one/1"), proc.stdout + proc.stderr


# --- the real cpu-horovod environment --------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.lmod
@pytest.mark.parametrize("fmt", ["lua", "tcl"])
def test_cpu_horovod_env_module(tmp_path, cpu_horovod_env, fmt, request):
    init = request.getfixturevalue("lmod" if fmt == "lua" else "envmodules")
    system = "lmod" if fmt == "lua" else "envmodules"
    root = tmp_path / "mods"
    proc = run_envtool("modulefile", "cpu-horovod", "--prefix", cpu_horovod_env, "--root", root, "--format", fmt,
                       "--default")
    assert proc.returncode == 0, proc.stderr
    check = textwrap.dedent("""\
        echo "PYTHON=$(command -v python)"
        python -c "import horovod.torch, sys; print('HVD', horovod.__version__, sys.prefix)" 2>/dev/null
        """)
    before, after, proc = load_unload(init, system, root, "cpu-horovod", tmp_path, check=check)
    assert f"PYTHON={cpu_horovod_env}/bin/python\n" in proc.stdout, proc.stdout + proc.stderr
    assert f"HVD 0.28.1 {cpu_horovod_env}\n" in proc.stdout, proc.stdout + proc.stderr
    assert_same_env(before, after)
    assert "python" not in before.get("PATH", "") or str(cpu_horovod_env) not in before["PATH"]
    if fmt == "lua":
        proc = module_shell(init, f"module use {root}; module spider horovod 2>&1")
        assert "cpu-horovod/2026.11" in proc.stdout, proc.stdout
        proc = module_shell(init, f'"$LMOD_DIR/check_module_tree_syntax" {root}')
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
@pytest.mark.lmod
def test_create_writes_modulefile_for_final_prefix(tmp_path, lmod):
    """``create --modulefile-root``: a real (small) venv, the modulefile names the final prefix."""
    specs = tmp_path / "specs"
    write_spec(specs, "tiny", """\
        name: tiny
        summary: an empty venv
        distribution: {name: local, version: "0.1"}
        engine: venv
        site: {name: local, launcher: "mpirun -n {ranks}"}
        env: {TINY: "yes"}
        """)
    prefix = tmp_path / "envs" / "tiny"
    root = tmp_path / "mods"
    env = {"ENVTOOL_SPEC_PATH": str(specs)}
    proc = run_envtool("plan", "tiny", "--prefix", prefix, "--modulefile-root", root, env=env)
    assert proc.returncode == 0 and f"[modulefile] Write the Lmod modulefile {root}/tiny/0.1.lua" in proc.stdout, \
        proc.stdout + proc.stderr
    proc = run_envtool("create", "tiny", "--prefix", prefix, "--modulefile-root", root, env=env, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (root / "tiny" / "0.1.lua").read_text()
    assert f'prepend_path("PATH", "{prefix}/bin")' in text
    assert "envtool-build" not in text, "the temporary build prefix leaked into the modulefile"
    # help says where the lock is exactly when create wrote one (the lock step may be skipped offline)
    assert (f"Lock (exact package versions): {prefix}/conda-lock.yml" in text) == \
        (prefix / "conda-lock.yml").is_file()
    before, after, proc = load_unload(lmod, "lmod", root, "tiny/0.1", tmp_path,
                                      check='echo "PYTHON=$(command -v python) TINY=$TINY"')
    assert f"PYTHON={prefix}/bin/python TINY=yes" in proc.stdout, proc.stdout + proc.stderr
    assert_same_env(before, after)


def test_create_step_keeps_env_when_modulefile_cannot_be_written(tmp_path):
    """The step reports a modulefile it cannot write instead of discarding a validated environment."""
    from envtool.spec.model import Spec
    from envtool.steps.create import modulefile_step
    from envtool.core.plan import PlanOptions
    from envtool.steps.kernel.runner import Runner

    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    spec = Spec(name="s")
    assert modulefile_step.plan_steps(spec, PlanOptions(prefix=prefix)) == []
    (step,) = modulefile_step.plan_steps(spec, PlanOptions(prefix=prefix, modulefile_root=blocker / "mods"))
    with Runner(log_path=tmp_path / "log", quiet=True) as runner:
        runner.run_step(step, 1, 1)
    assert runner.results["modulefile"]["ok"] is False
    assert "cannot write" in runner.results["modulefile"]["error"]
    (step,) = modulefile_step.plan_steps(spec, PlanOptions(prefix=prefix, modulefile_root=tmp_path / "mods"))
    with Runner(log_path=tmp_path / "log", quiet=True) as runner:
        runner.run_step(step, 1, 1)
    assert runner.results["modulefile"]["ok"] is True
    assert Path(runner.results["modulefile"]["path"]).parent == tmp_path / "mods" / "s"


# --- issue 16: family clash, archived stacks, extensions filter -----------------------------------

def pytorch_site_tree(root: Path, fmt: str) -> Path:
    """A site tree whose ``pytorch/1.13.1`` claims ``family python`` (as NERSC's and ALCF's do)."""
    path = root / "pytorch" / ("1.13.1.lua" if fmt == "lua" else "1.13.1")
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "lua":
        path.write_text('family("python")\nsetenv("SITE_PYTORCH", "1.13.1")\n')
    else:
        path.write_text('#%Module1.0\nfamily python\nsetenv SITE_PYTORCH 1.13.1\n')
    return root


@pytest.mark.lmod
@pytest.mark.parametrize("fmt,system", FOUR, ids=FOUR_IDS)
def test_no_family_clash_with_site_module(tmp_path, fmt, system, request):
    """A stack layered over a site module of family python does not claim python itself,
    so loading it keeps its dependency (no "automatically replacing"); without a family clash
    (no such dependency) the stack keeps family python."""
    init = request.getfixturevalue(system)
    site = pytorch_site_tree(tmp_path / "site", "lua" if system == "lmod" else "tcl")
    specs = tmp_path / "specs"
    write_spec(specs, "layered", """\
        name: layered
        summary: extra packages over the site's PyTorch
        distribution: {name: site, version: "1.0"}
        engine: venv
        site: {name: testsite, modules: [pytorch/1.13.1]}
        """)
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text("version = 3.11.7\n")
    root = tmp_path / "mods"
    env = {"ENVTOOL_SPEC_PATH": str(specs), "MODULEPATH": str(site)}
    proc = run_envtool("modulefile", "layered", "--prefix", prefix, "--root", root, "--format", fmt, "--json",
                       env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["content"]["family"] is None and any("claims it" in n for n in out["content"]["notes"])
    before, after, proc = load_unload(init, system, root, "layered/1.0", tmp_path, extra_roots=(site,),
                                      check='echo "LOADED=$LOADEDMODULES SITE=$SITE_PYTORCH"')
    assert "LOADED=pytorch/1.13.1:layered/1.0 SITE=1.13.1" in proc.stdout, proc.stdout + proc.stderr
    assert "replacing" not in proc.stderr.lower() and "conflict" not in proc.stderr.lower(), proc.stderr
    assert_same_env(before, after)
    # the check can fail: forcing the family back in makes the module systems swap or refuse
    content = build_content(prefix, name="clash", version="1.0", modulepath=str(site))
    assert content.family == "python"
    content = replace(content, depends_on=("pytorch/1.13.1",))
    write_modulefile(content, root, fmt)
    proc = module_shell(init, f'module use {site} {root}; module load clash/1.0; echo "LOADED=$LOADEDMODULES"')
    clean = "LOADED=pytorch/1.13.1:clash/1.0\n" in proc.stdout and not re.search(r"replacing|conflict",
                                                                                 proc.stderr, re.I)
    assert not clean, proc.stdout + proc.stderr


@pytest.mark.lmod
@pytest.mark.parametrize("fmt,system", FOUR, ids=FOUR_IDS)
def test_archived_stack_warns_on_load(tmp_path, fmt, system, request):
    """A spec with status archived (the WML-CE specs: seed 001) warns on every load; the load works."""
    init = request.getfixturevalue(system)
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    root = tmp_path / "mods"
    proc = run_envtool("modulefile", "ibm-wml-ce-1.7.0", "--prefix", prefix, "--root", root, "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    proc = module_shell(init, f'module use {root}; module load ibm-wml-ce-1.7.0/1.7.0; echo "rc=$? '
                              f'LOADED=$LOADEDMODULES"; module unload ibm-wml-ce-1.7.0 2>&1; echo UNLOADED')
    assert "rc=0 LOADED=ibm-wml-ce-1.7.0/1.7.0" in proc.stdout, proc.stdout + proc.stderr
    err = " ".join(proc.stderr.split())
    assert "is archived (since 2020-11-10)" in err and "Open-CE" in err, proc.stderr
    # on load only
    assert "archived" not in proc.stdout.split("UNLOADED")[0].split("LOADED=")[1], proc.stdout
    # an active stack says nothing
    proc = run_envtool("modulefile", "open-ce-1.11", "--prefix", prefix, "--root", root, "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    proc = module_shell(init, f"module use {root}; module load open-ce-1.11/1.11")
    assert proc.returncode == 0 and "archived" not in proc.stderr, proc.stderr


def test_extensions_spec_filter(tmp_path):
    """--extensions spec keeps what the spec names (conda and pip pins), the frameworks and Horovod."""
    prefix = fake_conda_prefix(tmp_path / "env")
    for name, version in (("pip", "23.0"), ("setuptools", "65.0"), ("libfoo", "1.0"), ("mpi4py", "3.1.4")):
        (prefix / "conda-meta" / f"{name}-{version}-0.json").write_text(
            json.dumps({"name": name, "version": version, "build": "0", "build_number": 0}))
    specs = tmp_path / "specs"
    write_spec(specs, "named", """\
        name: named
        engine: conda
        channels: [conda-forge]
        packages:
          conda: ["mpi4py 3.1.*", "python 3.10.*"]
          pip: ["NCCL==2.15.5.1"]
        """)
    env = {"ENVTOOL_SPEC_PATH": str(specs)}
    got = {}
    for mode in ("spec", "all", "none"):
        proc = run_envtool("modulefile", "named", "--prefix", prefix, "--root", tmp_path / mode, "--json",
                           "--extensions", mode, "--name", "named/1", env=env)
        assert proc.returncode == 0, proc.stderr
        got[mode] = {e.split("/")[0] for e in json.loads(proc.stdout)["content"]["extensions"]}
    assert got["spec"] == {"pytorch", "horovod", "mpi4py", "nccl"}
    assert got["all"] == got["spec"] | {"pip", "setuptools", "libfoo"}
    assert got["none"] == set()
    assert "extensions(" not in (tmp_path / "none" / "named" / "1.lua").read_text()
    proc = run_envtool("modulefile", "--prefix", prefix, "--extensions", "some", env=env)
    assert proc.returncode == 2 and "--extensions" in proc.stderr


@pytest.mark.parametrize("env_name", ["mine", "other name's env"])
def test_help_suggests_cloning_to_a_new_prefix(tmp_path, env_name):
    """The module's help suggests ``envtool clone PREFIX --prefix "$HOME"/envs/NAME``: for an
    environment that itself lies in ~/envs under the module's name, that was the environment's own
    path. The suggested lines, run by a real bash with ``HOME`` the environment's home (``envtool``
    a function printing its arguments), must name the environment as source and another prefix."""
    prefix = tmp_path / "envs" / env_name
    (prefix / "bin").mkdir(parents=True)
    proc = run_envtool("modulefile", "--prefix", prefix, "--name", "mine/1", "--root", tmp_path / "mods", "--json")
    assert proc.returncode == 0, proc.stderr
    help_text = json.loads(proc.stdout)["content"]["help"]
    lines = [l.strip() for l in help_text.splitlines() if l.strip().startswith("envtool clone ")]
    assert lines, help_text
    shown = subprocess.run(["bash", "--norc", "--noprofile", "-c",
                            "envtool() { printf '%s\\0' \"$@\"; }\n" + "\n".join(lines)],
                           env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]},
                           capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    argv = shown.stdout.split("\0")[:-1]
    assert argv[:2] == ["clone", str(prefix)], argv
    target = Path(argv[argv.index("--prefix") + 1])
    assert target.parent == tmp_path / "envs" and target != prefix, argv
