"""``envtool pack``: one file (a tar archive or a squashfs image) from an environment, carrying its
lockfile and SBOM, for staging to node-local storage at job start (issue 25, item 1).

What is packable, and how:

* **A conda environment** (``conda-meta/`` with package records, as py-rattler makes them) goes
  through conda-pack (https://conda.github.io/conda-pack/, PyPI ``conda-pack``), which reads
  ``conda-meta`` and knows which files hold the build prefix. A tar is relocated where it is
  unpacked by conda-pack's ``bin/conda-unpack``; a squashfs image is read-only once mounted, so it
  is relocated while packing to the directory it will be mounted at (conda-pack's
  ``dest_prefix``). conda-pack refuses an environment whose files do not match its records
  (its message is passed on).
* **A venv** (PEP 405: ``pyvenv.cfg``, https://peps.python.org/pep-0405/) is packed by envtool:
  the text files that name the prefix (script ``#!`` lines, ``bin/activate*``, ``pyvenv.cfg``) are
  listed in the pack's manifest and rewritten by ``.envtool/unpack.py`` where the tar is unpacked,
  or while packing for a squashfs image (mounted at ``dest_prefix``); absolute symbolic links into
  the prefix become relative ones. A venv has no interpreter of its own: ``bin/python`` leads to
  the base interpreter named by ``pyvenv.cfg`` (``home``, and ``executable`` since Python 3.11;
  https://docs.python.org/3/library/venv.html), which must exist **at the same path on every
  compute node** (a module's Python, or a Python installed on a file system every node mounts).
  The base must exist here; its path is recorded in the manifest (``base_python``). Refused, with
  the reason (exit 2): a venv whose base interpreter is missing, one that also imports the base's
  own site-packages (``include-system-site-packages = true``: those are not in the pack), one with
  a binary file naming the prefix (an RPATH or compiled-in path cannot be rewritten), one whose
  ``.pth`` file adds a directory outside the prefix (an editable install: its source is not in
  the pack).

Every pack holds ``.envtool/pack.json`` (the manifest: kind, format, source prefix, lockfile and
its sha256, SBOM, base interpreter, what to run after unpacking), the environment's lockfile
(``conda-lock.yml`` as the prefix has it; a snapshot made now, :func:`envtool.lock.build.lock_prefix`,
when it has none) and a CycloneDX SBOM (``.envtool/sbom.cdx.json``, :mod:`envtool.sbom`). The lock
hash is the sha256 of that lockfile, the same hash ``validate``'s pre-flight compares on every node.

The work is a plan of typed steps (:mod:`envtool.steps.pack.workflow`: ``check-venv``, ``lock``,
``sbom``, ``pack``, ``place``) run by the one runner, with a build log; ``pack --dry-run`` prints
the same plan. Nothing half-written is left: the file is built under a private directory beside the output
(``.NAME.envtool-pack-PID``, removed on the way out, and by the next pack when the process was
killed) and renamed into place only when complete.
"""
from __future__ import annotations

from envtool.steps.pack.manifest import check_manifest, read_manifest
from envtool.steps.pack.model import (FORMATS, LOCK_NAMES, MANIFEST, SBOM, UNPACK_SCRIPT, NotPackable, PackResult,
                                      default_output, kind_of, output_path, unpacked_kib)
from envtool.steps.pack.venv import check_venv, scan_venv
from envtool.steps.pack.workflow import PackJob, PackPlan, compose, pack

__all__ = ["FORMATS", "LOCK_NAMES", "MANIFEST", "SBOM", "UNPACK_SCRIPT", "NotPackable", "PackJob", "PackPlan",
           "PackResult", "check_manifest", "check_venv", "compose", "default_output", "kind_of", "output_path",
           "pack", "read_manifest", "scan_venv", "unpacked_kib"]
