"""The payload every step of an image plan carries (``Step.data``), and what the steps return.

An image is built in a work directory beside the output (``.OUTPUT.envtool-image-XXXXXXXX``,
made by :func:`envtool.steps.image.run.build`); :class:`ImageWork` names its parts.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

from envtool.steps.image.request import ImageInputs
from envtool.steps.image.wheels import HorovodChoice


@dataclass(frozen=True)
class ImageWork:
    """The work directory of one build and its parts (host paths).

    Attributes:
        dir: the work directory (beside the output, removed at the end whatever happens).
    """

    dir: Path

    @property
    def log(self) -> Path:
        """The build log (kept beside the output when the build fails)."""
        return self.dir / "build.log"

    @property
    def house(self) -> Path:
        """The wheelhouse: every wheel the image's environment is installed from."""
        return self.dir / "wheelhouse"

    @property
    def root(self) -> Path:
        """The image's root file system."""
        return self.dir / "rootfs"

    @property
    def buildroot(self) -> Path:
        """The root Horovod is compiled in (removed once the wheel is out)."""
        return self.dir / "buildroot"

    @property
    def out(self) -> Path:
        """The forms, renamed to the output at the end."""
        return self.dir / "out"


@dataclass(frozen=True)
class ImageJob:
    """Payload of every step of an image plan.

    Attributes:
        inputs: the checked request (the lock read).
        work: the work directory.
        horovod: how Horovod gets into the image.
        seeds: the wheels that seeded the venv (pip), copied into the wheelhouse.
    """

    inputs: ImageInputs
    work: ImageWork
    horovod: HorovodChoice
    seeds: Tuple[Path, ...] = ()


@dataclass(frozen=True)
class Wheelhouse:
    """Result of the ``wheelhouse`` step.

    Attributes:
        lines: the requirement lines (``name==version --hash=sha256:…``; a reused Horovod as
            ``horovod @ file://…``) of everything in the wheelhouse.
        pip_wheel: the pip wheel's file name (pip installs from its own wheel).
    """

    lines: Tuple[str, ...]
    pip_wheel: str


#: The requirements file the wheelhouse's wheels are installed with (in the wheelhouse).
REQUIREMENTS = "requirements.txt"
#: The requirements file without Horovod (the build root's environment).
BASE_REQUIREMENTS = "base.txt"
