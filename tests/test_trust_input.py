"""Issue 23, item 3: one input gate for everything that reaches a generated file.

* Command-line values that reach a job script or a modulefile get the checks site files get
  (control characters, module-name, scheduler-name and path patterns, ``--time`` formats): exit 2
  naming the option, nothing written. A fuzz test drives every ``jobscript`` and
  ``validate --submit`` option with control characters through the real CLI.
* Job scripts are checked with ``bash -n`` and run with a planted command that would create a
  marker file.
* ``extends:`` takes spec names or files beside the spec, and never echoes another file's contents.
* ``env:`` cannot replace ``PATH``-like variables or set loader/shell hooks; ``{prepend: …}`` /
  ``{append: …}`` is the reversible form, checked by loading and unloading real modulefiles in
  Lmod and in Environment Modules.
* ``horovod.extra_env`` cannot contradict the ``HOROVOD_*`` flags derived from the spec.
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, run_envtool

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from helpers.speed import scaled  # noqa: E402


def make_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    return make_venv(tmp_path_factory.mktemp("trust") / "venv")


def slurm_site(tmp: Path) -> Path:
    """A Slurm site file whose launcher is ``srun`` (a stand-in launcher is put on PATH to run it)."""
    site = tmp / "plainslurm.yaml"
    site.write_text("name: plainslurm\nscheduler: slurm\ngpus_per_node: 0\nbatch:\n  cpus_per_node: 4\n")
    return site


INJECT = "x\ntouch {marker} #"


def cli(argv, cwd: Path) -> int:
    """The real CLI (``envtool.cli.main.main``) in this process: exit status; output discarded."""
    from envtool.cli.main import main

    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                rc = main([str(a) for a in argv])
            except SystemExit as exc:  # argparse
                rc = exc.code
    finally:
        os.chdir(old)
    cli.stderr = err.getvalue()
    return rc


# --- job-script injection through CLI options ---------------------------------------------------

JOBSCRIPT_OPTIONS = ["--queue", "--account", "--job-name", "--job-output", "--workdir", "--time", "--module",
                     "--spec", "--site"]


@pytest.mark.parametrize("option", JOBSCRIPT_OPTIONS)
def test_jobscript_option_with_newline_is_refused(tmp_path, venv, option):
    """A newline in an option used to end the ``#SBATCH`` comment and run the rest as a shell line."""
    marker = tmp_path / "planted"
    out = tmp_path / "job.sh"
    target = ["--module", INJECT.format(marker=marker)] if option == "--module" else \
        ["--prefix", venv, option, INJECT.format(marker=marker)]
    proc = run_envtool("jobscript", "--site-file", slurm_site(tmp_path), *target, "--nodes", "1",
                       "--ranks-per-node", "1", "--output", out, "--", "true", timeout=scaled(120))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert option in proc.stderr and "control character" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() and not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plainslurm.yaml"]


@pytest.mark.parametrize("option,value,words", [
    ("--queue", "-x", "scheduler name"), ("--account", "a b", "scheduler name"),
    ("--job-name", "a" * 201, "scheduler name"), ("--module", "gcc 12", "module name"),
    ("--time", "10:00", "HH:MM:SS"), ("--time", "1:2:3\r", "control character"),
])
def test_jobscript_option_patterns(tmp_path, venv, option, value, words):
    out = tmp_path / "job.sh"
    target = [f"--module={value}"] if option == "--module" else ["--prefix", venv, f"{option}={value}"]
    proc = run_envtool("jobscript", "--site-file", slurm_site(tmp_path), *target, "--nodes", "1",
                       "--ranks-per-node", "1", "--output", out, "--", "true", timeout=scaled(120))
    assert proc.returncode == 2 and option in proc.stderr and words in proc.stderr, proc.stderr
    assert not out.exists()


def test_job_script_runs_without_the_planted_command(tmp_path, venv):
    """Values the gate lets through (shell syntax in paths and the command) stay words: ``bash -n``
    passes and running the script (with a stand-in ``srun``) never creates the marker."""
    marker = tmp_path / "planted"
    workdir = tmp_path / "w'$(touch planted)`touch planted`;touch planted"  # a relative marker: no '/'
    workdir.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # a stand-in for the launcher (horovodrun without a site launcher): drop its options, run the command
    (bindir / "horovodrun").write_text('#!/bin/bash\nwhile [ "$1" != python ]; do shift; done\nexec "$@"\n')
    (bindir / "horovodrun").chmod(0o755)
    out = tmp_path / "job.sh"
    proc = run_envtool("jobscript", "--site-file", slurm_site(tmp_path), "--prefix", venv, "--nodes", "1",
                       "--ranks-per-node", "1", "--job-name", "a$(touch${IFS}planted)", "--queue", "q@s", "--account", "acct",
                       "--job-output", str(tmp_path / f"o$(touch {marker}).out"), "--workdir", workdir,
                       "--time", "0:10:00", "--output", out, "--",
                       "python", "-c", "import os; print('RAN', os.getcwd())", f"$(touch {marker})", timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr
    assert subprocess.run(["bash", "-n", str(out)], capture_output=True).returncode == 0
    ran = subprocess.run(["bash", str(out)], capture_output=True, text=True, timeout=scaled(120), cwd=tmp_path,
                         env=dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}"))
    assert ran.returncode == 0, ran.stderr
    assert f"RAN {workdir}" in ran.stdout
    assert not marker.exists() and not (workdir / "planted").exists()


# --- fuzz: every jobscript and validate --submit option, control characters -> exit 2, no file ----

CONTROLS = ["\n", "\r", "\x00", "\x1b", "\t", "\x7f", "\x0b", "\x0c", "\x1f"]
hostile = st.tuples(st.text(max_size=6), st.sampled_from(CONTROLS), st.text(max_size=6)).map("".join)

FUZZ_JOBSCRIPT = ["--queue", "--account", "--job-name", "--job-output", "--workdir", "--time", "--module", "--spec",
                  "--site", "--site-file", "--prefix", "--output"]
FUZZ_VALIDATE = ["--queue", "--account", "--time", "--workdir", "--module", "--spec", "--site", "--site-file",
                 "--prefix", "--plot"]


@settings(max_examples=int(os.environ.get("ENVTOOL_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(command=st.sampled_from(["jobscript", "validate"]), data=st.data(), value=hostile)
def test_fuzz_every_option_with_control_characters(tmp_path_factory, venv, command, data, value):
    work = tmp_path_factory.mktemp("fuzz")
    site = slurm_site(work)
    option = data.draw(st.sampled_from(FUZZ_JOBSCRIPT if command == "jobscript" else FUZZ_VALIDATE))
    good = {"--site-file": site, "--prefix": venv, "--workdir": work / "run", "--output": work / "job.sh",
            "--time": "0:05:00", "--queue": "debug", "--account": "acct"}
    if option == "--module":
        good.pop("--prefix")
    if option == "--site":
        good.pop("--site-file")
    good[option] = value
    argv = [command]
    for k, v in good.items():
        if command == "validate" and k == "--output":
            continue
        argv.append(f"{k}={v}")
    if command == "validate":
        argv += ["--submit", "--nodes", "1", "--ranks-per-node", "1", "--timeout", "5"]
        if option == "--plot":
            argv += ["--benchmark"]
    else:
        argv += ["--nodes", "1", "--ranks-per-node", "1", "--", "true"]
    before = sorted(p.name for p in work.iterdir())
    rc = cli(argv, work)
    assert rc == 2, (argv, rc, cli.stderr)
    assert option in cli.stderr, cli.stderr
    assert sorted(p.name for p in work.iterdir()) == before  # no script, no run directory


# --- extends: spec names or files beside the spec; never the contents of another file -------------

SECRET = "topsecret-line-9f3a: hunter2"


@pytest.fixture
def secret_file(tmp_path):
    """A file only root may read, holding a line that looks like YAML (as /etc/shadow's do)."""
    d = tmp_path / "private"
    d.mkdir()
    f = d / "shadow"
    f.write_text(SECRET + "\n")
    f.chmod(0o600)
    return f


def show(spec: Path, cwd: Path):
    return run_envtool("show", spec, cwd=cwd, timeout=scaled(120), env={"PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("how", ["absolute", "dotdot", "subdir", "symlink-beside", "symlink-yaml-beside"])
def test_extends_outside_the_spec_directory_is_refused_unread(tmp_path, secret_file, how):
    specs = tmp_path / "specs"
    specs.mkdir()
    if how == "absolute":
        value = str(secret_file)
    elif how == "dotdot":
        value = "../private/shadow"
    elif how == "subdir":
        value = "private/shadow.yaml"
        (specs / "private").mkdir()
        (specs / "private" / "shadow.yaml").symlink_to(secret_file)
    else:
        name = "shadow.yaml" if how == "symlink-yaml-beside" else "shadow"
        (specs / name).symlink_to(secret_file)
        value = name
    (specs / "kid.yaml").write_text(f"name: kid\nextends: {value}\n")
    proc = show(specs / "kid.yaml", specs)  # run from the spec's directory, as a user would
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "extends" in proc.stderr and "kid.yaml:2" in proc.stderr, proc.stderr
    assert "topsecret" not in proc.stderr + proc.stdout and "hunter2" not in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("body,line", [(SECRET + "\n", 1), ("a: 1\n" + SECRET + " [unclosed\n", 1),
                                       ("a: [1\n" + SECRET + "\n", 2), (SECRET + "\n" + SECRET + "\n", 2)])
def test_a_non_spec_file_beside_the_spec_is_named_not_echoed(tmp_path, body, line):
    """A YAML file beside the spec that is not a spec: the error names the file and line only."""
    (tmp_path / "notes.yaml").write_text(body)
    (tmp_path / "kid.yaml").write_text("name: kid\nextends: notes.yaml\n")
    proc = show(tmp_path / "kid.yaml", tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"notes.yaml:{line}:" in proc.stderr and "kid.yaml:2" in proc.stderr, proc.stderr
    assert "topsecret" not in proc.stderr and "hunter2" not in proc.stderr, proc.stderr


def test_extends_a_spec_beside_by_file_or_name(tmp_path):
    (tmp_path / "base.yaml").write_text("extends: cpu-horovod\nsummary: from the base beside\n")
    for value in ("base.yaml", "./base.yaml", "base"):
        (tmp_path / "kid.yaml").write_text(f"name: kid\nextends: {value}\n")
        proc = run_envtool("show", tmp_path / "kid.yaml", "--json", cwd="/", timeout=scaled(120),
                           env={"PYTHONPATH": str(REPO)})
        assert proc.returncode == 0, proc.stderr
        assert '"summary": "from the base beside"' in proc.stdout


# --- env: no replaced search paths, no hooks; {prepend|append} is reversible ----------------------

def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


HOSTILE_ENV = [("PATH", "/x/bin", "prepend"), ("LD_LIBRARY_PATH", "/x/lib", "prepend"),
               ("PYTHONPATH", "/x/py", "prepend"), ("MANPATH", "/x/man", "prepend"),
               ("LD_PRELOAD", "/x/evil.so", "hook"), ("LD_AUDIT", "/x/a.so", "hook"),
               ("BASH_ENV", "/x/rc", "hook"), ("PROMPT_COMMAND", "touch /x/m", "hook"),
               ("PYTHONSTARTUP", "/x/s.py", "hook"), ("PYTHONHOME", "/x", "hook"), ("ENV", "/x/rc", "hook")]


@pytest.mark.parametrize("var,value,kind", HOSTILE_ENV, ids=[v for v, _, _ in HOSTILE_ENV])
@pytest.mark.parametrize("where", ["spec env", "spec site.env", "site file env", "stack env", "batch env"])
def test_env_cannot_replace_a_search_path_or_set_a_hook(tmp_path, var, value, kind, where):
    spec_env = f"env:\n  {var}: {value!r}\n" if where == "spec env" else ""
    if where == "spec site.env":
        spec_env = f"site:\n  env:\n    {var}: {value!r}\n"
    spec = write(tmp_path / "specs" / "kid.yaml", "name: kid\nextends: cpu-horovod\n" + spec_env)
    site_body = "name: tsite\n"
    if where == "site file env":
        site_body += f"env:\n  {var}: {value!r}\n"
    elif where == "stack env":
        site_body += f"stacks:\n  kid:\n    env:\n      {var}: {value!r}\n"
    elif where == "batch env":
        site_body += f"batch:\n  env:\n    {var}: {value!r}\n"
    site = write(tmp_path / "tsite.yaml", site_body)
    proc = run_envtool("show", spec, "--site-file", site, timeout=scaled(120))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    field = {"spec env": f"env.{var}", "spec site.env": f"site.env.{var}", "site file env": f"env.{var}",
             "stack env": f"stacks.kid.env.{var}", "batch env": f"batch.env.{var}"}[where]
    assert f": {field}:" in proc.stderr, proc.stderr
    assert str(spec if where.startswith("spec") else site) in proc.stderr, proc.stderr
    if kind == "prepend":
        assert f"{{{var}: {{prepend:" in proc.stderr, proc.stderr  # says what to write instead
    else:
        assert "hook" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("body,words", [
    ("env:\n  LD_PRELOAD: {prepend: /x}\n", "hook"),
    ("env:\n  PATH: {prepend: '/a:/b'}\n", "one path entry each"),
    ("env:\n  PATH: {insert: /a}\n", "prepend"),
    ("env:\n  PATH: {prepend: []}\n", "non-empty list"),
    ("env:\n  PATH: {prepend: \"/a\\nb\"}\n", "control"),
    ("horovod:\n  extra_env: {PATH: {prepend: /a}}\n", "build variables take no prepend"),
    ("horovod:\n  extra_env: {LD_PRELOAD: /x.so}\n", "hook"),
])
def test_env_reversible_form_is_checked(tmp_path, body, words):
    spec = write(tmp_path / "kid.yaml", "name: kid\nextends: cpu-horovod\n" + body)
    proc = run_envtool("show", spec, timeout=scaled(120))
    assert proc.returncode == 2 and words in proc.stderr and "kid.yaml:" in proc.stderr, proc.stderr


PREPEND_SPEC = """\
    name: kid
    extends: cpu-horovod
    env:
      PATH: {prepend: [/opt/kid/bin, /opt/kid/tools]}
      PYTHONPATH: {prepend: /opt/kid/py}
      MANPATH: {append: /opt/kid/man}
      OMP_NUM_THREADS: "3"
    """


def test_prepend_reaches_show_and_job_script(tmp_path, venv):
    spec = write(tmp_path / "kid.yaml", PREPEND_SPEC)
    proc = run_envtool("show", spec, "--json", timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr
    import json

    env = json.loads(proc.stdout)["env"]
    assert env["PATH"] == {"prepend": ["/opt/kid/bin", "/opt/kid/tools"]} and env["MANPATH"] == {
        "append": ["/opt/kid/man"]}
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "horovodrun").write_text('#!/bin/bash\nwhile [ "$1" != python ]; do shift; done\nexec "$@"\n')
    (bindir / "horovodrun").chmod(0o755)
    out = tmp_path / "job.sh"
    proc = run_envtool("jobscript", "--spec", spec, "--site", "local", "--prefix", venv, "--nodes", "1",
                       "--ranks-per-node", "1", "--output", out, "--", "python", "-c",
                       "import os; print(os.environ['PATH']); print(os.environ['PYTHONPATH']); "
                       "print(os.environ.get('MANPATH'))", timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0
    base_path = f"{bindir}:/usr/bin:/bin"
    env = {"PATH": base_path, "HOME": str(tmp_path)}
    ran = subprocess.run(["bash", str(out)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=scaled(60))
    assert ran.returncode == 0, ran.stderr
    path, pythonpath, manpath = ran.stdout.splitlines()
    assert path == f"/opt/kid/bin:/opt/kid/tools:{venv}/bin:{base_path}", path
    assert pythonpath == "/opt/kid/py" and manpath == "/opt/kid/man"  # unset before: no empty entry


@pytest.mark.lmod
@pytest.mark.parametrize("fmt,system", [("lua", "lmod"), ("tcl", "lmod"), ("tcl", "envmodules")],
                         ids=["lua-lmod", "tcl-lmod", "tcl-envmodules"])
def test_prepend_modulefile_load_unload_restores_path(tmp_path, venv, fmt, system):
    """Real Lmod and Environment Modules in a real bash: the spec's prepend/append entries are in
    front of (behind) the user's after ``module load``, and after ``module unload`` PATH,
    PYTHONPATH and MANPATH are exactly what they were before."""
    from test_modulefile import ENVMODULES_INIT, LMOD_INIT, _need, assert_same_env, load_unload

    init = _need(LMOD_INIT, "Lmod") if system == "lmod" else _need(ENVMODULES_INIT, "Environment Modules")
    spec = write(tmp_path / "kid.yaml", PREPEND_SPEC)
    root = tmp_path / "mods"
    proc = run_envtool("modulefile", spec, "--prefix", venv, "--root", root, "--format", fmt, "--name", "kid/1.0",
                       timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr
    check = 'echo "PATH=$PATH"; echo "PYTHONPATH=$PYTHONPATH"; echo "MANPATH=$MANPATH"'
    env = {"PYTHONPATH": "/home/u/py", "MANPATH": "/usr/share/man"}
    before, after, proc = load_unload(init, system, root, "kid/1.0", tmp_path, env=env, check=check)
    assert f"PATH=/opt/kid/bin:/opt/kid/tools:{venv}/bin:/usr/bin:/bin\n" in proc.stdout, proc.stdout
    assert "PYTHONPATH=/opt/kid/py:/home/u/py\n" in proc.stdout, proc.stdout
    assert "MANPATH=/usr/share/man:/opt/kid/man\n" in proc.stdout, proc.stdout
    assert before["PATH"] == after["PATH"] == "/usr/bin:/bin"
    assert before["PYTHONPATH"] == after["PYTHONPATH"] == "/home/u/py"
    assert_same_env(before, after)


@pytest.mark.parametrize("var", ["PATH", "LD_PRELOAD", "PYTHONPATH", "BASH_ENV", "PROMPT_COMMAND"])
def test_modulefile_and_jobscript_refuse_env_that_replaces_path_or_sets_a_hook(tmp_path, venv, var):
    """The issue's finding: ``env: {PATH: /x/bin}`` became a PATH replaced outright in the modulefile."""
    spec = write(tmp_path / "kid.yaml", f"name: kid\nextends: cpu-horovod\nenv:\n  {var}: /x/bin\n")
    root = tmp_path / "mods"
    proc = run_envtool("modulefile", spec, "--prefix", venv, "--root", root, timeout=scaled(120))
    assert proc.returncode == 2 and f"env.{var}" in proc.stderr and "kid.yaml:4" in proc.stderr, proc.stderr
    assert not root.exists()
    out = tmp_path / "job.sh"
    proc = run_envtool("jobscript", "--spec", spec, "--site", "local", "--prefix", venv, "--nodes", "1",
                       "--ranks-per-node", "1", "--output", out, "--", "true", timeout=scaled(120))
    assert proc.returncode == 2 and f"env.{var}" in proc.stderr, proc.stderr
    assert not out.exists()


# --- horovod.extra_env against the derived HOROVOD_* flags -----------------------------------------

@pytest.mark.parametrize("extra,field,words", [
    ("HOROVOD_WITH_MPI: '1'", "HOROVOD_WITH_MPI", ["HOROVOD_WITHOUT_MPI=1", "HOROVOD_WITH_MPI=1",
                                                   "horovod.controllers"]),
    ("HOROVOD_WITHOUT_GLOO: '1'", "HOROVOD_WITHOUT_GLOO", ["HOROVOD_WITH_GLOO=1", "HOROVOD_WITHOUT_GLOO=1"]),
    ("HOROVOD_WITH_PYTORCH: '0'", "HOROVOD_WITH_PYTORCH", ["HOROVOD_WITH_PYTORCH=1", "HOROVOD_WITH_PYTORCH=0",
                                                           "horovod.frameworks"]),
    ("HOROVOD_WITH_TENSORFLOW: '1'", "HOROVOD_WITH_TENSORFLOW", ["HOROVOD_WITHOUT_TENSORFLOW=1"]),
    ("HOROVOD_CPU_OPERATIONS: MPI", "HOROVOD_CPU_OPERATIONS", ["HOROVOD_CPU_OPERATIONS=GLOO",
                                                               "horovod.cpu_operations"]),
])
def test_extra_env_contradicting_derived_flags_is_refused(tmp_path, extra, field, words):
    spec = write(tmp_path / "kid.yaml", f"""\
        name: kid
        extends: cpu-horovod
        horovod:
          controllers: [gloo]
          cpu_operations: gloo
          extra_env:
            {extra}
        expect:
          check_build: {{frameworks: [PyTorch], controllers: [Gloo]}}
        """)
    for command in (["show", spec], ["plan", spec, "--prefix", tmp_path / "env"]):
        proc = run_envtool(*command, timeout=scaled(120))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"horovod.extra_env.{field}" in proc.stderr and "kid.yaml" in proc.stderr, proc.stderr
        for w in words:
            assert w in proc.stderr, proc.stderr
    assert not (tmp_path / "env").exists()


def test_extra_env_repeating_a_derived_value_or_adding_another_is_kept(tmp_path):
    spec = write(tmp_path / "kid.yaml", """\
        name: kid
        extends: cpu-horovod
        horovod:
          extra_env: {HOROVOD_WITH_GLOO: '1', HOROVOD_MPI_THREADS_DISABLE: '1'}
        """)
    proc = run_envtool("show", spec, "--json", timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr
    import json

    build = json.loads(proc.stdout)["horovod"]["build_env"]
    assert build["HOROVOD_WITH_GLOO"] == "1" and build["HOROVOD_MPI_THREADS_DISABLE"] == "1"


# --- modulefile and publish options --------------------------------------------------------------

@pytest.mark.parametrize("argv,option", [
    (["modulefile", "cpu-horovod", "--prefix", "{venv}", "--root", "{tmp}/m\nx"], "--root"),
    (["modulefile", "cpu-horovod", "--prefix", "{venv}", "--root", "{tmp}/m", "--name", "a/1\r"], "--name"),
    (["modulefile", "cpu-horovod", "--prefix", "{venv}", "--root", "{tmp}/m", "--name", "a b/1"], "--name"),
    (["publish", "cpu-horovod", "--root", "{tmp}/sw\ntouch x", "--modulefiles", "{tmp}/m"], "--root"),
    (["publish", "cpu-horovod", "--root", "{tmp}/sw", "--modulefiles", "{tmp}/m\n"], "--modulefiles"),
    (["publish", "cpu-horovod", "--root", "{tmp}/sw", "--modulefiles", "{tmp}/m", "--group", "g\nx"], "--group"),
    (["publish", "cpu-horovod", "--root", "{tmp}/sw", "--modulefiles", "{tmp}/m", "--group", "-g"], "--group"),
    (["plan", "cpu-horovod", "--modulefile-root", "{tmp}/m\x1b"], "--modulefile-root"),
])
def test_modulefile_and_publish_options_are_gated(tmp_path, venv, argv, option):
    args = [a.format(venv=venv, tmp=tmp_path) for a in argv]
    i = args.index(option)
    args[i:i + 2] = [f"{option}={args[i + 1]}"]
    proc = run_envtool(*args, timeout=scaled(120))
    assert proc.returncode == 2 and option in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["0.1", "0", "-1", "soon", "inf", "nan"])
def test_a_bad_job_poll_interval_is_refused_before_anything_is_written(tmp_path, venv, value):
    """``ENVTOOL_JOB_POLL`` (the longest pause between two looks at a submitted job) below 0.2 s,
    not a number or not finite: exit 2 naming the variable and the value, before the run directory
    (where the job script would be written) exists."""
    from conftest import run_envtool

    site = slurm_site(tmp_path)
    proc = run_envtool("validate", "--prefix", venv, "--site-file", site, "--submit", "--nodes", "1",
                       "--ranks-per-node", "1", "--workdir", tmp_path / "run", "--timeout", "5",
                       env={"ENVTOOL_JOB_POLL": value}, timeout=scaled(120))
    assert proc.returncode == 2, proc.stderr
    assert "ENVTOOL_JOB_POLL: expected a number of seconds >= 0.2" in proc.stderr and repr(value) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()
