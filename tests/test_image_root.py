"""The image build's command runner (``envtool.steps.image_root``): an interrupted command leaves no
process behind, however many it started (a Horovod compile runs pip, CMake, make and compilers)."""
from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from envtool.steps.image_root import UNSHARE, Steps
from helpers.speed import scaled

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="unshare --pid needs root")


def _left(marker: str) -> str:
    return subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout


@pytest.mark.parametrize("follow", ["", "compiling"])
def test_interrupted_command_leaves_no_grandchild(tmp_path: Path, follow: str):
    """Ctrl-C while a command's own children run (a shell that started two background sleeps):
    the command and every process it started are gone when the interrupt reaches the caller."""
    marker = f"{3000 + uuid.uuid4().int % 1000}.{os.getpid()}"
    seen = []

    def progress(text: str) -> None:
        seen.append(text)
        # plain: the "… ..." line after 2 s; followed: the line CMake's first object line gives
        if len(seen) == (2 if follow else 1):
            raise KeyboardInterrupt

    steps = Steps(tmp_path / "build.log", progress)
    argv = [*UNSHARE, "sh", "-c", f"sleep {marker} & sleep {marker} & sleep 1; "
                                   "echo '[ 10%] Building CXX object a.o'; wait"]
    try:
        with pytest.raises(KeyboardInterrupt):
            steps.run("t", "Run a command with children", argv, follow=follow)
    finally:
        deadline = time.monotonic() + scaled(10)
        while _left(f"sleep {marker}") and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _left(f"sleep {marker}")
        if left:
            subprocess.run(["pkill", "-9", "-f", f"sleep {marker}"])
    assert left == "", left
    assert (tmp_path / "build.log").stat().st_mode & 0o777 == 0o600


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
