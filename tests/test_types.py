"""The package type-checks (issue 28): ``python3 -m mypy`` with the ``[tool.mypy]`` settings in
pyproject.toml (the whole ``envtool`` package, ``check_untyped_defs``, only the named untyped
third-party packages skipped) reports no error.

mypy: https://mypy.readthedocs.io/en/stable/config_file.html (``packages``, per-module overrides).
"""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _mypy(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), "--no-color-output",
                           "--no-error-summary", *args], cwd=cwd, capture_output=True, text=True, timeout=900)


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_the_package_type_checks(tmp_path):
    proc = _mypy("--config-file", str(REPO / "pyproject.toml"), cwd=REPO, cache=tmp_path / "cache")
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert proc.returncode == 0 and not errors, (
        f"mypy found {len(errors)} error(s):\n" + "\n".join(errors[:300]) + "\n" + proc.stderr[-2000:])


def test_a_type_error_is_reported(tmp_path):
    """The check can fail: the project's settings reach into an unannotated function body
    (``check_untyped_defs``) and refuse an ignore without an error code."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    bad = tmp_path / "wrong.py"
    bad.write_text("def untyped():\n    n: int = 'three'\n    return n\n\n"
                   "x: int = 'four'  # type: ignore\n")
    proc = _mypy("--config-file", str(tmp_path / "pyproject.toml"), str(bad), cwd=tmp_path, cache=tmp_path / "cache")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "wrong.py:2: error: Incompatible types in assignment" in proc.stdout, proc.stdout
    assert "wrong.py:5: error: " in proc.stdout and "ignore-without-code" in proc.stdout, proc.stdout
