"""Test helpers shared across test modules (real conda channels, environments)."""
