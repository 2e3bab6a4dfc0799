"""Progress of a long build: a live line on a terminal (a real pty), plain lines elsewhere, every
line with -v; the timeout and process-group kill still hold. The build is a real subprocess
printing CMake- and pip-like lines."""
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envtool.core.errors import StepFailed
from envtool.steps.kernel.runner import Runner
from helpers.speed import scaled

REPO = Path(__file__).resolve().parent.parent

#: a fake build: pip's and CMake's kind of lines, with pauses so the live line is redrawn
BUILD = r"""
import sys, time
lines = ["Collecting horovod==0.28.1", "  Building wheel for horovod (setup.py): started",
         "-- The CXX compiler identification is GNU 12.2.0", "-- Configuring done"]
lines += [f"[{p:3d}%] Building CXX object horovod/common/CMakeFiles/x.dir/f{p}.cc.o" for p in range(5, 100, 15)]
lines += ["[100%] Linking CXX shared library libhorovod.so", "  Created wheel for horovod: filename=h.whl"]
for line in lines:
    print(line, flush=True)
    time.sleep(0.6)
"""

DRIVER = r"""
import sys
from pathlib import Path
from envtool.steps.kernel.runner import Runner
with Runner(Path(sys.argv[1]), verbose=sys.argv[2] == "-v") as r:
    r.run([sys.executable, "-c", sys.argv[3]], progress="compiling Horovod")
print("driver done", file=sys.stderr, flush=True)
"""


def _drive(tmp_path, verbose=False, tty=False):
    """Run the driver in a child process; returns (stderr text, log text)."""
    log = tmp_path / "build.log"
    argv = [sys.executable, "-c", DRIVER, str(log), "-v" if verbose else "-", BUILD]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if not tty:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=scaled(60), env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr, log.read_text()
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + scaled(60)
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(timeout=scaled(10)) == 0
    return b"".join(chunks).decode(), log.read_text()


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_live_line_on_a_terminal(tmp_path):
    out, log = _drive(tmp_path, tty=True)
    frames = [f for f in out.replace("\r\n", "\n").split("\r\x1b[K") if f.strip()]
    assert len(frames) >= 8, out  # redrawn in place, many times
    assert any("compiling Horovod: configuring (CMake)" in f for f in frames), frames
    import re

    seen = [(int(m.group(1)), int(m.group(2))) for f in frames
            for m in [re.search(r"compiling \[\s*(\d+)%\], (\d+) objects? built, \d+s$", f)] if m]
    assert len(set(seen)) >= 4 and seen == sorted(seen), frames  # percent and objects move forward
    assert all(n == (p - 5) // 15 + 1 for p, n in seen), seen  # one object per CMake line, as printed
    assert any("linking [100%], 7 objects built" in f for f in frames), frames
    assert "Building CXX object" not in out  # the build's own lines stay in the log
    assert "Building CXX object" in log and "[100%] Linking CXX shared library" in log
    assert out.rstrip().endswith("driver done")
    assert out.split("driver done")[0].endswith("\r\x1b[K")  # the live line was erased at the end


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_plain_lines_when_not_a_terminal(tmp_path):
    err, log = _drive(tmp_path)
    assert "\r" not in err and "\x1b" not in err
    lines = [l.strip() for l in err.splitlines() if l.startswith("      compiling Horovod: ")]
    phases = [l.split(": ", 1)[1].split(" [")[0].split(",")[0] for l in lines]
    assert phases[:4] == ["fetching the source", "preparing", "configuring (CMake)", "compiling"], lines
    assert "linking" in phases and phases[-1] == "packing the wheel", lines
    assert any(l.startswith("compiling Horovod: compiling [ 65%], 5 objects built, ") for l in lines), lines
    assert len(lines) <= 12  # a line per phase and per 10 %, not per output line
    assert "Building CXX object" not in err and "Building CXX object" in log


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_verbose_streams_every_line_and_no_live_line(tmp_path):
    err, _ = _drive(tmp_path, verbose=True, tty=True)
    assert "  | [ 50%] Building CXX object" in err
    assert "\x1b[K" not in err


def test_timeout_kills_the_group_while_progress_is_shown(tmp_path):
    with Runner(tmp_path / "log", live=True) as r:
        started = time.monotonic()
        with pytest.raises(StepFailed, match="timed out"):
            r.run(["sh", "-c", "echo '[ 10%] Building CXX object a.o'; sleep 600 & wait"], timeout=1.5,
                  progress="compiling Horovod")
        assert time.monotonic() - started < scaled(15)


BACKEND = r"""
import os, time
def prepare_metadata_for_build_wheel(d, config_settings=None):
    os.makedirs(os.path.join(d, "fake-1.0.dist-info"))
    with open(os.path.join(d, "fake-1.0.dist-info", "METADATA"), "w") as fh:
        fh.write("Metadata-Version: 2.1\nName: fake\nVersion: 1.0\n")
    return "fake-1.0.dist-info"
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    print("-- Configuring done", flush=True)
    for p in (10, 40, 70):
        print(f"[{p:3d}%] Building CXX object x{p}.o", flush=True)
        time.sleep(1)
    print("[100%] Linking CXX shared library libx.so", flush=True)
    raise SystemExit("this fake build stops here")
"""

PIP_DRIVER = r"""
import sys
from pathlib import Path
from envtool.steps.create.horovod_build import UNBUFFERED, pip_wheel_argv
from envtool.steps.kernel.runner import Runner
with Runner(Path(sys.argv[1]), live=False) as r:
    r.run(pip_wheel_argv(sys.executable, sys.argv[2], [sys.argv[3]]), env=UNBUFFERED, progress="compiling Horovod",
          check=False)
print("driver done", file=sys.stderr, flush=True)
"""


def test_the_build_command_streams_cmake_progress_through_pip(tmp_path):
    """The build's own ``pip wheel`` command (``pip_wheel_argv``) run by real pip on a source tree
    whose in-tree backend prints CMake-like lines a second apart: each progress line arrives
    while the build still runs (pip -v and an unbuffered Python pass them through as they come)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "fake_backend"\n'
                                        'backend-path = ["."]\n')
    (src / "fake_backend.py").write_text(BACKEND)
    proc = subprocess.Popen([sys.executable, "-c", PIP_DRIVER, str(tmp_path / "log"), str(tmp_path / "wheels"),
                             str(src)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    arrivals = [(time.monotonic(), line.rstrip("\n")) for line in proc.stderr]
    assert proc.wait(timeout=scaled(120)) == 0
    end = arrivals[-1][0]
    assert arrivals[-1][1] == "driver done"
    first = next(t for t, l in arrivals if "compiling [ 10%], 1 object built" in l)
    assert end - first >= 2.0, arrivals  # shown while the build ran, not at its end
    assert any("linking [100%], 3 objects built" in l for _, l in arrivals), arrivals
    assert "[ 70%] Building CXX object x70.o" in (tmp_path / "log").read_text()
