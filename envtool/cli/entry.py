"""The process entry point of ``envtool`` (console script and ``python -m envtool``).

It runs :func:`envtool.cli.main.main` and leaves the process with its status. When py-rattler was
used, the process ends with ``os._exit`` after flushing stdout and stderr, skipping interpreter
finalization: py-rattler's background tokio tasks race with Python's shutdown and crashed
envtool after it had finished (SIGSEGV or SIGABRT in about 1 run in 30 of a failing conda solve
here; the race is known in pyo3's async runtimes, PyO3/pyo3-async-runtimes#40). Everything envtool
writes is closed by then (logs, locks and modulefiles are written with context managers).
"""
from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn


def _early_stop(signum, frame) -> None:
    """SIGTERM or SIGHUP before :func:`envtool.cli.main.main` installed its own handler."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _swallowed_stop(unraisable) -> None:
    """``sys.unraisablehook``: a stop signal's exception that CPython had to drop is sent again.

    CPython ignores an exception raised where it cannot propagate (a weakref callback such as
    importlib's module-lock clean-up, a finalizer, an at-fork hook) and prints "Exception ignored
    in" with a traceback. When that exception is the KeyboardInterrupt a stop handler raised, the
    user's SIGINT/SIGTERM/SIGHUP would be lost and the command would go on (seen here: about 1
    SIGTERM in 400 during start-up). The signal is sent again from a short-lived thread, so that
    it lands after the hook has returned, at a point where it can propagate; nothing is printed.
    Any other unraisable exception goes to CPython's own hook.

    Args:
        unraisable: CPython's ``UnraisableHookArgs`` (``exc_value`` is the dropped exception).
    """
    import threading

    exc = unraisable.exc_value
    if not isinstance(exc, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)
        return
    signum = getattr(exc, "signum", None)
    if signum is None:
        name = str(exc.args[0]) if exc.args else ""
        signum = signal.Signals[name] if name in signal.Signals.__members__ else signal.SIGINT
    main = sys.modules.get("envtool.cli.main")
    if main is not None:
        main.rearm()  # its handler ignores repeats once it has fired
    resend = threading.Timer(0.01, os.kill, (os.getpid(), signum))
    resend.daemon = True
    resend.start()


def entry() -> NoReturn:
    """Run the CLI and exit with its status (see the module docstring)."""
    sys.unraisablehook = _swallowed_stop
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup: stays ignored
            signal.signal(sig, _early_stop)
    try:
        from envtool.cli.main import main

        code = main()
    except KeyboardInterrupt:  # a signal while envtool was still being imported: exit 130 all the same
        code = 130
        try:
            sys.stderr.write("envtool: interrupted\n")
            if "--json" in sys.argv[1:]:
                sys.stdout.write('{"ok": false, "error": "interrupted", "exit": 130}\n')
        except (OSError, ValueError):
            pass
    # The exit status is decided: a late SIGINT/SIGTERM/SIGHUP (a second Ctrl-C, a scheduler's
    # repeat) must not turn it into death by signal while the interpreter shuts down (CPython puts
    # back SIG_DFL for every signal that had a Python handler when it finalizes).
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (OSError, ValueError):
            pass
    if "rattler" in sys.modules:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(code)
