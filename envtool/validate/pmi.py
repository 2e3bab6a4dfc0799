"""Does the launcher's PMI match the MPI build? (issue 24, item 4.)

``srun --mpi=PLUGIN`` starts the ranks with one process-management interface; the MPI library
must speak it, or every rank initialises as a world of its own (rank 0 of 1) or aborts in
``MPI_Init`` ("OMPI was not built with SLURM's PMI support", mpi4py/mpi4py#141,
open-mpi/ompi#11471). The parsers here are pure (tested on captured outputs); :func:`check` runs
the tools on the submitting host before a job is submitted.

Facts used:

* ``srun --mpi=list`` prints the MPI plugins of this Slurm, one per line after a header, and
  ``specific pmix plugin versions available: pmix_v4`` (srun(1), ``--mpi``:
  https://slurm.schedmd.com/srun.html#OPT_mpi); ``scontrol show config`` gives ``MpiDefault``,
  the plugin used without ``--mpi`` (slurm.conf(5): https://slurm.schedmd.com/slurm.conf.html#OPT_MpiDefault).
* Open MPI 4.x reaches the resource manager through its ``pmix`` framework: components ``ext2x``,
  ``ext3x`` (an external PMIx) or ``pmix3x`` (the bundled one) speak PMIx, ``s2`` Slurm's PMI-2,
  ``s1`` PMI-1 (``ompi_info --parsable`` lists them as ``mca:pmix:NAME:...``; Open MPI's "Running
  with Slurm" FAQ: https://docs.open-mpi.org/en/v5.0.x/launching-apps/slurm.html and
  https://www.open-mpi.org/faq/?category=slurm#slurm-direct-srun-mpi-apps).
"""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

#: Open MPI ``pmix`` framework components → the ``srun --mpi`` plugin family they speak
OMPI_PMIX_COMPONENTS = {"ext2x": "pmix", "ext3x": "pmix", "ext4x": "pmix", "pmix2x": "pmix", "pmix3x": "pmix",
                        "pmix4x": "pmix", "s2": "pmi2", "s1": "pmi1"}


@dataclass(frozen=True)
class MpiBuild:
    """What an MPI library can initialise through.

    Attributes:
        name: ``Open MPI 4.1.4`` (from ``ompi_info``), or what was found.
        speaks: srun plugin families it speaks (``pmix``, ``pmi2``, ``pmi1``), sorted.
        source: where this was read (the ``ompi_info`` path).
    """

    name: str
    speaks: Tuple[str, ...]
    source: str = ""


@dataclass(frozen=True)
class PmiResult:
    """The outcome of :func:`check`: ``problems`` (empty when it matched or was not checked),
    ``notes`` (why something was not checked), and what was compared."""

    plugin: Optional[str] = None
    srun_plugins: Tuple[str, ...] = ()
    mpi: Optional[MpiBuild] = None
    problems: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = field(default=())


def parse_srun_mpi_list(text: str) -> Tuple[str, ...]:
    """The plugin names from ``srun --mpi=list`` output (Slurm 20.11 to 23.x print one per line after
    ``MPI plugin types are...``, older ones ``srun: NAME``), plus the specific versions of the
    ``specific pmix plugin versions available:`` line (``pmix_v4``). Unknown lines are skipped."""
    out: List[str] = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("srun:"):
            s = s[len("srun:"):].strip()
        m = re.match(r"specific \S+ plugin versions available:\s*(.*)$", s)
        if m:
            out += [v for v in re.split(r"[,\s]+", m.group(1)) if v]
            continue
        if re.fullmatch(r"[A-Za-z0-9_]+", s) and s not in out:
            out.append(s)
    return tuple(out)


def parse_mpi_default(text: str) -> Optional[str]:
    """``MpiDefault`` from ``scontrol show config`` output, or None when absent."""
    m = re.search(r"^\s*MpiDefault\s*=\s*(\S+)", text, re.M)
    return m.group(1) if m else None


def parse_ompi_info(text: str, source: str = "ompi_info") -> Optional[MpiBuild]:
    """An :class:`MpiBuild` from ``ompi_info --parsable`` output, or None when it is not Open MPI's.

    Args:
        text: the output (``ompi:version:full:4.1.4`` and ``mca:pmix:COMPONENT:...`` lines).
        source: named in :attr:`MpiBuild.source`.
    """
    version = re.search(r"^ompi:version:full:(\S+)", text, re.M)
    if not version:
        return None
    comps = sorted(set(re.findall(r"^mca:pmix:([A-Za-z0-9_]+):", text, re.M)))
    speaks = sorted({OMPI_PMIX_COMPONENTS[c] for c in comps if c in OMPI_PMIX_COMPONENTS})
    return MpiBuild(name=f"Open MPI {version.group(1)}", speaks=tuple(speaks), source=source)


def _family(plugin: str) -> str:
    p = plugin.lower()
    return "pmix" if p.startswith("pmix") else p


def judge(plugin: Optional[str], srun_plugins: Sequence[str], mpi: Optional[MpiBuild], site_path: str,
          host: str = "the submitting host") -> List[str]:
    """Problems (node, cause, quoted fix line) of launching ``mpi`` with ``srun --mpi=plugin``.

    Args:
        plugin: the plugin the job's srun uses (the site file's ``batch.mpi``, else ``MpiDefault``),
            or None when unknown.
        srun_plugins: :func:`parse_srun_mpi_list` (empty: not known, not checked).
        mpi: :func:`parse_ompi_info`, or None (not known: only the plugin's existence is checked).
        site_path: the site file, named in the fix.
        host: where srun --mpi=list ran (named in the message).
    Returns:
        problem lines, [] when they match.
    """
    problems: List[str] = []
    if plugin is None:
        return problems
    fam = _family(plugin)
    usable = [p for p in srun_plugins if _family(p) in (mpi.speaks if mpi else ()) and not p.startswith("pmix_")]

    def fix() -> str:
        if usable:
            return (f"set batch.mpi to {usable[0]} in {shlex.quote(site_path)} (the job's srun then runs "
                    f"{shlex.join(['srun', '--mpi=' + usable[0]])})")
        return (f"build the MPI with {' or '.join(sorted({'pmix', 'pmi2'} & {_family(p) for p in srun_plugins}))} "
                f"support, or ask the site which srun --mpi plugin its MPI modules need")

    if srun_plugins and fam not in {_family(p) for p in srun_plugins}:
        problems.append(f"pre-flight: {host}: srun --mpi={plugin}: this Slurm has no such plugin (srun --mpi=list: "
                        f"{', '.join(srun_plugins)}); fix: {fix()}")
        return problems
    if mpi is None:
        return problems
    if fam == "none" and mpi.speaks:
        problems.append(f"pre-flight: {host}: the launcher runs srun --mpi=none, but {mpi.name} ({mpi.source}) "
                        f"initialises under srun through {', '.join(mpi.speaks)} only: each rank would abort in "
                        f"MPI_Init or be rank 0 of a world of its own; fix: {fix()}")
    elif fam not in ("none", "cray_shasta") and fam not in mpi.speaks:
        problems.append(f"pre-flight: {host}: the launcher runs srun --mpi={plugin}, but {mpi.name} ({mpi.source}) "
                        f"speaks {', '.join(mpi.speaks) or 'no PMI at all'}: the ranks cannot form one world; "
                        f"fix: {fix()}")
    return problems


def _run(argv: List[str], timeout: float = 60) -> Optional[str]:
    """``argv``'s standard output and error (decoded by :func:`envtool.core.external.run`: a byte
    that is not UTF-8, such as a Latin-1 directory ``ldd`` names, becomes U+FFFD, never an error),
    or None when it failed, could not start or ran over ``timeout`` seconds."""
    from envtool.core import external

    try:
        proc = external.run(argv, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout + "\n" + proc.stderr if proc.returncode == 0 else None


def linked_libmpi(prefix: Path) -> Optional[Path]:
    """The ``libmpi`` Horovod's extensions in ``prefix`` link (``ldd`` of ``horovod/*/mpi_lib*.so``),
    or None (no Horovod, or built without MPI)."""
    libs = sorted(Path(prefix).glob("lib/python3*/site-packages/horovod/*/mpi_lib*.so"))
    ldd = shutil.which("ldd")
    for lib in libs[:4]:
        out = _run([ldd, str(lib)], timeout=30) if ldd else None
        m = re.search(r"^\s*libmpi\.so\S*\s+=>\s+(\S+)", out or "", re.M)
        if m:
            return Path(m.group(1))
    return None


def _links(exe: Path, libmpi: Path) -> bool:
    """``exe`` (an ``ompi_info``) loads the same ``libmpi`` file as Horovod (ldd, real paths)."""
    ldd = shutil.which("ldd")
    out = _run([ldd, str(exe)], timeout=30) if ldd else None
    m = re.search(r"^\s*libmpi\.so\S*\s+=>\s+(\S+)", out or "", re.M)
    return m is not None and Path(m.group(1)).resolve() == libmpi.resolve()


def mpi_build(prefix: Optional[Path], staged_from: Optional[Path] = None,
              staged_lock: str = "") -> Tuple[Optional[MpiBuild], List[str]]:
    """The MPI build Horovod in ``prefix`` links, read with ``ldd`` and that MPI's ``ompi_info``.

    A staged copy (``validate --submit --stage``) is made on the nodes, after this runs: its
    libraries are read where they were packed from, ``staged_from``, whose lockfile must still be
    the pack's (``staged_lock``), so that the answer is the staged copy's and not a guess.

    Args:
        prefix: the environment the ranks run (a staged copy's node-local path), or None (a module).
        staged_from: the environment the pack was made from (when ``prefix`` is a staged copy), or None.
        staged_lock: the pack's lockfile sha256 (``""``: not compared).
    Returns:
        ``(the build or None, notes)``: each note says why the PMI was not compared with an MPI
        (the staged copy's source not on this host or changed since packing, no Horovod MPI
        extension, an extension that links no libmpi, no ``ompi_info`` for it).
    """
    notes: List[str] = []
    if prefix is None:
        return None, notes
    read, label = Path(prefix), "the environment"
    if staged_from is not None and not read.is_dir():
        from envtool.validate.preflight import lock_sha256

        label = f"the staged copy {prefix} (its files read in {staged_from}, where it was packed from)"
        if not Path(staged_from).is_dir():
            return None, [f"{label}: {staged_from} is not on this host, so the staged copy's libraries cannot be "
                          "read before the job: the PMI was not compared with its MPI"]
        mine = lock_sha256(Path(staged_from)) or "none"
        if staged_lock and mine != staged_lock:
            return None, [f"{label}: {staged_from} holds another environment now (lockfile sha256 {mine[:12]}, the "
                          f"pack's {staged_lock[:12]}): the PMI was not compared with the staged copy's MPI"]
        read = Path(staged_from)
    elif not read.is_dir():
        return None, [f"{prefix} is not a directory on this host: the PMI was not compared with its MPI"]
    libmpi = linked_libmpi(read)
    if libmpi is None:
        if not any(read.glob("lib/python3*/site-packages/horovod/*/mpi_lib*.so")):
            notes.append(f"{label}: no Horovod MPI extension (horovod/*/mpi_lib*.so): the PMI was not compared "
                         "with an MPI")
        else:
            notes.append(f"Horovod in {label} links no libmpi: the PMI was not compared with an MPI")
        return None, notes
    mpi = None
    for cand in (libmpi.parent.parent / "bin" / "ompi_info", read / "bin" / "ompi_info", shutil.which("ompi_info")):
        if cand and Path(cand).is_file() and _links(Path(cand), libmpi):
            text = _run([str(cand), "--parsable"])
            mpi = parse_ompi_info(text or "", source=f"{cand}, for {libmpi}"
                                  + (f", the libmpi of {label}" if read != Path(prefix) else ""))
            if mpi is not None:
                break
    if mpi is None:
        notes.append(f"no ompi_info for {libmpi}: the PMI was not compared with the MPI")
    return mpi, notes


def check(prefix: Optional[Path], plugin: Optional[str], site_path: str, host: str,
          staged_from: Optional[Path] = None, staged_lock: str = "") -> PmiResult:
    """Run ``srun --mpi=list`` (and ``scontrol show config`` when ``plugin`` is None) and the MPI's
    ``ompi_info --parsable``, then :func:`judge` them. The ``ompi_info`` is the one beside the
    ``libmpi`` Horovod links (``LIBDIR/../bin``), else ``PREFIX/bin``, else the one on ``PATH``.

    Args:
        prefix: the environment, or None (a module: only the plugin's existence is checked).
        plugin: the site's ``batch.mpi``, or None (Slurm's ``MpiDefault``).
        site_path: the site file (named in the fix).
        host: this host's name (named in the message).
        staged_from, staged_lock: for a staged copy, where its libraries are read and the pack's
            lockfile sha256 (:func:`mpi_build`).
    Returns:
        a :class:`PmiResult`; every tool has a time limit (60 s).
    """
    notes: List[str] = []
    listing = _run(["srun", "--mpi=list"])
    if listing is None:
        return PmiResult(plugin=plugin, notes=("srun --mpi=list did not answer: the PMI was not checked",))
    srun_plugins = parse_srun_mpi_list(listing)
    if plugin is None:
        plugin = parse_mpi_default(_run(["scontrol", "show", "config"]) or "")
    mpi, more = mpi_build(prefix, staged_from, staged_lock)
    notes += more
    problems = judge(plugin, srun_plugins, mpi, site_path, host)
    return PmiResult(plugin=plugin, srun_plugins=srun_plugins, mpi=mpi, problems=tuple(problems), notes=tuple(notes))
