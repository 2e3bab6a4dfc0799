"""Parsing what the validation probes print (envtool/validate/probes.py)."""
from envtool.validate import probes

# What `mpirun --tag-output -np 2` printed for the allreduce probe in a CI run: rank 1's empty
# tagged line was glued to the end of its JSON line.
MPIRUN_GLUED = ('[1,0]<stdout>:{"rank": 0, "size": 2, "value": 1.5}\n'
                '[1,1]<stdout>:{"rank": 1, "size": 2, "value": 1.5}[1,1]<stdout>:\n')


def test_allreduce_output_with_glued_tags():
    assert probes.parse_allreduce(MPIRUN_GLUED, 2)


def test_allreduce_wrong_value_or_missing_rank_fails():
    assert not probes.parse_allreduce(MPIRUN_GLUED.replace('"value": 1.5}[1,1]', '"value": 1.0}[1,1]'), 2)
    assert not probes.parse_allreduce(MPIRUN_GLUED.splitlines()[0], 2)
    assert not probes.parse_allreduce(MPIRUN_GLUED, 3)


def test_allreduce_ignores_other_braces():
    noisy = 'warning {not json}\n{"rank": 0, "size": 1, "value": 1.0}\n{"other": {"size": 1}}\n'
    assert probes.parse_allreduce(noisy, 1)
