"""Progress of a long build shown while it runs: the phase, CMake's ``[ NN%]`` or the objects
built so far, and the elapsed time.

On a terminal one live line is redrawn in place (``\\r`` and erase-to-end-of-line, twice a
second, so the clock moves while the build prints nothing), cut to the terminal's width so it
never wraps (:mod:`envtool.core.term`); elsewhere (a log file, CI) a plain
line is printed when the phase changes and at each further 10 % of CMake's progress. The full
output still goes to the build log (and to stderr with ``-v``, which shows no live line).

Phases are recognised from pip's and CMake's own lines: pip's ``Collecting``/``Downloading``
(fetching the source), ``Preparing metadata``/``Building wheel`` (preparing), CMake's ``-- …``
configure lines, ``Building C/CXX object`` (compiling), ``Linking`` (linking), and pip's
``Created wheel``/``Successfully built`` (packing the wheel). CMake's Makefile generator prefixes
the lines of a build with its percentage (``[ 45%] Building CXX object …``).
"""
from __future__ import annotations

import re
import threading
import time
from typing import IO, Optional

from envtool.core import term

_PERCENT = re.compile(r"^\s*\[\s*(\d{1,3})%\]")
#: A count of a known total (the bytecode probe's ``compiled 640/3120 files``).
_FRACTION = re.compile(r"^\s*compiled (\d+)/(\d+) files\s*$")
_OBJECT = re.compile(r"Building (?:C|CXX|CUDA|Fortran) object")
#: How far along each phase is: the phase only moves forward (compiling and linking alternate
#: between CMake targets; pip's closing "Building wheel for … finished" is not a new start).
_RANK = {"starting": 0, "fetching the source": 1, "preparing": 2, "configuring (CMake)": 3, "compiling": 4,
         "linking": 4, "packing the wheel": 5}
_PHASES = (  # (pattern, phase), first match wins
    (re.compile(r"^\s*(Collecting|Downloading|Obtaining)\b"), "fetching the source"),
    (re.compile(r"Preparing metadata|Building wheels? for|Running setup\.py|running bdist_wheel|running build_ext"),
     "preparing"),
    (re.compile(r"^\s*-- "), "configuring (CMake)"),
    (_OBJECT, "compiling"),
    (re.compile(r"\bLinking (?:C|CXX|CUDA) (?:shared|static) "), "linking"),
    (re.compile(r"Created wheel for|Successfully built|creating '.*\.whl'"), "packing the wheel"),
)


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class BuildProgress:
    """Follows a build's output lines and shows where it is (compile phases by default; subclasses
    set :attr:`PHASES`, :attr:`RANK` and :attr:`COUNT` for other output).

    Args:
        label: what is running (``compiling Horovod``).
        stream: where the progress goes (stderr).
        live: redraw one line in place (a terminal) rather than print plain lines.
        interval: seconds between redraws of the live line.

    :meth:`feed` may be called from the thread that reads the output while the live line is
    redrawn by this object's own thread; :meth:`stop` ends it and erases the line.
    """

    PHASES = _PHASES
    RANK = _RANK
    #: Plain lines only: say when the command starts (an install or compile may print nothing for long).
    ANNOUNCE = False
    #: (pattern, noun, verb): lines counted and shown as ``N nouns verb``.
    COUNT = (_OBJECT, "object", "built")

    def __init__(self, label: str, stream: IO[str], live: bool, interval: float = 0.5):
        self.label = label
        self.stream = stream
        self.live = live
        self.interval = interval
        self.phase = "starting"
        self.percent: Optional[int] = None
        self.objects = 0
        self.fraction: Optional[tuple] = None
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._printed_decade = -1

    def describe(self) -> str:
        """The current state as one line: ``compiling Horovod: compiling [ 45%], 37 objects, 1m02s``."""
        if self.fraction is not None:  # a count of a known total says more than a phase
            return f"{self.label}: {self.fraction[0]}/{self.fraction[1]} files, " + \
                _clock(time.monotonic() - self.started)
        parts = [self.phase + (f" [{self.percent:3d}%]" if self.percent is not None else "")]
        if self.objects:
            noun, verb = self.COUNT[1], self.COUNT[2]
            parts.append(f"{self.objects} {noun}{'s' if self.objects != 1 else ''}" + (f" {verb}" if verb else ""))
        parts.append(_clock(time.monotonic() - self.started))
        return f"{self.label}: " + ", ".join(parts)

    def start(self) -> "BuildProgress":
        """Start showing progress (the live line's redraw thread on a terminal)."""
        if self.live:
            self._thread = threading.Thread(target=self._redraw_loop, daemon=True)
            self._thread.start()
        elif self.ANNOUNCE:
            self._write(f"      {self.label}: started\n")
        return self

    def feed(self, line: str) -> None:
        """Take one output line of the build (with or without its newline)."""
        with self._lock:
            old_phase = self.phase
            m = _PERCENT.match(line)
            if m:
                self.percent = min(100, int(m.group(1)))
            f = _FRACTION.match(line)
            if f:
                self.fraction = (int(f.group(1)), int(f.group(2)))
                if not self.live and (self.fraction[0] == self.fraction[1] or
                                      self.fraction[0] * 10 // max(1, self.fraction[1]) > self._printed_decade):
                    self._printed_decade = self.fraction[0] * 10 // max(1, self.fraction[1])
                    self._write("      " + self.describe() + "\n")
                return
            if self.COUNT[0].search(line):
                self.objects += 1
            for pattern, phase in self.PHASES:
                if pattern.search(line):
                    if self.RANK[phase] >= self.RANK[self.phase]:
                        self.phase = phase
                    break
            if self.live:
                return
            decade = self.percent // 10 if self.percent is not None else -1
            if self.phase != old_phase or decade > self._printed_decade:
                self._printed_decade = max(self._printed_decade, decade)
                self._write("      " + self.describe() + "\n")

    def stop(self) -> None:
        """Stop the live line and erase it (a plain stream gets nothing more)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            with self._lock:
                self._write("\r\x1b[K")

    def _redraw_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                head, _, tail = ("      " + self.describe()).rpartition(", ")  # the clock stays visible
                self._write(term.CLEAR_LINE + term.fit(head, term.width(self.stream) - 3 - len(tail)) + ", " + tail)
            self._stop.wait(self.interval)

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass


#: How far along an install is (pip's and uv's own lines; uv prints a line per large download
#: and one summary line per phase when its output is not a terminal).
_INSTALL_RANK = {"starting": 0, "resolving": 1, "downloading": 2, "unpacking": 3, "installing": 4, "done": 5}
_INSTALL_PHASES = (
    (re.compile(r"^\s*(Collecting|Looking in|Processing)\b"), "resolving"),
    (re.compile(r"^\s*(Downloading|Downloaded)\b"), "downloading"),
    (re.compile(r"^\s*Resolved \d+ packages?"), "downloading"),
    (re.compile(r"^\s*Prepared \d+ packages?"), "unpacking"),
    (re.compile(r"^\s*(Installing collected packages|Uninstalled \d+|Installing)"), "installing"),
    (re.compile(r"^\s*(Successfully installed|Installed \d+ packages?|Audited \d+)"), "done"),
)


class InstallProgress(BuildProgress):
    """Progress of a large install (pip or uv): the phase, the downloads so far, the elapsed time.

    Phases are recognised from the installers' own lines: pip's ``Collecting``/``Downloading``/
    ``Installing collected packages``/``Successfully installed``; uv's ``Resolved N packages``,
    ``Downloading NAME (SIZE)``, ``Prepared N packages``, ``Installed N packages``.
    """

    ANNOUNCE = True
    PHASES = _INSTALL_PHASES
    RANK = _INSTALL_RANK
    COUNT = (re.compile(r"^\s*Downloading\b"), "download", "")
