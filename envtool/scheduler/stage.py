"""Staging an environment to node-local storage at job start (issue 25, item 2): the lines a job
script runs before anything imports from the environment.

A pack (``envtool pack``: a tar archive or a squashfs image) lies on a file system every node
mounts. The job copies it once to each node's local storage (the site file's ``node_local.path``)
and then, once per node, either unpacks it and runs its relocation (tar) or mounts it read-only
with squashfuse (squashfs, https://github.com/vasi/squashfuse). The ranks then start from the
node-local copy: nothing they import is read from the shared file system.

Per scheduler:

* Slurm: ``sbcast`` copies the file to every node of the job (sbcast(1),
  https://slurm.schedmd.com/sbcast.html: "transmit a file to the nodes allocated to a Slurm job",
  the method OLCF documents for Python environments, ``olcf/olcf-user-docs``
  ``software/python/sbcast_conda.rst``); one task per node (``srun --ntasks-per-node=1``) unpacks or
  mounts. The squashfuse mount runs in the foreground as a background step (``srun --overlap``,
  so it shares the nodes' CPUs with the ranks' step: srun(1)) that lives until the job's end.
* LSF (``jsrun -n NODES -r1 -a1 -c1``: one resource set per host with one task) and PBS
  (``mpiexec -n NODES --ppn 1``): one task per node copies the file from the shared file system,
  then unpacks or mounts it.
* No scheduler (``local``): the same commands once, on this machine.

Clean-up: a shell ``trap`` on ``EXIT`` (also taken when a command fails under ``set -e``, and on
SIGTERM, which is turned into an exit) unmounts and removes the node-local copy on every node, so a
failed job leaves nothing behind. A job killed outright (``SIGKILL`` after the scheduler's grace
time) cannot run it; the node-local directory's name says which job made it. The clean-up's
launcher (``srun``, ``jsrun``, ``mpiexec``) can wait for ever when the scheduler or a node is gone:
it runs under coreutils ``timeout`` (``$ENVTOOL_UNSTAGE_TIMEOUT`` s in the job's environment,
default :data:`UNSTAGE_TIMEOUT`; SIGTERM to its process group, SIGKILL 10 s later: timeout(1),
https://www.gnu.org/software/coreutils/manual/html_node/timeout-invocation.html), and a stopped
clean-up says so on the job's standard error, naming what is left on the nodes.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import List, Optional, Tuple

from envtool.core.errors import UsageError
from envtool.scheduler.model import capabilities


@dataclass(frozen=True)
class Stage:
    """An environment staged to node-local storage.

    Attributes:
        file: the pack file (absolute; on a file system every node mounts).
        format: ``tar`` or ``squashfs``.
        kind: ``conda`` or ``venv`` (how the staged copy is activated).
        prefix: where the ranks find the environment on each node (absolute, no shell syntax).
        copy: where the pack file is copied on each node (beside ``prefix``).
        unpack: words run in ``prefix`` after unpacking a tar (relative paths), or ().
        lock_sha256: sha256 of the pack's lockfile (the source environment's).
        unpacked_kib: room the unpacked tree takes (KiB, 4 KiB blocks; 0 when unknown).
        node_local: the site's node-local directory as its file writes it (for the comment).
        source: ``id: text`` of the site file's source for it (for the comment).
        packed_from: the environment the pack was made from (absolute; its files are the staged
            copy's: the pre-flight reads the staged copy's libraries there), or ``""``.
    """

    file: str
    format: str
    kind: str
    prefix: str
    copy: str
    unpack: Tuple[str, ...] = ()
    lock_sha256: str = ""
    unpacked_kib: int = 0
    node_local: str = ""
    source: str = ""
    packed_from: str = ""


def _per_node(req, sched) -> List[str]:
    per_node = getattr(sched, "per_node_argv", None)
    if not capabilities(sched).submits:  # one node, this machine: no launcher needed
        return []
    if per_node is None:
        raise UsageError(f"--stage: staging is written for Slurm, LSF and PBS sites; site {req.site.name} "
                         f"({req.site.path}) uses scheduler {sched.NAME}")
    return list(per_node(req))


def _broadcast(req, sched, stage: Stage) -> List[str]:
    """The words that put ``stage.file`` at ``stage.copy`` on every node."""
    broadcast = capabilities(sched).broadcast
    if broadcast:
        return list(broadcast) + [stage.file, stage.copy]
    return _per_node(req, sched) + ["cp", "--", stage.file, stage.copy]


def _q(words) -> str:
    return " ".join(shlex.quote(str(w)) for w in words)


#: per node, tar: check the room (the tar is there until it is unpacked; $3 is the unpacked tree's
#: size from the pack's manifest, KiB in 4 KiB blocks), unpack into the prefix, drop the copy, run
#: the pack's relocation in the prefix. The files are the job user's with the user's umask applied,
#: whoever runs it: ``--no-same-owner --no-same-permissions`` (GNU tar and bsdtar; the default for
#: users but not for root, who would otherwise get the archive's owners and set-user-ID bits:
#: https://www.gnu.org/software/tar/manual/html_node/Attributes.html)
_UNPACK = ('set -e; need=$(( $3 + 1024 )); free=$(df -Pk "$(dirname "$2")" | awk \'NR==2 {print $4}\'); '
           'if [ -n "$free" ] && [ "$free" -lt "$need" ]; then echo "envtool stage: $(hostname): $(dirname "$2") has '
           '$free KiB free after the copy, unpacking needs $need KiB: give the site a node-local path with more '
           'room (node_local.path in the site file)" >&2; exit 1; fi; '
           'mkdir -p -- "$2"; tar --no-same-owner --no-same-permissions -xf "$1" -C "$2"; rm -f -- "$1"; '
           'cd -- "$2"; shift 3; '
           'if [ "$#" -gt 0 ]; then "$@"; fi')
#: per node: wait (up to 120 s) until the image is mounted
_WAIT = ('for i in $(seq 1 1200); do [ -e "$1/.envtool/pack.json" ] && exit 0; sleep 0.1; done; '
         'echo "envtool stage: $1 is not mounted on $(hostname)" >&2; exit 1')
#: seconds the clean-up's launcher may run before it is stopped, unless the job's
#: ``$ENVTOOL_UNSTAGE_TIMEOUT`` says otherwise (unmounting and removing an unpacked environment
#: takes seconds; the launcher itself waits when the scheduler does not answer)
UNSTAGE_TIMEOUT = 120
#: per node, clean-up: unmount (squashfs), then remove the copy and the prefix (rmdir for a mount point)
_UNSTAGE = ('if [ "$3" = squashfs ]; then fusermount -u "$1" 2>/dev/null || fusermount3 -u "$1" 2>/dev/null || '
            'umount "$1" 2>/dev/null || true; rm -f -- "$2"; rmdir -- "$1" 2>/dev/null || true; '
            'else rm -rf -- "$1" "$2"; fi')


def _unstage_call(per_node: List[str], stage: Stage) -> str:
    """The clean-up's shell words (ending in ``;``): the per-node removal under ``timeout``, and on
    a timeout (exit 124, or 137 when SIGKILL was needed) a line on standard error naming the
    launcher, the limit and the node-local paths left behind. Never fails (the ``EXIT`` trap runs
    under ``set -e``)."""
    launcher = per_node[0] if per_node else "bash"
    call = _q(per_node + ["bash", "-c", _UNSTAGE, "envtool-unstage", stage.prefix, stage.copy, stage.format])
    say = ("printf 'envtool stage: the clean-up (%s on every node) did not finish within %s s and was stopped; "
           "remove %s and %s on each node by hand\\n' " + _q([launcher]) + ' "$envtool_limit" ' +
           _q([stage.prefix, stage.copy]) + " >&2")
    # a value timeout(1) would refuse (exit 125, nothing removed) falls back to the default, with a warning
    limit = (f'envtool_limit="${{ENVTOOL_UNSTAGE_TIMEOUT:-{UNSTAGE_TIMEOUT}}}"; case "$envtool_limit" in '
             f"''|*[!0-9]*) printf 'envtool stage: ENVTOOL_UNSTAGE_TIMEOUT=%s is not a whole number of seconds; "
             f"using {UNSTAGE_TIMEOUT}\\n' \"$envtool_limit\" >&2; envtool_limit={UNSTAGE_TIMEOUT};; esac; ")
    return (f'{limit}envtool_rc=0; timeout -k 10 "$envtool_limit" {call} || envtool_rc=$?; '
            f'if [ "$envtool_rc" -eq 124 ] || [ "$envtool_rc" -eq 137 ]; then {say}; fi;')


def prologue(req, sched) -> List[str]:
    """The job-script lines that stage ``req.stage`` (see the module docstring); [] without one.

    Args:
        req: the :class:`~envtool.scheduler.model.JobRequest` (``stage`` set).
        sched: its scheduler module.
    Returns:
        shell lines (every value quoted).
    Raises:
        UsageError: a scheduler staging is not written for (Cobalt), or an unpack command with an
            absolute or ``..`` path.
    """
    stage: Optional[Stage] = getattr(req, "stage", None)
    if stage is None:
        return []
    for w in stage.unpack:
        if w.startswith("/") or ".." in w.split("/"):
            raise UsageError(f"--stage {stage.file}: the pack's unpack command {list(stage.unpack)} must name "
                             f"files inside the environment")
    per_node = _per_node(req, sched)
    where = f"{stage.node_local} (source {stage.source})" if stage.source else stage.node_local
    lines = [f"# Staging (envtool jobscript --stage): {stage.file} ({stage.format}, {stage.kind} environment, "
             f"lock sha256 {stage.lock_sha256[:16]}) to node-local storage {where};",
             f"# the ranks run from {stage.prefix} on each node. Removed at the end of the job, also on failure.",
             f"envtool_unstage() {{ {_unstage_call(per_node, stage)} }}"]
    if stage.format == "squashfs":
        lines[-1] = (f"envtool_unstage() {{ {_unstage_call(per_node, stage)} "
                     'if [ -n "${ENVTOOL_STAGE_MOUNT:-}" ]; then kill "$ENVTOOL_STAGE_MOUNT" 2>/dev/null || true; '
                     'wait "$ENVTOOL_STAGE_MOUNT" 2>/dev/null || true; fi; }')
    lines += ["trap envtool_unstage EXIT",
              "trap 'exit 143' TERM",
              "trap 'exit 130' INT",
              _q(_broadcast(req, sched, stage))]
    if stage.format == "tar":
        lines.append(_q(per_node + ["bash", "-c", _UNPACK, "envtool-stage", stage.copy, stage.prefix,
                                    str(int(stage.unpacked_kib))] + list(stage.unpack)))
        return lines
    lines.append(_q(per_node + ["mkdir", "-p", "--", stage.prefix]))
    mount = ["squashfuse", "-f", stage.copy, stage.prefix]
    overlap = capabilities(sched).overlap
    if overlap:
        step = per_node[:1] + [overlap] + per_node[1:] + mount
    else:
        step = per_node + mount
    lines += [_q(step) + " &", "ENVTOOL_STAGE_MOUNT=$!",
              _q(per_node + ["bash", "-c", _WAIT, "envtool-stage-wait", stage.prefix])]
    return lines
