"""Example scripts for the rules' ``fires_on``/``quiet_on`` (the rule contract runs them through
the scanner). Not a rule itself."""
from __future__ import annotations


def horovod_script(*body: str) -> str:
    """A Horovod PyTorch entry script whose ``main()`` runs the statements ``body`` (one per line,
    without indentation), called under ``if __name__ == "__main__":``."""
    lines = "".join(f"    {line}\n" for line in body)
    return ("import torch\nimport horovod.torch as hvd\n\n\n"
            f"def main():\n{lines}\n\nif __name__ == '__main__':\n    main()\n")


#: Horovod's usage steps for PyTorch (init, pin, scale the learning rate, wrap, broadcast, checkpoint on rank 0).
HOROVOD_USAGE = "https://horovod.readthedocs.io/en/v0.28.1/pytorch.html"
#: the seven steps of ALCF's "Distributed Deep Learning" tutorial (the same, plus sharding the data).
ALCF_TUTORIAL = "https://github.com/argonne-lcf/sdl_ai_workshop"
