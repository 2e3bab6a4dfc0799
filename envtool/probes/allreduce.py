"""Probe: one rank of a Horovod allreduce (run under ``horovodrun``), for ``create``'s validation.

Run by a launcher with the environment's interpreter (standalone: only the standard library at
module level, ``horovod.torch`` and ``torch`` inside :func:`main`)::

    horovodrun -np 2 -H localhost:2 --gloo python allreduce.py

Each rank contributes ``rank + 1`` to an averaging allreduce, so every rank must get
:func:`expected_average` of the world size (1.5 for 2 ranks). Each rank prints one JSON object
after ``ENVTOOL-PROBE ``: ``{"rank": 0, "size": 2, "value": 1.5}``. Launchers tag and interleave
these lines, so envtool finds the objects wherever they start
(``envtool.validate.probes.parse_allreduce``).

Exit status: 0 when this rank got the expected value, 1 otherwise (an exception exits 1 too).
"""
import json
import sys

#: Line prefix of every record (the same in every probe and in ``envtool.probes.MARKER``).
MARKER = "ENVTOOL-PROBE "

#: The tensor name of the allreduce (Horovod matches collective operations across ranks by name).
TENSOR_NAME = "envtool.probe"


def contribution(rank):
    """What rank ``rank`` sends: ``rank + 1`` (float)."""
    return float(rank + 1)


def expected_average(size):
    """The average of every rank's contribution for ``size`` ranks: (1 + … + size) / size (float)."""
    return sum(contribution(r) for r in range(size)) / size


def main(argv=None):
    """Initialize Horovod, allreduce (average) this rank's contribution, print the record.

    Returns:
        the exit status (int).
    """
    import horovod.torch as hvd
    import torch

    hvd.init()
    result = hvd.allreduce(torch.tensor([contribution(hvd.rank())]), name=TENSOR_NAME)
    value = float(result[0])
    print(MARKER + json.dumps({"rank": hvd.rank(), "size": hvd.size(), "value": value}), flush=True)
    return 0 if abs(value - expected_average(hvd.size())) < 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
