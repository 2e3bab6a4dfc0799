"""Imports flow one way (issue 11): the import-linter contracts in pyproject.toml hold.

``lint-imports`` reads the contracts from ``[tool.importlinter]`` and builds the import graph of
the package (imports inside functions included), so a circle that crosses a folder fails here.
"""
import shutil
import subprocess
import sys
from pathlib import Path

from helpers.speed import scaled

REPO = Path(__file__).resolve().parent.parent


def test_import_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run([exe, "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True,
                          text=True, timeout=scaled(300))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout and "KEPT" in proc.stdout


def test_a_contract_that_is_broken_is_reported(tmp_path):
    """The check can fail: an upward import (core importing the CLI) breaks the layers contract."""
    pkg = tmp_path / "envtool"
    shutil.copytree(REPO / "envtool", pkg, ignore=shutil.ignore_patterns("__pycache__", "_bundled"))
    (pkg / "core" / "upward.py").write_text("from envtool.cli import main  # noqa: F401\n")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run([exe, "--config", str(tmp_path / "pyproject.toml")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=scaled(300), env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0
    assert "envtool.core.upward -> envtool.cli" in proc.stdout
