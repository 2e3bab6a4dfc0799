"""Probe: one rank of a Horovod allreduce (run under ``horovodrun``), for ``create``'s validation.

Run by a launcher with the environment's interpreter (standalone: only the standard library at
module level, the framework and Horovod's binding inside :func:`main`)::

    horovodrun -np 2 -H localhost:2 --gloo python allreduce.py [--framework tensorflow]

``--framework pytorch`` (the default) allreduces through ``horovod.torch``; ``--framework
tensorflow`` through ``horovod.tensorflow``, and then runs the Keras check of ``tf_checks.py`` (in
this directory): a 2-epoch ``model.fit`` with ``hvd.DistributedOptimizer`` and
``BroadcastGlobalVariablesCallback(0)`` whose weights must agree on every rank afterwards; its
record is the ``keras_fit`` field.

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

    Args:
        argv: ``[--framework pytorch|tensorflow]`` (default ``sys.argv[1:]``).
    Returns:
        the exit status (int): 0 when this rank got the expected value (and, for TensorFlow, the
        Keras check passed), 1 otherwise, 2 for an unknown framework.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    framework = args[args.index("--framework") + 1] if "--framework" in args[:-1] else "pytorch"
    if framework == "tensorflow":
        return _tensorflow()
    if framework != "pytorch":
        sys.stderr.write("allreduce.py: unknown framework %r (pytorch or tensorflow)\n" % framework)
        return 2
    import horovod.torch as hvd
    import torch

    hvd.init()
    result = hvd.allreduce(torch.tensor([contribution(hvd.rank())]), name=TENSOR_NAME)
    value = float(result[0])
    print(MARKER + json.dumps({"rank": hvd.rank(), "size": hvd.size(), "value": value, "framework": framework}),
          flush=True)
    return 0 if abs(value - expected_average(hvd.size())) < 1e-6 else 1


def _tensorflow():
    """``horovod.tensorflow``'s allreduce and the Keras check (``tf_checks.py``); the exit status."""
    import horovod.tensorflow as hvd
    import horovod.tensorflow.keras as hvdk
    import numpy as np
    import tensorflow as tf
    import tf_checks

    why = tf_checks.eager(tf)  # TensorFlow 1.x: before any operation
    if why:
        sys.stderr.write("allreduce.py: %s\n" % why)
        return 1
    hvd.init()
    tf_checks.pin_gpu(tf, hvd.local_rank())
    with tf.device("/cpu:0"):
        result = hvd.allreduce(tf.constant([contribution(hvd.rank())]), name=TENSOR_NAME)
    value = float(result.numpy()[0])
    if int(tf.__version__.split(".")[0]) < 2:  # the Keras check needs TensorFlow 2 (see the rank probe)
        print(MARKER + json.dumps({"rank": hvd.rank(), "size": hvd.size(), "value": value,
                                   "framework": "tensorflow"}), flush=True)
        return 0 if abs(value - expected_average(hvd.size())) < 1e-6 else 1
    keras = tf_checks.keras_fit_check(hvdk, tf, np)
    print(MARKER + json.dumps({"rank": hvd.rank(), "size": hvd.size(), "value": value, "framework": "tensorflow",
                               "keras_fit": keras}), flush=True)
    return 0 if abs(value - expected_average(hvd.size())) < 1e-6 and keras["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
