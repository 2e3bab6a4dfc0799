"""``envtool specs`` remembers its table between runs (envtool/spec/matrix_cache.py, issue 39):
the same output without reading a spec, a changed or bad file read anew, and a remembered file
that is not the user's own ignored."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO, run_envtool
from helpers.speed import scaled

#: the modules whose import shows that a run read the catalog (``python -X importtime`` names
#: every module a run imports, on stderr)
WATCHED = ("rattler", "yaml", "envtool.spec.load")


SPEC = """name: cache-probe
summary: a spec of this test ({tag})
platforms: [linux-64]
python: "3.11"
engine: venv
packages:
  pip: ["torch==2.13.0"]
"""


def _specs(env, *args):
    """``envtool specs ARGS`` under ``python -X importtime``: (exit, stdout, the :data:`WATCHED`
    modules it imported, as a sorted list in a string ``imported: [...]``)."""
    full = dict(os.environ, **env)
    full.pop("ENVTOOL_DEBUG", None)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "envtool", "specs", *args], capture_output=True,
                          text=True, cwd=REPO, env=full, timeout=scaled(120))
    names = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return proc.returncode, proc.stdout, f"imported: {sorted(m for m in WATCHED if m in names)}"


def _env(tmp_path: Path) -> dict:
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    return {"ENVTOOL_CACHE_DIR": str(tmp_path / "cache"), "ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_SITE_PATH": "",
            "COLUMNS": "400"}


def test_a_second_run_prints_the_same_table_without_reading_a_spec(tmp_path):
    env = _env(tmp_path)
    (tmp_path / "specs" / "cache-probe.yaml").write_text(SPEC.format(tag="one"))
    code, first, imported = _specs(env)
    assert code == 0 and "rattler" in imported and "envtool.spec.load" in imported, imported
    assert "cache-probe" in first
    remembered = tmp_path / "cache" / "specs" / "matrix.json"
    assert remembered.is_file() and remembered.stat().st_mode & 0o777 == 0o600
    code, second, imported = _specs(env)
    assert code == 0 and second == first
    assert imported == "imported: []", imported  # neither py-rattler nor PyYAML nor the spec loader
    code, js, imported = _specs(env, "--json")
    assert imported == "imported: []" and json.loads(js)["specs"] == json.loads(
        run_envtool("specs", "--json", env={**env, "ENVTOOL_CACHE_DIR": str(tmp_path / "other")}).stdout)["specs"]

    # a changed file is read anew; so is the whole catalog under another ENVTOOL_* setting
    (tmp_path / "specs" / "cache-probe.yaml").write_text(SPEC.format(tag="two"))
    code, third, imported = _specs(env, "--json")
    assert code == 0 and "rattler" in imported
    (row,) = [r for r in json.loads(third)["specs"] if r["name"] == "cache-probe"]
    assert row["summary"] == "a spec of this test (two)"
    code, _, imported = _specs({**env, "ENVTOOL_DEFAULT_CHANNELS": "conda-forge"})
    assert code == 0 and "rattler" in imported

    # a bad file is reported on every run (exit 2), never remembered as loaded
    (tmp_path / "specs" / "bad.yaml").write_text(SPEC.replace("cache-probe", "bad").replace("torch==", "torch=>"))
    for _ in range(2):
        code, out, imported = _specs(env)
        assert code == 2 and "cache-probe" in out and "envtool.spec.load" in imported


def test_a_remembered_table_that_others_could_write_is_ignored(tmp_path):
    """A file with the right key but rows of its own (``FAKE``): used when it is the user's own,
    private file; ignored when group-writable or reached through a symbolic link."""
    env = _env(tmp_path)
    (tmp_path / "specs" / "cache-probe.yaml").write_text(SPEC.format(tag="one"))
    assert _specs(env)[0] == 0
    remembered = tmp_path / "cache" / "specs" / "matrix.json"
    data = json.loads(remembered.read_text())
    data["rows"][0]["summary"] = data["rows"][0]["name"] = "FAKE"
    forged = json.dumps(data)
    remembered.write_text(forged)
    assert "FAKE" in _specs(env)[1]            # the key matched: the file is what is printed
    remembered.chmod(0o620)                    # the group may write it: not trusted
    code, out, imported = _specs(env)
    assert code == 0 and "FAKE" not in out and "rattler" in imported
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(forged)
    elsewhere.chmod(0o600)
    remembered.unlink()
    remembered.symlink_to(elsewhere)           # a link, even to a private file: not followed
    code, out, _ = _specs(env)
    assert code == 0 and "FAKE" not in out


def test_the_runs_own_marker_is_the_only_envtool_variable_left_out_of_the_key():
    from envtool.core.procs import BUILD_MARKER
    from envtool.spec.matrix_cache import RUN_VARIABLES

    assert RUN_VARIABLES == {BUILD_MARKER}
