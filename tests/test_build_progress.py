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
from envtool.steps.runner import Runner

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
from envtool.steps.runner import Runner
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
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr, log.read_text()
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 60
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
    assert proc.wait(timeout=10) == 0
    return b"".join(chunks).decode(), log.read_text()


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


def test_verbose_streams_every_line_and_no_live_line(tmp_path):
    err, _ = _drive(tmp_path, verbose=True, tty=True)
    assert "  | [ 50%] Building CXX object" in err
    assert "\x1b[K" not in err


def test_timeout_kills_the_group_while_progress_is_shown(tmp_path):
    with Runner(tmp_path / "log", live=True) as r:
        started = time.monotonic()
        with pytest.raises(StepFailed, match="timed out"):
            r.run(["sh", "-c", "echo '[ 10%] Building CXX object a.o'; sleep 60 & wait"], timeout=1.5,
                  progress="compiling Horovod")
        assert time.monotonic() - started < 15
