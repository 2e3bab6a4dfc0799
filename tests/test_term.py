"""The status lines of :mod:`envtool.core.term` written to a plain stream (a log, a pipe), with
their real timer threads: a quick command says nothing, a slow one says its phase once the
silence is over (issue 38: progress on every wait over 2 s, quiet by default)."""
import io
import time

from envtool.core.term import DelayedStatus, wrap


def test_delayed_status_is_silent_when_quick_and_speaks_once_the_wait_is_long():
    quick = io.StringIO()
    with DelayedStatus("plan: ", after=0.3, stream=quick, live=False) as status:
        status.update("reading the lock")
        status.update("probing the machine")
    assert quick.getvalue() == ""
    slow = io.StringIO()
    with DelayedStatus("plan: ", after=0.2, stream=slow, live=False) as status:
        status.update("reading the lock")
        status.update("probing the machine")
        deadline = time.monotonic() + 10
        while not slow.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        status.update("looking up the caches")
    assert slow.getvalue() == "plan: probing the machine\nplan: looking up the caches\n"


def test_wrap_keeps_words_whole_and_indents_continuations():
    lines = wrap("a fix: run /a/very/long/path-with-hyphens/that-stays-whole then more words here", 30,
                 first="  - ", rest="    ")
    assert lines[0].startswith("  - a fix:") and all(line.startswith("    ") for line in lines[1:])
    assert "/a/very/long/path-with-hyphens/that-stays-whole" in [w for line in lines for w in line.split()]
    assert all(len(line) <= 30 for line in lines if "/a/very" not in line)
