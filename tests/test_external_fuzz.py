"""Fuzz: every parser of another program's output, fed random bytes (issue 43).

Slurm (``sbatch``, ``squeue``, ``scontrol``, ``sinfo``, job output), LSF, PBS, Cobalt,
``nvidia-smi`` (header, ``-L``, the ``compute_cap`` query), ``ompi_info`` and ``srun --mpi=list``,
NCCL's ``NCCL_DEBUG=INFO`` logs, the pre-flight's node reports, ``horovodrun --check-build``
and compiler/CMake ``--version`` output. Hypothesis builds the bytes from pieces of the real
formats (so that the parsers get past their first pattern), invalid UTF-8 (lone continuation
bytes, truncated and overlong sequences, surrogates, NUL), digits of other scripts (``²``,
``٣``) and runs of digits longer than ``int()`` reads (4,300). The bytes are decoded by the one
helper every reader uses (:func:`envtool.core.external.decode`), and the parser must return or
raise envtool's own error (:class:`~envtool.core.errors.EnvtoolError`: exit 1 or 2, never 3).

Before issue 43's second pass ``ExitCode=`` of 5,000 digits, a GPU index ``²``, an overlong
``compute_cap`` field or ``clang version ٣`` raised ``ValueError`` or ``csv.Error`` (exit 3).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from envtool.core import external, gpu_gates  # noqa: E402
from envtool.core.errors import EnvtoolError  # noqa: E402
from envtool.horovod import checkbuild, fixes  # noqa: E402
from envtool.scheduler import cobalt, lsf, pbs, slurm  # noqa: E402
from envtool.validate import pmi, preflight, ranks, sweep  # noqa: E402

#: examples per parser: the whole file stays within a few seconds on 2 loaded cores
EXAMPLES = 40
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: what a program prints that is not UTF-8 or not a number int() reads
HOSTILE = [
    b"\xe9", b"\xff", b"\x80", b"\xc3", b"\xe2\x82", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
    b"\x00", b"\r", b"\n", b"\x1b[31m", "\u2028".encode(), b"=" * 300, b'"' + b"x" * 140000, b"/home/jos\xe9",
]
#: numbers as a program might print them: ASCII, other scripts' digits, longer than int() reads
NUMBERS = [b"0", b"1", b"-1", b"4242", "\u00b2".encode(), "\u0663".encode(), "\uff11".encode(), b"9" * 5000,
           b"1234567890123", b""]
junk = st.one_of(st.sampled_from(HOSTILE), st.binary(max_size=12))
num = st.one_of(st.sampled_from(NUMBERS), junk)
ver = st.lists(num, min_size=1, max_size=3).map(b".".join)
word = st.one_of(st.sampled_from([b"COMPLETED", b"RUNNING", b"PENDING", b"DONE", b"EXIT", b"F", b"R", b"queued",
                                  b"idle*", b"down~", b"(null)", b"node[1-2]", b"pmix", b"IB", b"Socket"]), junk)


def _fmt(*parts):
    """Bytes in a real format (:data:`TEMPLATES`): each part a constant or a strategy for a slot."""
    return st.tuples(*[st.just(p) if isinstance(p, bytes) else p for p in parts]).map(b"".join)


#: the formats each parser reads (real outputs: tests/data/scheduler, tests/test_gpu_gates.py,
#: tests/test_sweep.py), each slot filled with junk, hostile numbers or a plausible word
TEMPLATES = {
    "scheduler": [
        _fmt(b"JobId=", num, b" JobName=", junk, b" JobState=", word, b" ExitCode=", num, b":", num,
             b" NodeList=", word, b" WorkDir=", junk),
        _fmt(num, b" ", word), _fmt(num, b";", junk), _fmt(word, b" ", word),
        _fmt(b"srun: error: Task launch for StepId=", junk, b" failed on node ", word, b": ", junk),
        _fmt(num, b": ", junk), _fmt(b"JOBID STAT EXIT_CODE\n", num, b" ", word, b" ", num),
        _fmt(b"Job <", num, b"> is submitted to queue <", junk, b">."),
        _fmt(b"Job Id: ", num, b".", junk, b"\n    job_state = ", word, b"\n    Exit_status = ", num),
        _fmt(num, b" root ", word, b" ", junk),
    ],
    "smi": [
        _fmt(b"| NVIDIA-SMI 535 Driver Version: ", ver, b"  CUDA Version: ", ver, b" |"),
        _fmt(b"KMD Version: ", ver, b"  CUDA UMD Version: ", ver),
        _fmt(b"GPU ", num, b": ", junk, b" (UUID: GPU-", junk, b")\n  MIG ", junk, b" Device ", num, b":"),
        _fmt(b"index, compute_cap\n", num, b", ", ver), _fmt(b"name, index, compute_cap\n", junk, b", ", num, b", ", ver),
    ],
    "mpi": [
        _fmt(b"ompi:version:full:", ver, b"\nmca:pmix:", word, b":version:", junk),
        _fmt(b"MPI plugin types are...\n\t", word, b"\nspecific pmix plugin versions available: ", junk),
        _fmt(b"srun: ", word), _fmt(b"MpiDefault = ", word),
    ],
    "nccl": [
        _fmt(junk, b" NCCL INFO NET/", word, b" : Using [", num, b"]", junk, b":", num),
        _fmt(junk, b" NCCL INFO Using network ", word),
        _fmt(junk, b" NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/", word, b"/", num),
    ],
    "build": [
        _fmt(b"clang version ", ver, b" (", junk, b")"), _fmt(b"g++ (GCC) ", ver, b"\nFree Software Foundation"),
        _fmt(b"c++ (", junk, b") ", ver), _fmt(b"cmake version ", ver),
        _fmt(b"Horovod v", ver, b":\n\nAvailable Frameworks:\n    [X] ", word, b"\n    [ ] MPI\n"),
    ],
    "preflight": [
        _fmt(b"task=", num, b"\nhost=", junk, b"\nshm_kib=", num, b"\nprefix=", junk, b"\nlock=", junk),
        _fmt(b"hostname=", junk, b"\niface=", word, b"\nreach=", num),
    ],
}


def output_of(kind: str):
    """Bytes for the parsers of ``kind``: random bytes, or one to four lines of its formats, or a mix."""
    lines = st.lists(st.one_of(*TEMPLATES[kind], junk), min_size=1, max_size=4).map(b"\n".join)
    return st.one_of(st.binary(max_size=300), lines, lines)


def _survives(parse, raw: bytes):
    """``parse(decode(raw))``: its result, or None when it raised envtool's own error (any other
    exception fails the test, with the input)."""
    text = external.decode(raw)
    assert isinstance(text, str) and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    try:
        return parse(text)
    except EnvtoolError:
        return None


SCHEDULER_PARSERS = [
    slurm.parse_submit, slurm.parse_status, slurm.parse_final_status, slurm.parse_job_nodes,
    slurm.parse_node_states, slurm.parse_launch_failures, lsf.parse_submit, lsf.parse_status,
    pbs.parse_submit, pbs.parse_status, cobalt.parse_submit, cobalt.parse_status, ranks.last_lines,
]


LONG = b"9" * 5000  # int() refuses over 4,300 digits (ValueError)
SUP2 = "\u00b2".encode()  # "²": str.isdigit() says yes, int() says no


@FUZZ
@given(raw=output_of("scheduler"))
@example(raw=b"JobId=7 JobName=jos\xe9 JobState=COMPLETED ExitCode=" + LONG + b":0 WorkDir=/home/jos\xe9")
@example(raw=b"JOBID STAT EXIT_CODE\n7 EXIT " + SUP2)
@example(raw=b"Job Id: 7.pbs\n    job_state = F\n    Exit_status = " + LONG)
@example(raw=LONG + b": the rank's last line")
def test_scheduler_output_fuzz(raw):
    """Slurm, LSF, PBS and Cobalt answers and srun-labelled job output: a state read or envtool's
    SchedulerOutputError (exit 1), never an exception of Python's."""
    for parse in SCHEDULER_PARSERS:
        got = _survives(parse, raw)
        if isinstance(got, dict):
            for state in got.values():
                if hasattr(state, "exit_status"):
                    assert state.exit_status is None or abs(state.exit_status) < 10 ** 9


@FUZZ
@given(smi=output_of("smi"), listing=output_of("smi"), caps=output_of("smi"))
@example(smi=b"Driver Version: " + LONG + b".1  CUDA Version: 12.2", listing=b"GPU " + LONG + b": A100 (UUID: GPU-1)",
         caps=b"index, compute_cap\n" + SUP2 + b", 8.0\n0, " + LONG + b".0\n\"" + b"x" * 140000)
def test_nvidia_smi_fuzz(smi, listing, caps):
    """``nvidia-smi``'s three answers through the gates a node is judged by (driver, compute
    capability, MIG): a verdict, never a crash."""
    facts = _survives(lambda t: gpu_gates.node_facts(t, external.decode(listing), external.decode(caps),
                                                     cuda="12.1", arch_list=("sm_80", "sm_90", "compute_90")),
                      smi)
    assert facts is not None
    for gate in gpu_gates.run_gates(facts):
        assert gate.to_dict()


@FUZZ
@given(raw=output_of("mpi"))
def test_mpi_output_fuzz(raw):
    """``ompi_info --parsable``, ``srun --mpi=list`` and ``scontrol show config``: what is read, or None."""
    build = _survives(pmi.parse_ompi_info, raw)
    plugins = _survives(pmi.parse_srun_mpi_list, raw)
    default = _survives(pmi.parse_mpi_default, raw)
    assert isinstance(plugins, tuple)
    assert pmi.judge(default or "pmix", plugins, build, "site.yaml") is not None


@FUZZ
@given(raw=output_of("nccl"))
def test_nccl_log_fuzz(raw):
    """NCCL's INFO lines (one log per process): the transports named, never a crash."""
    got = _survives(lambda t: sweep.nccl_transports(t.splitlines()), raw)
    assert got is not None and set(got) == {"network", "initialised", "channels", "interfaces"}
    assert isinstance(sweep.check_fabric(got["network"], "ib"), (str, type(None)))


@FUZZ
@given(raw=output_of("build"))
@example(raw="clang version \u0663".encode())
@example(raw=b"cmake version " + LONG)
def test_compiler_and_check_build_fuzz(raw):
    """``c++ --version``, ``cmake --version`` and ``horovodrun --check-build``: a version or none."""
    family, version = _survives(fixes.parse_cxx_version, raw)
    assert family in ("", "gnu", "clang") and (version is None) == (family == "")
    _survives(fixes.parse_cmake_version, raw)
    _survives(checkbuild.parse, raw)


@FUZZ
@given(reports=st.lists(output_of("preflight"), min_size=1, max_size=3))
@example(reports=[b"task=" + SUP2 + b"\nshm_kib=" + SUP2, b"task=" + LONG + b"\nshm_kib=" + LONG])
def test_preflight_reports_fuzz(reports):
    """The nodes' pre-flight reports (files the job wrote, read back): gathered and judged."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / preflight.DIR
        d.mkdir()
        for i, raw in enumerate(reports):
            (d / f"task-{i}.txt").write_bytes(raw)
        records = preflight.gather(Path(tmp))
        assert len(records) == len(reports)
        try:
            preflight.judge(records, len(reports), Path(tmp), local_lock="0" * 64, site_path="site.yaml",
                            run_dir=Path(tmp), warnings=[])
        except EnvtoolError:
            pass
        assert isinstance(preflight.table(records), str)


@settings(max_examples=15, deadline=None, derandomize=True, database=None)
@given(out=st.binary(max_size=200), err=st.binary(max_size=200))
def test_bytes_from_a_real_process_are_decoded_once(out, err):
    """What a real process writes (``cat`` of a file, both streams) comes back through
    :func:`envtool.core.external.run` exactly as :func:`~envtool.core.external.decode` reads it."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "out").write_bytes(out)
        (Path(tmp) / "err").write_bytes(err)
        proc = external.run(["sh", "-c", 'cat out; cat err >&2'], timeout=30, cwd=tmp, env=dict(os.environ))
    assert proc.returncode == 0
    assert (proc.stdout, proc.stderr) == (external.decode(out), external.decode(err))


def test_small_int_reads_only_short_ascii_numbers():
    """The one reader of numbers in external output: other scripts' digits and runs int() refuses are None."""
    assert [external.small_int(x) for x in ("0", " 42 ", "-1", "+7", "123456789")] == [0, 42, -1, 7, 123456789]
    assert [external.small_int(x) for x in ("²", "٣", "9" * 5000, "1234567890", "", "1.0", None)] == [None] * 7
