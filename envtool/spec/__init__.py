"""envtool.spec package."""
