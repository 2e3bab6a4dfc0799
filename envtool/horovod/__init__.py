"""envtool.horovod package."""
