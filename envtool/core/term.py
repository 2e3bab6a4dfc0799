"""What envtool's output knows about the terminal: its width, whether to use colour, and one live
status line redrawn in place.

- Width: the terminal's own (``TIOCGWINSZ``, read again at each redraw so a resized window is
  followed), else ``COLUMNS``, else 80 (:func:`shutil.get_terminal_size`'s rules:
  https://docs.python.org/3/library/shutil.html#shutil.get_terminal_size).
- Colour: only when the stream is a terminal, ``TERM`` is not ``dumb`` and ``NO_COLOR`` is unset
  or empty (https://no-color.org: "when present and not an empty string ... prevents the addition
  of ANSI color"). Codes are the SGR colours of ECMA-48 (31 red, 32 green, 33 yellow).
- Live line: on a terminal one line is rewritten with ``\\r`` and erase-to-end-of-line
  (``ESC [ K``, ECMA-48 EL), cut to the width with an ellipsis so it never wraps (a wrapped line
  cannot be erased by ``\\r`` and leaves a stale copy per redraw); elsewhere (a log, CI, a pipe)
  each new status is one plain line and nothing is redrawn.
"""
from __future__ import annotations

import os
import shutil
import sys
import textwrap
import threading
import time
from typing import IO, List, Optional

#: ECMA-48 erase in line (to its end) after a carriage return: rewrite the current line.
CLEAR_LINE = "\r\x1b[K"
_SGR = {"ok": "32", "warn": "33", "fail": "31", "bold": "1"}
ELLIPSIS = "…"


def is_terminal(stream: IO[str]) -> bool:
    """True when ``stream`` is a terminal (False for a closed or fd-less stream)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def width(stream: Optional[IO[str]] = None) -> int:
    """Columns available to ``stream`` (default stderr): the terminal's width when it is one, else
    ``COLUMNS``, else 80. Always at least 20."""
    stream = stream if stream is not None else sys.stderr
    cols = 0
    if is_terminal(stream):
        try:
            cols = os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            cols = 0
    if cols <= 0:
        cols = shutil.get_terminal_size((80, 24)).columns
    return max(20, cols)


def table_width(stream: Optional[IO[str]] = None) -> Optional[int]:
    """Columns a table printed to ``stream`` (default stdout) may use: the terminal's width when
    ``stream`` is one, else ``COLUMNS`` when set to a number (at least 20), else None: no limit,
    so output for a pipe or a file keeps every column and whole lines."""
    stream = stream if stream is not None else sys.stdout
    if is_terminal(stream):
        return width(stream)
    try:
        cols = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return max(20, cols) if cols > 0 else None


def fit(text: str, columns: int) -> str:
    """``text`` (one line) cut to at most ``columns`` characters, ending in an ellipsis when cut."""
    text = text.replace("\n", " ").replace("\r", " ")
    if len(text) <= columns:
        return text
    return text[:max(0, columns - 1)].rstrip() + ELLIPSIS


def wrap(text: str, columns: int, first: str = "", rest: str = "") -> List[str]:
    """``text`` as lines of at most ``columns`` characters, the first starting with ``first`` and
    the others with ``rest`` (:func:`textwrap.wrap`). Words are never split and hyphens are not
    break points, so a path, URL or command stays whole (and one longer than the line stays
    over it: cutting it would break a copy and paste).

    Args:
        text: one paragraph (newlines are treated as spaces).
        columns: the width (e.g. :func:`width`).
        first: printed before the first line (counted in the width).
        rest: printed before each following line (counted in the width).
    Returns:
        the lines (at least one).
    """
    return textwrap.wrap(text, width=max(columns, len(rest) + 10), initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False) or [first.rstrip()]


def colour_enabled(stream: Optional[IO[str]] = None) -> bool:
    """Whether to colour output to ``stream`` (default stdout): a terminal, ``NO_COLOR`` unset or
    empty (https://no-color.org), and ``TERM`` not ``dumb``."""
    stream = stream if stream is not None else sys.stdout
    if os.environ.get("NO_COLOR", ""):
        return False
    if os.environ.get("TERM", "") == "dumb":
        return False
    return is_terminal(stream)


def paint(text: str, kind: str, stream: Optional[IO[str]] = None) -> str:
    """``text`` in the colour of ``kind`` (``ok`` green, ``warn`` yellow, ``fail`` red, ``bold``)
    when :func:`colour_enabled` for ``stream`` (default stdout); else unchanged."""
    code = _SGR.get(kind)
    if not code or not colour_enabled(stream):
        return text
    return f"\x1b[{code}m{text}\x1b[0m"


def verdict(word: str, stream: Optional[IO[str]] = None) -> str:
    """A check's verdict word (``ok``, ``warn``/``risky``, ``fail``/``FAILED``…) painted by its meaning."""
    w = word.strip().lower()
    kind = ("ok" if w in ("ok", "pass", "passed", "yes") else
            "fail" if w in ("fail", "failed", "error", "no", "missing", "mismatch") else
            "warn" if w in ("warn", "warning", "risky", "skip", "skipped") else "")
    return paint(word, kind, stream) if kind else word


def clock(seconds: float) -> str:
    """Elapsed time as ``12s`` or ``3m04s``."""
    s = int(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class LiveStatus:
    """One status line for a command that works for a while (``validate: 2-rank probe …, 12s``).

    Args:
        prefix: put before every status (``validate: ``).
        stream: where it goes (stderr).
        live: redraw in place; None (default): when ``stream`` is a terminal.
        interval: seconds between redraws (the clock moves while nothing else happens).

    On a terminal :meth:`update` replaces the line (the previous status is kept above it as a
    plain line, so what was done stays visible) and a thread redraws it with the elapsed time,
    always cut to the terminal's width; elsewhere each status is printed once as a plain line.
    :meth:`stop` (or leaving the ``with`` block) erases the live line.
    """

    def __init__(self, prefix: str = "", stream: Optional[IO[str]] = None, live: Optional[bool] = None,
                 interval: float = 0.5):
        self.prefix = prefix
        self.stream = stream if stream is not None else sys.stderr
        self.live = is_terminal(self.stream) if live is None else live
        self.interval = interval
        self.text: Optional[str] = None
        self.since = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "LiveStatus":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def update(self, text: str, keep: bool = True) -> None:
        """Show ``text`` as the current status (its clock starts now).

        Args:
            text: the status.
            keep: keep the previous status above as a finished line (with its time); False
                replaces it in place (and prints nothing on a plain stream: counters that
                change often are for terminals only).
        """
        with self._lock:
            if not self.live:
                if keep:
                    self._write(self.prefix + text + "\n")
                    self.text = text
                return
            if self.text is not None and keep:  # the finished status stays, with its time
                done = f"{self.prefix}{self.text} ({clock(time.monotonic() - self.since)})"
                self._write(CLEAR_LINE + fit(done, width(self.stream) - 1) + "\n")
            if keep or self.text is None:
                self.since = time.monotonic()
            self.text = text.rstrip(" .…")  # "probe ..." reads "probe, 12s" with its clock
            self._draw()
        if self._thread is None and self.live:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    def print(self, line: str) -> None:
        """Print a permanent line above the live one (which is drawn again below it)."""
        with self._lock:
            if self.live and self.text is not None:
                self._write(CLEAR_LINE + line + "\n")
                self._draw()
            else:
                self._write(line + "\n")

    def stop(self) -> None:
        """Stop redrawing and erase the live line (a plain stream gets nothing more)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        with self._lock:
            if self.live and self.text is not None:
                self._write(CLEAR_LINE)
            self.text = None

    def _draw(self) -> None:
        if self.text is None:
            return
        tail = f", {clock(time.monotonic() - self.since)}"  # the clock stays visible when the text is cut
        self._write(CLEAR_LINE + fit(self.prefix + self.text, width(self.stream) - 1 - len(tail)) + tail)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                self._draw()

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass


class DelayedStatus:
    """A :class:`LiveStatus` that shows nothing for the first ``after`` seconds: a command that is
    usually quick (``plan``) stays silent, and one that takes longer says what it is doing from
    then on (the status current at that moment, then each later one).

    Args:
        prefix: put before every status (``plan: ``).
        after: seconds of silence (counted from the first :meth:`update`).
        stream: where it goes (stderr).
        live: redraw in place; None (default): when ``stream`` is a terminal.
    """

    def __init__(self, prefix: str = "", after: float = 2.0, stream: Optional[IO[str]] = None,
                 live: Optional[bool] = None):
        self.status = LiveStatus(prefix, stream, live)
        self.after = after
        self.text: Optional[str] = None
        self.shown = False
        self._lock = threading.Lock()
        self._timer: Optional[threading.Timer] = None

    def __enter__(self) -> "DelayedStatus":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def update(self, text: str, keep: bool = True) -> None:
        """Make ``text`` the current status (shown at once when the silence is over; see
        :meth:`LiveStatus.update` for ``keep``)."""
        with self._lock:
            self.text = text
            if self.shown:
                self.status.update(text, keep)
                return
            if self._timer is None:
                self._timer = threading.Timer(self.after, self._show)
                self._timer.daemon = True
                self._timer.start()

    def _show(self) -> None:
        with self._lock:
            if self.shown or self.text is None:
                return
            self.shown = True
            self.status.update(self.text)

    def stop(self) -> None:
        """Cancel a pending status and erase the live line (:meth:`LiveStatus.stop`)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self.text = None
        self.status.stop()
