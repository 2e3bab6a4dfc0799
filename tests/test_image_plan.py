"""``envtool image --dry-run`` (issue 39): the plan the build would run, printed from the same
steps (each step's title and its shell-quoted commands), and nothing written: no output, no work
directory, no log, no cache. Fast: no root, no image tools, no network."""
from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from conftest import REPO, run_envtool


def _environment(tmp_path: Path) -> Path:
    """A venv environment's record as ``create`` leaves it: the cpu-horovod lock (Horovod built by
    envtool) and a ``create.json`` naming its Horovod build's variables."""
    env = tmp_path / "env"
    (env / ".envtool").mkdir(parents=True)
    shutil.copy2(REPO / "lockfiles" / "cpu-horovod.conda-lock.yml", env / "conda-lock.yml")
    record = {"steps": [{"id": "build-horovod", "env": {"HOROVOD_WITH_MPI": "1", "HOROVOD_WITH_PYTORCH": "1"}}]}
    (env / ".envtool" / "create.json").write_text(json.dumps(record))
    return env


def _untouched(tmp_path: Path, out: Path) -> None:
    assert not out.exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["cache", "env"]  # no work directory, no log
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_image_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    env = _environment(tmp_path)
    (tmp_path / "cache").mkdir()
    out = tmp_path / "my image"  # a space: every command is shell-quoted
    cache = {"ENVTOOL_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_envtool("image", env, "--output", out, "--format", "dir,squashfs", "--compile-horovod", "--dry-run",
                       env=cache, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    assert f"Image plan for {env} -> {out}" in text and "compiled inside the image (--compile-horovod (no wheel cache" in text
    ids = [line.split("]")[0].split("[")[1] for line in text.splitlines() if line[:1].isdigit()]
    assert ids == ["wheelhouse", "horovod-sdist", "build-root", "build-root-install", "compile-horovod", "base",
                   "python", "install", "abi", "sbom", "squashfs", "place"], ids
    work = str(tmp_path / ".my image.envtool-image-XXXXXXXX")
    mksquashfs = [line for line in text.splitlines() if line.strip().startswith("$ mksquashfs")]
    assert len(mksquashfs) == 1 and shlex.split(mksquashfs[0].strip()[2:])[1:3] == \
        [f"{work}/rootfs", f"{work}/out/image.sqfs"], mksquashfs
    assert "nothing was changed" in text
    _untouched(tmp_path, out)

    proc = run_envtool("image", env, "--output", out, "--format", "dir", "--compile-horovod", "--dry-run", "--json",
                       env=cache, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is True and data["dry_run"] is True and data["output"] == str(out)
    steps = data["plan"]["steps"]
    assert [s["id"] for s in steps][-4:] == ["install", "abi", "sbom", "place"]
    compile_step = next(s for s in steps if s["id"] == "compile-horovod")
    assert "HOROVOD_WITH_MPI=1" in compile_step["commands"][0] and "wheel" in compile_step["commands"][0]
    assert data["plan"]["horovod"]["compile"].startswith("--compile-horovod")
    _untouched(tmp_path, out)


def test_image_dry_run_without_the_wheel_is_exit_1_and_bad_input_exit_2(tmp_path):
    """Without ``--compile-horovod`` a lock whose Horovod wheel no cache holds cannot be planned
    (exit 1, naming the option); an unknown form is exit 2; neither writes anything."""
    env = _environment(tmp_path)
    (tmp_path / "cache").mkdir()
    out = tmp_path / "img"
    cache = {"ENVTOOL_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_envtool("image", env, "--output", out, "--dry-run", "--json", env=cache, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "--compile-horovod" in json.loads(proc.stdout)["error"]
    proc = run_envtool("image", env, "--output", out, "--format", "tar", "--dry-run", "--json", env=cache, timeout=120)
    assert proc.returncode == 2 and "--format" in json.loads(proc.stdout)["error"], proc.stdout
    _untouched(tmp_path, out)
