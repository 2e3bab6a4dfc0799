"""envtool.steps package."""
