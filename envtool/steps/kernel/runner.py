"""Execute a plan's steps: run subprocesses with their output in one build log, show progress.

Progress goes to stderr (one line per step, with its wall time); subprocess output goes to the
log only, unless ``verbose`` — then it is echoed too. A long command run with ``progress=``
(the Horovod compile) shows its phase, percentage and elapsed time while it runs
(:class:`envtool.steps.kernel.progress.BuildProgress`): a live line on a terminal, plain lines otherwise.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Sequence

from envtool.core import external, procs
from envtool.core.errors import CheckFailed, StepFailed, naming
from envtool.core.paths import cache_root, ensure_dir
from envtool.core.plan import Plan, Step, redact


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


@dataclass
class Runner:
    """Runs steps and records what happened.

    Attributes:
        log_path: the build log (appended to).
        keep_log: False: no log is written (``log_path`` is neither created nor named in errors), for
            a plan whose steps run no program and whose errors name their cause (``jobscript``'s).
        verbose: echo subprocess output to stderr.
        quiet: no progress lines.
        live: redraw progress in place; None (default): when stderr is a terminal.
        results: what steps report (``validate`` puts its comparison here), by step id.
        timings: seconds each finished step took, by step id.
        say: where progress lines go instead of stderr (a command's live status line), or None.
    """

    log_path: Path
    verbose: bool = False
    quiet: bool = False
    live: Optional[bool] = None
    results: Dict[str, Any] = field(default_factory=dict)
    timings: Dict[str, float] = field(default_factory=dict)
    _log: Optional[IO[str]] = None
    current: Optional[Step] = None
    say: Optional[Callable[[str], None]] = None
    keep_log: bool = True

    def __enter__(self) -> "Runner":
        from envtool.core.paths import ensure_dir

        if not self.keep_log:
            return self
        ensure_dir(self.log_path.parent)  # private (0700) when it is envtool's cache (``<cache>/logs``)
        self._log = open(self.log_path, "a", encoding="utf-8", errors="replace")
        return self

    def __exit__(self, *exc) -> None:
        if self._log:
            log, self._log = self._log, None
            try:
                with naming(self.log_path):
                    log.close()
            except OSError:
                if exc[1] is None:  # else the error on the way out is the one to report
                    raise

    def note(self, text: str) -> None:
        """Write a line to the log (and to stderr when verbose)."""
        text = redact(text)
        if self._log:
            with naming(self.log_path):
                self._log.write(text.rstrip("\n") + "\n")
                self._log.flush()
        if self.verbose:
            print(f"  {text}", file=sys.stderr)

    def progress(self, text: str) -> None:
        """A progress line on stderr (unless quiet)."""
        if self.quiet:
            return
        if self.say is not None:
            self.say(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def run(self, argv: Sequence[str], env: Optional[Mapping[str, str]] = None, cwd: Optional[Path] = None,
            timeout: Optional[float] = None, check: bool = True,
            progress: Optional[str] = None, progress_kind: str = "build") -> subprocess.CompletedProcess:
        """Run one command with its combined output appended to the log.

        Args:
            argv: the command.
            env: variables added to (or replacing those of) the current environment and the
                running step's ``env``.
            cwd: working directory.
            timeout: seconds before it is killed with its process group (also when it prints nothing).
            check: raise on a non-zero exit.
            progress: a label (``compiling Horovod``): follow the output's build phase and
                CMake percentage and show them with the elapsed time while it runs (not when
                ``quiet``; not as a live line when ``verbose``, which streams every line).
            progress_kind: ``build`` (compile phases) or ``install`` (an installer's phases and
                downloads: :class:`envtool.steps.kernel.progress.InstallProgress`).
        Returns:
            the completed process; ``stdout`` holds the combined output (str).
        Raises:
            StepFailed: non-zero exit (with ``check``), a missing program, or the timeout.
            UsageError: the command is the bytecode compile and envtool's bytecode store
                (``<cache>/bytecode``) fails envtool's rule for paths (exit 2).
        """
        from envtool.engines.installer import bytecode_store

        store = bytecode_store(argv)
        if store is not None:  # envtool's rule for its cache, before the probe links or keeps anything there
            ensure_dir(store)
        full_env = self._command_env(env)
        step_id = self.current.id if self.current else "run"
        self.note(redact("$ " + " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()) +
                         (" " if env else "") + shlex.join([str(a) for a in argv])))
        proc = self._start(argv, full_env, cwd, step_id)
        lines: List[str] = []
        try:
            tracker = self._tracker(progress, progress_kind)
        except BaseException:  # an interrupt before the wait: the command and its children go too
            procs.kill_group(proc)
            procs.forget(proc)
            raise
        rc, timed_out = self._wait(proc, lines, tracker, timeout)
        output = "".join(lines)
        self._check_outcome(argv, rc, output, step_id, timed_out=timed_out, timeout=timeout, check=check)
        return subprocess.CompletedProcess(argv, rc, output, "")

    def _command_env(self, env: Optional[Mapping[str, str]]) -> Dict[str, str]:
        """The environment a command runs with: ``os.environ`` less the running step's ``drop_env``,
        plus its ``env``, plus ``env``."""
        full_env = dict(os.environ)
        if self.current is not None:
            for name in self.current.drop_env:
                full_env.pop(name, None)
            full_env.update(dict(self.current.env))
        if env:
            full_env.update(env)
        return full_env

    def _start(self, argv: Sequence[str], full_env: Mapping[str, str], cwd: Optional[Path],
               step_id: str) -> subprocess.Popen:
        """Start ``argv`` in its own process group, output (stdout and stderr together) on a pipe.

        Raises:
            StepFailed: the program cannot be started (missing, not executable).
        """
        try:
            return procs.popen([str(a) for a in argv], env=full_env, cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, encoding=external.ENCODING,
                               errors=external.ERRORS)  # decoded as envtool.core.external.decode does
        except OSError as exc:
            self.note(f"cannot start {argv[0]}: {exc}")
            raise StepFailed(step_id, f"cannot run {argv[0]}: {exc.strerror}", self.log_path) from None

    def _tracker(self, progress: Optional[str], progress_kind: str):
        """A started progress display labelled ``progress`` (install or build phases), or None when
        there is no label or the runner is quiet."""
        if not progress or self.quiet:
            return None
        from envtool.steps.kernel.progress import BuildProgress, InstallProgress

        live = (self.live if self.live is not None else _isatty(sys.stderr)) and not self.verbose
        kind = InstallProgress if progress_kind == "install" else BuildProgress
        return kind(progress, sys.stderr, live=live).start()

    def _wait(self, proc: subprocess.Popen, lines: List[str], tracker, timeout: Optional[float]):
        """Collect ``proc``'s output into ``lines`` (and the log, ``tracker``) until it exits or
        ``timeout`` seconds pass (then its process group is killed); on any exception (an
        interrupt) the group is killed too. The tracker is stopped and the log flushed in all cases.

        Returns:
            ``(exit status, timed out)``.
        """
        # output is read by a thread so that the timeout holds even while the command prints nothing
        reader = threading.Thread(target=self._pump, args=(proc.stdout, lines, tracker), daemon=True)
        timed_out = False
        try:
            reader.start()  # an interrupt while it starts (it waits for the thread) kills the command too
            try:
                rc = proc.wait(timeout=timeout if timeout else None)
            except subprocess.TimeoutExpired:
                timed_out = True
                procs.kill_group(proc)
                rc = proc.returncode
            reader.join(timeout=5)
        except BaseException:  # an interrupt: the command and its children go too
            procs.kill_group(proc)
            raise
        finally:
            procs.forget(proc)
            if tracker is not None:
                tracker.stop()
            if self._log:
                self._log.flush()
        return rc, timed_out

    def _check_outcome(self, argv: Sequence[str], rc: int, output: str, step_id: str, *, timed_out: bool,
                       timeout: Optional[float], check: bool) -> None:
        """Log how the command ended.

        Raises:
            StepFailed: it timed out, or (with ``check``) exited non-zero (with its last 8 lines).
        """
        if timed_out:
            self.note(f"timed out after {timeout} s")
            raise StepFailed(step_id, f"{shlex.join([str(a) for a in argv][:3])} … timed out after {timeout:.0f} s",
                             self.log_path)
        self.note(f"(exit {rc})")
        if check and rc != 0:
            tail = redact("\n".join("    " + l for l in output.strip().splitlines()[-8:]))
            raise StepFailed(step_id, f"{Path(str(argv[0])).name} exited with status {rc}; last lines:\n{tail}",
                             self.log_path)

    def _pump(self, stream, lines: List[str], tracker=None) -> None:
        """Copy ``stream`` line by line into ``lines``, the log, ``tracker`` and (verbose) stderr, until EOF."""
        try:
            for line in stream:
                lines.append(line)
                if self._log:
                    self._log.write(redact(line) if "@" in line else line)
                if tracker is not None:
                    tracker.feed(line)
                if self.verbose:
                    sys.stderr.write("  | " + line)
        except (OSError, ValueError):
            pass

    def run_step(self, step: Step, index: int, total: int) -> None:
        """Execute one step (its ``action``, or its commands in order) with a progress line."""
        self.current = step
        self.progress(f"[{index}/{total}] {step.title}")
        self.note(f"==> [{index}/{total}] {step.id}: {step.title}")
        for n in step.notes:
            self.note(f"    note: {n}")
        started = time.monotonic()
        if step.action is not None:
            # the step's env reaches the commands the action runs (Runner.run adds it), never
            # os.environ; what the action returns is the step's result
            try:
                result = step.action(step, self)
            except (StepFailed, CheckFailed) as exc:
                if exc.step_result is not None:  # what the failed step found travels on its exception
                    self.results[step.id] = exc.step_result
                raise
            if result is not None:
                self.results[step.id] = result
        else:
            self.run_commands(step)
        self.timings[step.id] = time.monotonic() - started
        self.note(f"<== {step.id} done in {self.timings[step.id]:.1f} s")
        self.progress(f"      done in {self.timings[step.id]:.1f} s")
        self.current = None

    def run_commands(self, step: Step, env: Optional[Mapping[str, str]] = None) -> None:
        """Run ``step.commands`` in order (``#`` lines skipped), each with its ``step.progress`` label
        (install phases and elapsed time while it runs) when it has one."""
        labels = tuple(step.progress)
        for i, argv in enumerate(step.commands):
            if argv and not argv[0].startswith("#"):
                label = labels[i] if i < len(labels) else ""
                self.run(argv, env=env, progress=label or None, progress_kind="install")

    def run_plan(self, plan: Plan) -> None:
        """Execute every step of ``plan`` in order; stops at the first failure (raised)."""
        total = len(plan.steps)
        for i, step in enumerate(plan.steps, 1):
            self.run_step(step, i, total)

    def run_steps(self, steps: Sequence[Step]) -> None:
        """Execute ``steps`` in order, for a command whose plan is not one spec's :class:`Plan`
        (``pack``, ``publish``, ``retire``); stops at the first failure, raised with this build
        log named (``exc.log``) when it names none and is not a usage error (exit 2)."""
        from envtool.core.errors import EnvtoolError, UsageError

        try:
            for i, step in enumerate(steps, 1):
                self.run_step(step, i, len(steps))
        except EnvtoolError as exc:
            if exc.log is None and not isinstance(exc, UsageError) and self.keep_log:
                exc.log = self.log_path
            raise

def new_log_path(spec_name: str) -> Path:
    """A fresh log file path under ``<cache>/logs`` (``<spec>-<UTC time>-<pid>.log``; not created: the
    :class:`~envtool.steps.kernel.runner.Runner` makes the directory, private, when it opens the log)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return cache_root() / "logs" / f"{spec_name}-{stamp}-{os.getpid()}.log"
