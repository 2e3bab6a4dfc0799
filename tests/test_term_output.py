"""Output on a real terminal (issue 27, item 2): the real CLI runs in a pseudo-terminal whose
window is set to 60 columns (TIOCSWINSZ); what it wrote is replayed in a terminal emulator
(pyte) to count the lines it leaves behind. Live lines must be cut to the width (never wrapped,
no stale copies), colour only on a terminal and never with NO_COLOR (https://no-color.org)."""
import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from conftest import REPO
from helpers.speed import scaled

pyte = pytest.importorskip("pyte")

SGR = re.compile(r"\x1b\[[0-9;]*m")


def run_pty(args, columns=60, env=None, timeout=None, cwd=None):
    """Run ``python -m envtool ARGS`` with stdout and stderr on a new pty of ``columns`` columns;
    returns (exit status, everything written, as text)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    full = dict(os.environ)
    for name in ("NO_COLOR", "COLUMNS", "ENVTOOL_DEBUG"):
        full.pop(name, None)
    full["TERM"] = "xterm-256color"
    full.update(env or {})
    proc = subprocess.Popen([sys.executable, "-m", "envtool", *map(str, args)], stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, env=full, cwd=cwd or REPO, start_new_session=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + (scaled(600) if timeout is None else timeout)
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        rc = proc.wait(timeout=scaled(30))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        os.close(master)
    return rc, b"".join(chunks).decode("utf-8", "replace")


def screen(text, columns, rows=3000):
    """The non-blank lines a terminal of ``columns`` shows after ``text`` (rows enough for all)."""
    scr = pyte.Screen(columns, rows)
    pyte.Stream(scr).feed(text)
    return [line.rstrip() for line in scr.display if line.strip()]


def progress_part(text):
    """What was written up to the live line's last erase (the report comes after it)."""
    end = text.rfind("\r\x1b[K")
    return text[:end + len("\r\x1b[K")] if end >= 0 else text.split("\n\n")[0]


def assert_fits(text, columns=60):
    """Every line left behind is at most ``columns`` wide and none was wrapped (the same lines
    on a terminal wide enough for anything); returns those lines."""
    wide = screen(text, 1000)
    assert all(len(line) <= columns for line in wide), [line for line in wide if len(line) > columns]
    narrow = screen(text, columns)
    assert narrow == wide, f"lines were wrapped at {columns} columns:\n" + "\n".join(narrow)
    return wide


@pytest.fixture
def long_named_env(cpu_horovod_env, tmp_path):
    """The cpu-horovod environment seen through a symlink with a long name (doctor keeps a
    symlinked prefix's own name), so a status naming the prefix is wider than 60 columns."""
    link = tmp_path / "an-environment-with-a-rather-long-name-for-a-narrow-terminal"
    link.symlink_to(cpu_horovod_env)
    return link


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_doctor_live_line_fits_60_columns_and_leaves_no_copies(long_named_env):
    rc, out = run_pty(["doctor", "--prefix", long_named_env], columns=60)
    assert rc in (0, 1), out
    assert "\x1b[K" in out, out  # a live line was drawn (and rewritten in place)
    frames = [SGR.sub("", f) for f in out.replace("\r\n", "\n").split("\r\x1b[K")]
    live = [f for f in frames if f.startswith("doctor: examining")]
    assert live and all(len(f) <= 59 for f in live), live
    assert any(f.endswith("…") or "…," in f for f in live), live  # cut with an ellipsis
    # the "doctor: using RECORD" lines are kept output (like the report), printed before the live line
    live_out = re.sub(r"doctor: using [^\r\n]*\r?\n", "", out)
    assert assert_fits(progress_part(live_out), 60) == []  # erased at the end: no line, no stale copy
    lines = screen(out, 60)
    assert not [l for l in lines if l.startswith("doctor: ") and not l.startswith("doctor: using")], lines
    assert any(re.match(r"\d+ ok, \d+ warn, \d+ fail, \d+ skipped", l) for l in lines), lines


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_validate_submit_phases_fit_60_columns(cpu_horovod_env, tmp_path):
    workdir = tmp_path / "a-run-directory-with-a-long-name-so-the-job-script-path-is-wide"
    # a short sweep (its progress lines are drawn too; the default 64 MiB adds some 15 s here)
    rc, out = run_pty(["validate", "--prefix", cpu_horovod_env, "--submit", "--site", "local", "--nodes", "1",
                       "--ranks-per-node", "1", "--sweep-max", "1KiB", "--workdir", workdir], columns=60)
    assert rc == 0, out
    frames = [SGR.sub("", f) for f in out.replace("\r\n", "\n").split("\r\x1b[K")]
    assert any(re.search(r"^validate: running .*…, \d+s$", f) or re.search(r"^validate: running .*, \d+s$", f)
               for f in frames), frames  # the phase with its clock, cut to the width
    lines = assert_fits(progress_part(out), 60)
    running = [l for l in lines if l.startswith("validate: running")]
    assert len(running) <= 1, lines  # the finished phase once, no stale redraws


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_colour_on_a_terminal_only_and_never_with_no_color(long_named_env):
    rc, out = run_pty(["doctor", "--prefix", long_named_env, "--only", "versions"], columns=200)
    assert "\x1b[32mok\x1b[0m" in out, out  # green ok
    rc2, out2 = run_pty(["doctor", "--prefix", long_named_env, "--only", "versions"], columns=200,
                        env={"NO_COLOR": "1"})
    assert rc2 == rc and not SGR.search(out2), out2
    piped = subprocess.run([sys.executable, "-m", "envtool", "doctor", "--prefix", str(long_named_env),
                            "--only", "versions"], capture_output=True, text=True, cwd=REPO, timeout=scaled(300))
    assert "\x1b[" not in piped.stdout + piped.stderr
    assert "ok" in piped.stdout


BUILD_DRIVER = r"""
import sys
from pathlib import Path
from envtool.steps.kernel.runner import Runner
build = "import time\nfor p in range(0, 100, 10):\n    print(f'[{p:3d}%] Building CXX object horovod/common/f{p}.cc.o', flush=True)\n    time.sleep(0.4)\n"
with Runner(Path(sys.argv[1])) as r:
    r.run([sys.executable, "-c", build], progress="compiling Horovod 0.28.1 with MPI and Gloo for PyTorch 2.13")
print("driver done", file=sys.stderr, flush=True)
"""


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_build_live_line_fits_60_columns(tmp_path):
    """The runner's live build line (the Horovod compile's) in a 60-column pty: cut, never wrapped."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 60, 0, 0))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([sys.executable, "-c", BUILD_DRIVER, str(tmp_path / "build.log")],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], scaled(60))
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=scaled(30)) == 0
    out = b"".join(chunks).decode()
    frames = [f for f in out.replace("\r\n", "\n").split("\r\x1b[K") if "compiling Horovod" in f]
    assert len(frames) >= 4 and all(len(f) <= 59 and re.search(r"…, \d+s$", f) for f in frames), frames
    assert screen(out, 60) == screen(out, 1000) == ["driver done"]  # nothing wrapped, nothing left


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_doctor_speaks_words_counts_right_and_gives_one_verdict_per_line(cpu_horovod_env):
    from conftest import run_envtool

    proc = run_envtool("doctor", "--prefix", cpu_horovod_env, "--only", "versions", "start-method", "-v", timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr
    assert "{'" not in proc.stdout and "['" not in proc.stdout and "': " not in proc.stdout, proc.stdout
    assert re.search(r"^\s+found: python 3\.\d+", proc.stdout, re.M), proc.stdout
    for line in proc.stdout.splitlines():  # a verdict line says one thing
        assert not (line.startswith("ok ") and re.search(r"\b(risky|FAILED|fail)\b", line)), line
    one = run_envtool("doctor", "--prefix", cpu_horovod_env, "--only", "versions", timeout=scaled(300))
    assert "(1 check)" in one.stderr and "checks)" not in one.stderr, one.stderr


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_specs_table_fits_the_width(columns):
    from conftest import run_envtool

    proc = run_envtool("specs", env={"COLUMNS": str(columns)}, timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # a URL longer than the width is kept whole on its own line (cutting it would break it)
    assert len(lines) > 20 and all(len(l) <= columns or re.fullmatch(r"\s*\S+", l) for l in lines), lines
    headers = lines[0].split()
    assert headers[0] == "SPEC" and {"PYTORCH", "HOROVOD"} <= set(headers)
    if columns == 200:
        assert len(headers) == 13 and "left out" not in proc.stderr
    else:
        assert len(headers) < 13 and "columns left out" in proc.stderr
    rc, out = run_pty(["specs"], columns=columns)  # on a terminal: its own width, without COLUMNS
    table = out.split("note: ")[0]
    assert rc == 0 and assert_fits(table, columns)


def test_specs_site_column_and_site_filter():
    import json

    from conftest import run_envtool

    rows = {r["name"]: r for r in json.loads(run_envtool("specs", "--json", timeout=scaled(300)).stdout)["specs"]}
    assert rows["open-ce-1.1.3"]["site"] == "bede,summit"  # both site files map it in stacks
    assert rows["open-ce-1.11"]["site"] == "bede"  # bede's open-ce-* glob; summit lists no 1.11
    assert rows["ibm-wml-ce-1.6.1"]["site"] == "bede,summit"
    assert rows["cpu-horovod"]["site"] == "local" and rows["polaris-conda-2023-10-04"]["site"] == "polaris"
    proc = run_envtool("specs", "--json", "--site", "perlmutter", timeout=scaled(300))
    names = {r["name"] for r in json.loads(proc.stdout)["specs"]}
    assert names == {"perlmutter-horovod", "nersc-pytorch-1.13.1", "nersc-tensorflow-2.9.0"}, names


BYTECODE_DRIVER = r"""
import sys
from pathlib import Path
from envtool.probes import probe_path
from envtool.steps.kernel.runner import Runner
with Runner(Path(sys.argv[1]), live=False) as r:
    r.run([sys.executable, str(probe_path("bytecode")), sys.argv[2], ""], progress="compiling bytecode",
          progress_kind="install")
"""


def test_bytecode_step_shows_counts(tmp_path):
    """The bytecode step (the real probe on a copy of the standard library) shows N/M files."""
    import shutil
    import sysconfig

    lib = tmp_path / "lib"
    shutil.copytree(sysconfig.get_paths()["stdlib"], lib,
                    ignore=shutil.ignore_patterns("site-packages", "test", "tests", "idlelib", "__pycache__", "*.pyc"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", BYTECODE_DRIVER, str(tmp_path / "b.log"), str(lib)],
                          capture_output=True, text=True, env=env, timeout=scaled(600))
    assert proc.returncode == 0, proc.stderr
    counts = [tuple(map(int, m.groups())) for m in re.finditer(r"compiling bytecode: (\d+)/(\d+) files, \d+s", proc.stderr)]
    total = counts[-1][1] if counts else 0
    assert total > 500 and counts[-1] == (total, total), proc.stderr
    assert counts and counts == sorted(counts), proc.stderr  # counts move forward (one line when it is quick)
    assert "starting" not in proc.stderr, proc.stderr


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_check_build_shows_what_runs(long_named_env):
    rc, out = run_pty(["check-build", "--prefix", long_named_env], columns=60)
    assert rc == 0, out
    frames = [f for f in out.replace("\r\n", "\n").split("\r\x1b[K") if f.startswith("check-build: running")]
    assert frames and all(len(f) <= 59 and re.search(r", \d+s$", f) for f in frames), frames
    assert assert_fits(progress_part(out), 60) == []
    assert "Horovod 0.28" in out
