"""``envtool pack`` is a plan of typed steps run by the one runner (issue 39, item 1): ``--dry-run``
prints that plan (titles and shell-quoted lines) and changes nothing; a real pack runs the same
steps. A real venv (``python -m venv --without-pip``), a real pack; nothing is mocked."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import run_envtool
from helpers.speed import scaled


def _listing(top: Path):
    """Every path under ``top`` with its mode, size and modification time (what a change would show)."""
    out = []
    for p in sorted(top.rglob("*")):
        st = os.lstat(p)
        out.append((str(p), st.st_mode, st.st_size, st.st_mtime_ns))
    return out


def test_pack_dry_run_prints_the_plan_and_changes_nothing_then_the_same_steps_run(tmp_path):
    env = tmp_path / "my env"   # a space: every line printed for pasting is shell-quoted
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=scaled(120))
    (env / "conda-lock.yml").write_text("version: 1\nmetadata: {}\npackage: []\n")
    out = tmp_path / "out.tar"
    out.write_text("keep me")
    cache = {"ENVTOOL_CACHE_DIR": str(tmp_path / "cache")}
    before = _listing(tmp_path)

    proc = run_envtool("pack", env, "--format", "tar", "-o", out, "--force", "--dry-run", env=cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    assert text.startswith(f"Plan for pack {env} -> {out}\n"), text
    ids = [line.split("[", 1)[1].split("]", 1)[0] for line in text.splitlines() if line[:1].isdigit()]
    assert ids == ["check-contents", "check-venv", "lock", "sbom", "pack", "place"], text
    assert f"$ # sha256sum '{env}/conda-lock.yml'" in text, text   # the path quoted, as every word printed
    assert "(replacing that file); nothing was changed" in text, text
    assert _listing(tmp_path) == before and out.read_text() == "keep me"

    data = json.loads(run_envtool("pack", env, "--format", "tar", "-o", out, "--force", "--dry-run", "--json",
                                  env=cache).stdout)
    assert data["dry_run"] is True and data["replaces"] is True and data["kind"] == "venv"
    assert [s["id"] for s in data["plan"]["steps"]] == ids
    assert _listing(tmp_path) == before   # no log either: the cache was not made

    proc = run_envtool("pack", env, "--format", "tar", "-o", out, "--force", "--json", env=cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert list(result["timings"]) == ids   # what ran is the plan that was shown
    assert Path(result["log"]).is_file() and "==> [6/6] place" in Path(result["log"]).read_text()
    assert out.read_bytes()[:1] != b"k"   # replaced by the pack
