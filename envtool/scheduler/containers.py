"""Container runtimes: the words that run one rank's command inside an image (issue 29).

A site file's ``container`` section (:class:`envtool.spec.sites.ContainerSection`) names the runtime
its ranks use; :func:`wrap` prefixes a rank's command with that runtime's words, so a job script's
run line is ``<launcher words> <runtime words> IMAGE <command>``. One small class per runtime, one
registration each in :data:`envtool.spec.registry.CONTAINER_RUNTIMES` (the one table of runtime
names, which the site-file reader checks against), all satisfying the :class:`Runtime` protocol:

- Shifter (NERSC): ``shifter --module=gpu,nccl-2.15 --image=IMAGE argv…`` — the KISTI Perlmutter
  tutorial's line, ``hwang2006/distributed-training-with-horovod-on-perlmutter@db9db9a20292:README.md#L471``;
  ``--image``/``--volume``: ``NERSC/shifter@692d38cd6e35:doc/command/shifter.rst``.
- podman-hpc (NERSC): ``podman-hpc run --rm --mpi --gpu --volume=SRC:DST IMAGE argv…`` — each site
  module is a flag named by its ``cli_arg`` (``NERSC/podman-hpc@01b02d6e552f:etc/modules.d/mpich.yaml``
  gives ``--mpi``, ``etc/modules.d/gpu.yaml`` ``--gpu``; ``podman_hpc/siteconfig.py`` reads
  ``cli_arg``); ``--rm`` and ``--volume`` are podman's own ``run`` options, which podman-hpc passes
  through (``https://docs.podman.io/en/v4.2/_sources/markdown/podman-run.1.md.txt``).
- Apptainer: ``apptainer exec --bind SRC:DST IMAGE argv…``
  (https://apptainer.org/docs/user/1.2/bind_paths_and_mounts.html; ``--nv`` for NVIDIA GPUs,
  https://apptainer.org/docs/user/1.2/gpu.html).
- Charliecloud: ``ch-run -b SRC:DST IMAGE -- argv…`` (``hpc/charliecloud@v0.31:doc/ch-run.rst``,
  synopsis ``ch-run [OPTION...] IMAGE -- COMMAND [ARG...]``; ``--join`` puts a node's ranks in
  one container so MPI's cross-memory attach works).

Everything here is a pure function of its arguments: nothing is run or read. This module imports
only the spec layer and the core errors.
"""
from __future__ import annotations

import shlex
from typing import List, Optional, Protocol, Sequence, Tuple

from envtool.core.errors import UsageError
from envtool.spec.registry import CONTAINER_RUNTIMES
from envtool.spec.sites import ContainerSection

#: Where ``envtool image`` puts the environment inside an image (the image carries it, so a job
#: script loads no module and activates no conda environment for it).
IMAGE_ENV_PREFIX = "/opt/env"


class Runtime(Protocol):
    """One container runtime: how a rank's command is run inside an image.

    Attributes:
        name: the site file's ``container.runtime`` spelling (``shifter``, ``podman-hpc``…).
        program: the executable the run line starts (``shifter``, ``podman-hpc``, ``apptainer``,
            ``ch-run``).
        source: the public source of the words it writes (``repo@ref:path`` or URL).
        modules: the site modules it understands, or None when any name is the site's to define
            (Shifter's udiImage modules).
        path_image: the image is a path on the host (a directory, SquashFS or SIF file: Apptainer,
            Charliecloud), not a name in the runtime's own store (Shifter, podman-hpc).
    """

    name: str
    program: str
    source: str
    modules: Optional[Tuple[str, ...]]
    path_image: bool

    def words(self, modules: Sequence[str], image: str, binds: Sequence[Tuple[str, str]]) -> List[str]:
        """The runtime's words before the rank's command (image included; for Charliecloud also
        the ``--`` that ends its options)."""
        ...


#: runtime name (``container.runtime``) → its :class:`Runtime` (the registry of
#: :mod:`envtool.spec.registry`, which names each runtime's object here without importing it).
REGISTRY = CONTAINER_RUNTIMES


def _check(obj: object) -> None:
    """Refuse a registered object that is not a :class:`Runtime` (no ``name``/``program``/``words``)."""
    if not all(hasattr(obj, a) for a in ("name", "program", "source", "modules", "path_image", "words")):
        raise TypeError(f"container runtime {obj!r} lacks name, program, source, modules, path_image or words()")


class Shifter:
    """NERSC's Shifter: ``shifter --module=M1,M2 --image=IMAGE [--volume=S:D;…] argv…``.

    The modules (``gpu``, ``nccl-2.15``, ``mpich``) are the site's own udiImage modules, so any name
    is passed on. Sources: the tutorial's line
    (``hwang2006/distributed-training-with-horovod-on-perlmutter@db9db9a20292:README.md#L471``);
    ``--image`` and ``--volume`` (``NERSC/shifter@692d38cd6e35:doc/command/shifter.rst``); several
    binds go in one ``--volume`` separated by ``;`` (``NERSC/shifter@84b7d34911bb:src/shifter.c``, its
    usage text ``--volume=/path/to/bind:/mnt/in/image[;...]``).
    """

    name = "shifter"
    program = "shifter"
    path_image = False
    source = "hwang2006/distributed-training-with-horovod-on-perlmutter@db9db9a20292:README.md#L471"
    modules: Optional[Tuple[str, ...]] = None

    def words(self, modules: Sequence[str], image: str, binds: Sequence[Tuple[str, str]]) -> List[str]:
        """``shifter [--module=…] --image=IMAGE [--volume=…]``."""
        out = [self.program]
        if modules:
            out.append("--module=" + ",".join(modules))
        out.append("--image=" + image)
        if binds:
            out.append("--volume=" + ";".join(f"{src}:{dst}" for src, dst in binds))
        return out


class PodmanHPC:
    """NERSC's podman-hpc: ``podman-hpc run --rm --mpi --gpu [--volume=S:D…] IMAGE argv…``.

    Each site module is written as the flag ``--<cli_arg>`` of podman-hpc's module files
    (``NERSC/podman-hpc@01b02d6e552f:etc/modules.d/*.yaml``: ``mpi`` (Cray MPICH), ``gpu``,
    ``nccl``, ``cuda-mpi``, ``openmpi-pmi2``, ``openmpi-pmix``, ``cfs``, ``cvmfs``, ``home``,
    ``scratch``, ``jupyter``); ``--rm`` and ``--volume`` are podman's ``run`` options
    (``https://docs.podman.io/en/v4.2/_sources/markdown/podman-run.1.md.txt``).
    """

    name = "podman-hpc"
    program = "podman-hpc"
    path_image = False
    source = ("NERSC/podman-hpc@01b02d6e552f:etc/modules.d/mpich.yaml (cli_arg: mpi), "
              "etc/modules.d/gpu.yaml (cli_arg: gpu)")
    modules: Optional[Tuple[str, ...]] = ("mpi", "gpu", "nccl", "cuda-mpi", "openmpi-pmi2", "openmpi-pmix",
                                          "cfs", "cvmfs", "home", "scratch", "jupyter")

    def words(self, modules: Sequence[str], image: str, binds: Sequence[Tuple[str, str]]) -> List[str]:
        """``podman-hpc run --rm [--MODULE…] [--volume=S:D…] IMAGE``."""
        out = [self.program, "run", "--rm"]
        out += [f"--{m}" for m in modules]
        out += [f"--volume={src}:{dst}" for src, dst in binds]
        out.append(image)
        return out


class Apptainer:
    """Apptainer: ``apptainer exec [--nv] [--bind S:D…] IMAGE argv…``.

    Site modules are Apptainer's device options: ``nv`` (NVIDIA, https://apptainer.org/docs/user/1.2/gpu.html),
    ``rocm`` (AMD, same page), ``nvccli`` (NVIDIA through nvidia-container-cli, same page). Binds:
    https://apptainer.org/docs/user/1.2/bind_paths_and_mounts.html (``--bind src[:dest]``).
    """

    name = "apptainer"
    program = "apptainer"
    path_image = True
    source = "https://apptainer.org/docs/user/1.2/bind_paths_and_mounts.html"
    modules: Optional[Tuple[str, ...]] = ("nv", "rocm", "nvccli")

    def words(self, modules: Sequence[str], image: str, binds: Sequence[Tuple[str, str]]) -> List[str]:
        """``apptainer exec [--MODULE…] [--bind S:D…] IMAGE``."""
        out = [self.program, "exec"]
        out += [f"--{m}" for m in modules]
        for src, dst in binds:
            out += ["--bind", f"{src}:{dst}"]
        out.append(image)
        return out


class Charliecloud:
    """Charliecloud's ``ch-run [--join] [-b S:D…] IMAGE -- argv…`` (``hpc/charliecloud@v0.31:doc/ch-run.rst``).

    The one site module is ``join`` (``--join``: a node's ranks share one container, needed for
    MPI's cross-memory attach between ranks; same page, "Multiple processes in the same container").
    IMAGE is a directory holding a root file system or a SquashFS archive.
    """

    name = "charliecloud"
    program = "ch-run"
    path_image = True
    source = "hpc/charliecloud@v0.31:doc/ch-run.rst"
    modules: Optional[Tuple[str, ...]] = ("join",)

    def words(self, modules: Sequence[str], image: str, binds: Sequence[Tuple[str, str]]) -> List[str]:
        """``ch-run [--join] [-b S:D…] IMAGE --``."""
        out = [self.program]
        out += [f"--{m}" for m in modules]
        for src, dst in binds:
            out += ["-b", f"{src}:{dst}"]
        out += [image, "--"]
        return out


def runtime(name: str) -> Runtime:
    """The registered runtime called ``name`` (a site file's ``container.runtime``).

    Raises:
        UsageError: no runtime of that name (site files are checked on load, so only a hand-made
            :class:`ContainerSection` gets here).
    """
    if name not in REGISTRY:
        raise UsageError(f"container.runtime: {name!r} is not a container runtime envtool knows; expected one of "
                         + ", ".join(sorted(REGISTRY.names())))
    rt = REGISTRY.get(name)
    _check(rt)
    return rt


SHIFTER = Shifter()
PODMAN_HPC = PodmanHPC()
APPTAINER = Apptainer()
CHARLIECLOUD = Charliecloud()


def _bind_pair(text: str) -> Tuple[str, str]:
    """``SRC`` or ``SRC:DST`` → (SRC, DST); both absolute. Raises UsageError otherwise."""
    src, sep, dst = text.partition(":")
    if not sep:
        dst = src
    if not src.startswith("/") or not dst.startswith("/") or ":" in dst:
        raise UsageError(f"container bind {text!r}: expected an absolute host directory, optionally "
                         "followed by ':' and an absolute path in the image (/data or /data:/mnt/data)")
    return src, dst


def wrap(section: ContainerSection, image: str, argv: Sequence[str], binds: Sequence[str] = ()) -> List[str]:
    """A rank's command run inside ``image`` by the site's runtime: the runtime's words, then ``argv``.

    Args:
        section: the site file's ``container`` section (runtime, modules, bind).
        image: the image as the runtime names it (Shifter ``docker:repo:tag`` or an id; podman-hpc
            a local image name; Apptainer a ``.sif`` path; Charliecloud a directory or SquashFS path).
        argv: the rank's command (``python train.py``), as words.
        binds: extra host directories (``SRC`` or ``SRC:DST``, absolute) bound into the image,
            after the site's ``container.bind`` (each bound at the same path).

    Returns:
        the words of the wrapped command (not quoted; :func:`render` quotes them).

    Raises:
        UsageError: an empty image or command, a bind that is not absolute, or a site module the
            runtime has no flag for (the message names ``container.modules`` and what is expected).
    """
    rt = runtime(section.runtime)
    if not image or image.startswith("-"):
        raise UsageError(f"--image: expected the image the {rt.name} runtime runs, got {image!r}")
    if not argv:
        raise UsageError("container: an empty command cannot be run in an image")
    modules = list(section.modules)
    if rt.modules is not None:
        unknown = [m for m in modules if m not in rt.modules]
        if unknown:
            raise UsageError(f"container.modules: {', '.join(unknown)} is not a module of {rt.name} "
                             f"(expected some of {', '.join(rt.modules)}; {rt.source})")
    pairs = [_bind_pair(b) for b in list(section.bind) + list(binds)]
    return rt.words(modules, image, pairs) + list(argv)


def render(words: Sequence[str]) -> str:
    """``words`` as one shell line, each word quoted with :func:`shlex.quote` (safe to paste)."""
    return " ".join(shlex.quote(w) for w in words)
