"""Horovod's TensorFlow and Keras bindings, each controller across the job's ranks (validation checks, data).

Each rank imports ``tensorflow``, ``horovod.tensorflow`` and ``horovod.tensorflow.keras``, averages
``rank + 1`` through ``horovod.tensorflow``, and runs a 2-epoch Keras ``model.fit`` with
``hvd.DistributedOptimizer`` and ``BroadcastGlobalVariablesCallback(0)`` whose weights must then
agree on every rank (``envtool/probes/tf_checks.py``). ``MPI``: started by the site's launcher with
the site's PMI, on this machine ``horovodrun --mpi``; ``GLOO``: ``srun --mpi=none`` with envtool's
rendezvous server, on this machine ``horovodrun --gloo`` (as :mod:`envtool.validate.check_horovod`
for PyTorch). Registered in :data:`envtool.validate.checks.CHECKS`.
"""
from envtool.validate.checks import ValidationCheck

MPI = ValidationCheck(name="horovod-tf-mpi", framework="tensorflow", binding="horovod.tensorflow", backend="mpi",
                      device="cpu", launch="site", local="horovodrun", phase="probe-tensorflow",
                      key="tensorflow-mpi", import_trace=True)
GLOO = ValidationCheck(name="horovod-tf-gloo", framework="tensorflow", binding="horovod.tensorflow", backend="gloo",
                       device="cpu", launch="rendezvous", local="horovodrun", phase="probe-tensorflow-gloo",
                       args=("--controller", "gloo"), key="tensorflow-gloo", rendezvous="horovod-gloo:horovod.tensorflow")
