"""Horovod's PyTorch binding, each controller across the job's ranks (validation checks, data).

``MPI``: the rank probe's ``probe`` phase started by the site's launcher with the site's PMI
(Horovod picks its MPI controller); on this machine ``horovodrun --mpi``. ``GLOO``: the
``probe-gloo`` phase with ``--controller gloo``, started by ``srun --mpi=none`` while envtool's
rendezvous server (``rendezvous.py``) in the batch shell serves Horovod's Gloo rendezvous; on this
machine ``horovodrun --gloo``. Registered in :data:`envtool.validate.checks.CHECKS`.
"""
from envtool.validate.checks import ValidationCheck

MPI = ValidationCheck(name="horovod-mpi", framework="pytorch", binding="horovod.torch", backend="mpi", device="cpu",
                      launch="site", local="horovodrun", phase="probe", key="mpi", import_trace=True)
GLOO = ValidationCheck(name="horovod-gloo", framework="pytorch", binding="horovod.torch", backend="gloo",
                       device="cpu", launch="rendezvous", local="horovodrun", phase="probe-gloo",
                       args=("--controller", "gloo"), key="gloo", rendezvous="horovod-gloo")
