"""The image build's commands under the one Runner (``envtool.steps.kernel.runner``): an interrupted
command leaves no process behind, however many it started (a Horovod compile runs pip, CMake, make
and compilers under :data:`envtool.steps.image.root.UNSHARE`)."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from envtool.steps.image.root import UNSHARE
from envtool.steps.kernel.runner import Runner
from helpers.speed import scaled


def _left(marker: str) -> str:
    return subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="unshare --pid needs root")
@pytest.mark.parametrize("progress", ["", "compiling"])
def test_interrupted_command_leaves_no_grandchild(tmp_path: Path, progress: str):
    """Ctrl-C (SIGINT to this process) while a command's own children run (a shell that started two
    background sleeps): the command and every process it started are gone when the interrupt
    reaches the caller, with and without the build-progress reader."""
    marker = f"{3000 + uuid.uuid4().int % 1000}.{os.getpid()}"

    def interrupt_once_sleeping() -> None:
        deadline = time.monotonic() + scaled(20)
        # the two sleeps themselves (pgrep -f matches whole command lines: unshare's and the shell's
        # name the marker too, and exist before the command is running)
        while _left(f"^sleep {marker}").count("\n") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    argv = [*UNSHARE, "sh", "-c", f"sleep {marker} & sleep {marker} & sleep 1; "
                                   "echo '[ 10%] Building CXX object a.o'; wait"]
    killer = threading.Thread(target=interrupt_once_sleeping, daemon=True)
    try:
        with Runner(log_path=tmp_path / "build.log", quiet=not progress) as runner:
            killer.start()
            with pytest.raises(KeyboardInterrupt):
                runner.run(argv, progress=progress or None)
    finally:
        killer.join(timeout=scaled(30))
        deadline = time.monotonic() + scaled(10)
        while _left(f"sleep {marker}") and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _left(f"sleep {marker}")
        if left:
            subprocess.run(["pkill", "-9", "-f", f"sleep {marker}"])
    assert left == "", left
    assert f"sleep {marker}" in (tmp_path / "build.log").read_text()  # the command is in the log


@pytest.mark.parametrize("banner, abi", [
    ("mpirun (Open MPI) 4.1.4", "openmpi"),
    ("HYDRA build details:", "mpich"),  # MPICH's mpirun is Hydra's
    ("Intel(R) MPI Library for Linux* OS, Version 2021.9 Build 20230307", "mpich"),
    ("mpirun (IBM Spectrum MPI) 10.4.0.3", "openmpi"),
    ("not used", "none"),
    ("", "none"),
    ("some other launcher 1.0", ""),
])
def test_wheel_mpi_abi_from_the_build_keys_banner(banner, abi):
    from envtool.steps.image import wheel_mpi_abi

    assert wheel_mpi_abi(banner) == abi
