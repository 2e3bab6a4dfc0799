"""Submit a job script, watch the job (queued → running → done) and cancel it on Ctrl-C/SIGTERM,
after ``--timeout``, when a node stops responding or when anything fails while it is watched; or,
without a scheduler, run the script here. :func:`cancel` is a clean-up: it never raises, and
Ctrl-C, SIGTERM and SIGHUP wait while it runs."""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from envtool.core import external, procs
from envtool.core.errors import CheckFailed, UsageError
from envtool.scheduler.model import SchedulerOutputError, capabilities

Progress = Callable[[str], None]

#: the longest pause (s) between two looks at a submitted job's state, unless ``$ENVTOOL_JOB_POLL`` says otherwise
JOB_POLL_MAX = 5.0
#: the shortest ``$ENVTOOL_JOB_POLL`` accepted (s): each look runs squeue (and sinfo while the job runs)
JOB_POLL_MIN = 0.2
#: the job state :func:`wait` returns when it cancelled a job that ran past ``--timeout``
TIMED_OUT = "TIMEOUT (cancelled by envtool)"
#: the job state :func:`wait` returns when it cancelled a job because a node stopped responding
NODE_LOST = "NODE_NOT_RESPONDING (cancelled by envtool)"
#: the states of a job that ended well, across schedulers (and ``exit 0`` of a script run here)
DONE_STATES = ("COMPLETED", "DONE", "F", "gone", "exit 0")


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (the job is cancelled)."""


@dataclass
class JobWatch:
    """What :func:`wait` saw of a job while it ran.

    Attributes:
        output: the job's output file, read into ``output_at_timeout`` before a cancel.
        nodes: the job's node list, a hostlist such as ``node[1-2]`` (once it runs, on schedulers
            with ``unresponsive_nodes``), else None.
        lost: ``(node, state)`` of the nodes that stopped responding.
        output_at_timeout: the output's text when ``--timeout`` ran out, or None.
        cancelled: :func:`wait` cancelled the job (``--timeout``, a lost node, or a failure or
            interrupt while it watched).
    """

    output: Optional[Path] = None
    nodes: Optional[str] = None
    lost: List[Tuple[str, str]] = field(default_factory=list)
    output_at_timeout: Optional[str] = None
    cancelled: bool = False


def job_poll_max() -> float:
    """The longest pause between two looks at a submitted job's state (seconds):
    ``$ENVTOOL_JOB_POLL``, else :data:`JOB_POLL_MAX`. The first look follows 0.5 s after submission
    (or this value, if smaller); each pause is 1.5 times the one before, up to this value.

    Raises:
        UsageError: the variable is not a finite number of seconds >= :data:`JOB_POLL_MIN` (exit 2).
    """
    text = os.environ.get("ENVTOOL_JOB_POLL", "").strip()
    if not text:
        return JOB_POLL_MAX
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (JOB_POLL_MIN <= value < float("inf")):
        raise UsageError(f"ENVTOOL_JOB_POLL: expected a number of seconds >= {JOB_POLL_MIN:g} (the longest pause "
                         f"between two looks at a submitted job), got {text[:50]!r}")
    return value


def main_thread() -> bool:
    """True in the main thread (the only one that may set signal handlers)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_terminated(signum, frame):
    raise Terminated("terminated")


class TermAsInterrupt:
    """``with TermAsInterrupt():`` SIGTERM raises :class:`Terminated` (a KeyboardInterrupt), so that
    the watch cancels the job; the previous handler comes back afterwards (main thread only)."""

    def __enter__(self) -> "TermAsInterrupt":
        self._old = signal.signal(signal.SIGTERM, _raise_terminated) if main_thread() else None
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


def pasteable_submit_argv(sched, script: Path) -> List[str]:
    """The scheduler's submit command for ``script`` (words), as a command that runs alone when pasted:
    a scheduler whose submit command reads the script on standard input (LSF's ``bsub < SCRIPT``)
    gets ``sh -c 'exec bsub < "$0"' SCRIPT``."""
    argv = list(sched.submit_argv(str(script)))
    if getattr(sched, "SUBMIT_STDIN", False):
        return ["sh", "-c", "exec " + shlex.join(argv) + ' < "$0"', str(script)]
    return argv


def submit(sched, script: Path) -> str:
    """Submit ``script`` (from its directory) and return the job id.

    Raises:
        UsageError: the submit command is not on PATH (exit 2).
        CheckFailed: it did not answer within 120 s, or refused the job (its message).
    """
    argv = list(sched.submit_argv(str(script)))  # the script on stdin when SUBMIT_STDIN (below)
    stdin = script.read_text() if getattr(sched, "SUBMIT_STDIN", False) else None
    try:
        # the job is the scheduler's, not envtool's child: it does not carry envtool's process marker
        env = {k: v for k, v in os.environ.items() if k != procs.BUILD_MARKER}
        proc = external.run(argv, timeout=120, input=stdin, cwd=str(script.parent), env=env)
    except FileNotFoundError:
        raise UsageError(f"{argv[0]} is not on PATH: run on a login node of the site, or load its scheduler "
                         f"module") from None
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{argv[0]} did not answer within 120 s") from None
    try:
        job_id = sched.parse_submit(proc.stdout + "\n" + proc.stderr) if proc.returncode == 0 else None
    except SchedulerOutputError:
        job_id = None
    if not job_id:
        raise CheckFailed(f"{shlex.join(argv)} refused the job (exit {proc.returncode}): "
                          f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    return job_id


def _lost(sched, job_id: str, watch: JobWatch, progress: Progress) -> bool:
    """While the job runs: True (and ``watch.lost`` filled) when one of its nodes stopped responding."""
    if not capabilities(sched).names_nodes:  # the same declaration judge.lost_nodes reads
        return False
    watch.nodes = watch.nodes or sched.job_nodes(job_id)
    lost = sched.unresponsive_nodes(watch.nodes) if watch.nodes else []
    if not lost:
        return False
    watch.lost = list(lost)
    progress(f"job {job_id}: {', '.join(n for n, _ in lost)} stopped responding ({', '.join(st for _, st in lost)})")
    return True


def _keep_output(watch: JobWatch) -> None:
    """What the ranks printed, read before the cancel adds the scheduler's own lines."""
    if watch.output is not None:
        try:
            watch.output_at_timeout = watch.output.read_text(errors="replace")
        except OSError:
            pass


def _look(sched, job_id: str, progress: Progress, watch: JobWatch, last: list):
    """One look at the job: ``(state, code)`` when the watch ends (done, or a node lost), else None."""
    phase, state, code = sched.state(job_id)
    if (phase, state) != tuple(last):
        progress(f"job {job_id} {phase} ({state})")
        last[:] = [phase, state]
    if phase == "running" and _lost(sched, job_id, watch, progress):
        watch.cancelled = True
        cancel(sched, job_id, progress)
        return NODE_LOST, None
    if phase == "done":
        return state, code
    return None


def wait(sched, job_id: str, progress: Progress, timeout: Optional[float],
         watch: Optional[JobWatch] = None, poll_max: float = JOB_POLL_MAX) -> Tuple[str, Optional[int]]:
    """Poll until the job is done and return ``(state, exit code)``; cancel it after ``timeout``
    seconds (state :data:`TIMED_OUT`) or when a node of the job stops responding (state
    :data:`NODE_LOST`; schedulers with ``unresponsive_nodes``), filling in ``watch``. The pause
    between two polls starts at 0.5 s and grows by half each time up to ``poll_max`` seconds
    (:func:`job_poll_max`).

    Raises:
        BaseException: whatever stopped the watch (KeyboardInterrupt for Ctrl-C/SIGTERM, an error
            reading the scheduler's answer, a progress line that could not be written), re-raised
            after the job was cancelled (``watch.cancelled``): no job outlives a failed watch.
    """
    started = time.monotonic()
    last: list = []
    interval = min(0.5, poll_max)
    watch = JobWatch() if watch is None else watch
    try:
        while True:
            ended = _look(sched, job_id, progress, watch, last)
            if ended is not None:
                return ended
            if timeout is not None and time.monotonic() - started > timeout:
                _keep_output(watch)
                watch.cancelled = True
                cancel(sched, job_id, progress)
                return TIMED_OUT, None
            time.sleep(interval)
            interval = min(interval * 1.5, poll_max)
    except BaseException:
        if not watch.cancelled:
            watch.cancelled = True
            cancel(sched, job_id, progress)
        raise


#: the signals that wait while :func:`cancel` runs (ignored, so that the scheduler's cancel command,
#: which inherits the disposition, is not stopped by the same Ctrl-C, SIGTERM or hang-up either)
CANCEL_HOLDS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _tell(progress: Progress, text: str) -> None:
    """A progress line from the clean-up: one that cannot be written (stderr closed, a full disk
    under the log) is dropped, never raised out of :func:`cancel`."""
    try:
        progress(text)
    except Exception:
        pass


def cancel(sched, job_id: str, progress: Progress) -> None:
    """Cancel the job and wait (up to 60 s) until the scheduler no longer lists it as queued or running.

    A clean-up on every way out after the submission: it never raises (a cancel command that is
    missing, fails or hangs, or a state that cannot be read, is reported through ``progress``),
    and :data:`CANCEL_HOLDS` are ignored while it runs (main thread), then restored.
    """
    argv = sched.cancel_argv(job_id)
    old = {}
    if main_thread():
        for sig in CANCEL_HOLDS:
            try:
                old[sig] = signal.signal(sig, signal.SIG_IGN)
            except (ValueError, OSError):
                pass
    try:
        _tell(progress, f"cancelling job {job_id}: {shlex.join(argv)}")
        proc = external.run(argv, timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            phase, state, _ = sched.state(job_id)
            if phase not in ("queued", "running"):
                ended_first = proc.returncode != 0 and state in DONE_STATES
                _tell(progress, f"job {job_id} had ended ({state})" if ended_first
                      else f"job {job_id} cancelled ({state})")
                return
            time.sleep(0.5)
        _tell(progress, f"job {job_id} still listed after {argv[0]}; check it with the scheduler")
    except (OSError, subprocess.TimeoutExpired) as exc:
        _tell(progress, f"could not cancel job {job_id}: {exc}")
    except Exception as exc:  # a state that could not be read: the cancel command ran, the error goes on its way
        _tell(progress, f"job {job_id}: {shlex.join(argv)} ran; its state could not be read ({type(exc).__name__})")
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def run_local_script(script: Path, run_dir: Path, progress: Progress, timeout: Optional[float]) -> Tuple[str, int]:
    """No scheduler: run the script with bash in its own process group (killed on Ctrl-C) and
    return ``("exit N", N)``.

    Raises:
        CheckFailed: it ran past ``timeout`` seconds (it was stopped).
        KeyboardInterrupt: Ctrl-C/SIGTERM (the script's processes were stopped first).
    """
    progress(f"running {script} on this machine")
    with open(run_dir / "job.out", "ab") as out:
        proc = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT, cwd=run_dir,
                                start_new_session=True, preexec_fn=procs.die_with_parent)
        try:
            code = proc.wait(timeout=timeout)
        except (KeyboardInterrupt, subprocess.TimeoutExpired) as exc:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise CheckFailed(f"the script did not finish within {timeout:.0f} s; it was stopped") from None
    return ("exit 0" if code == 0 else f"exit {code}"), code
