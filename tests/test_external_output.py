"""Issue 43, every byte from outside is decoded on purpose: scheduler output that is not UTF-8 (a
user's Latin-1 directory in ``scontrol show job``) is read as bytes and decoded by one helper
(:mod:`envtool.core.external`), never a ``UnicodeDecodeError`` (exit 3, and the job left running).

The bytes come from a real process (``printf``, octal escapes) through the very function the
Slurm reader uses; no Slurm daemon is started.
"""
from __future__ import annotations

from envtool.core import external
from envtool.scheduler import slurm

#: one line of ``scontrol -o show job`` for a job whose working directory is Latin-1 ("josé")
SCONTROL = (b"JobId=4242 JobName=envtool-validate UserId=jos\xe9(1001) JobState=COMPLETED Reason=None "
            b"ExitCode=0:0 NodeList=node[1-2] WorkDir=/home/jos\xe9/run StdOut=/home/jos\xe9/run/job.out\n")


def _printf_argv(data: bytes) -> list:
    """``printf FORMAT`` writing exactly ``data`` (every byte as an octal escape)."""
    return ["printf", "".join(f"\\{b:03o}" for b in data)]


def test_latin1_scheduler_output_is_read_not_a_crash():
    """The bytes are what ``scontrol`` prints for that job; before, ``text=True`` raised
    ``UnicodeDecodeError`` out of the reader."""
    assert external.decode(SCONTROL).count("\ufffd") == 3
    text = slurm._run(_printf_argv(SCONTROL))  # the reader behind slurm.state()
    assert text is not None and "/home/jos\ufffd/run" in text
    state = slurm.parse_final_status(text)["4242"]
    assert (state.phase, state.state, state.exit_status) == ("done", "COMPLETED", 0)
    assert slurm.parse_job_nodes(text) == "node[1-2]"
    proc = external.run(_printf_argv(b"sbatch: warning: cwd /scratch/jos\xe9 is not shared\n4243\n"), timeout=30)
    assert proc.returncode == 0 and slurm.parse_submit(proc.stdout) == "4243"
    # invalid UTF-8 of every kind: a lone continuation byte, a truncated sequence, an overlong form
    assert external.decode(b"a\x80b\xe2\x82c\xc0\xaf") == "a\ufffdb\ufffdc\ufffd\ufffd"
