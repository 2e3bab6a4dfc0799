"""Probes that run inside an environment (in fresh subprocesses of its own interpreter)."""
