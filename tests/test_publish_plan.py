"""``envtool publish --dry-run`` prints the plan that ``publish`` runs (issue 39, item 1): the trees
it makes, each stack's build through ``create``'s own plan (its commands, shell-quoted), the SBOM,
modulefile, default, permissions and record steps, and changes nothing. A real spec resolved and
planned for this machine; nothing is built."""
from __future__ import annotations

import json
import shlex

from conftest import run_envtool
from helpers.speed import scaled

SPEC = ("name: plantest\nsummary: test\nplatforms: [linux-64]\nengine: venv\ndistribution:\n  version: \"1.0\"\n"
        "packages:\n  pip: []\nhorovod:\n  install: none\n")


def test_publish_dry_run_prints_its_plan_with_creates_and_changes_nothing(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "plantest.yaml").write_text(SPEC)
    root, mods = tmp_path / "sw dir", tmp_path / "mods"
    env = {"ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_CACHE_DIR": str(tmp_path / "cache")}
    args = ("publish", "plantest", "--root", root, "--modulefiles", mods, "--default", "--dry-run")

    proc = run_envtool(*args, env=env, timeout=scaled(300))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    assert text.startswith(f"Plan for publish into {root} (modulefiles {mods})\nplantest/1.0: would be published\n")
    ids = [line.split("[", 1)[1].split("]", 1)[0] for line in text.splitlines() if line[:1].isdigit()]
    assert ids == ["make-trees", "build:plantest/1.0", "unshare-links:plantest/1.0", "sbom:plantest/1.0",
                   "modulefile:plantest/1.0", "default:plantest/1.0", "permissions:plantest/1.0",
                   "marker:plantest/1.0", "register:plantest/1.0"], text
    mkdir = next(line for line in text.splitlines() if line.startswith("   $ mkdir"))
    assert shlex.split(mkdir[5:]) == ["mkdir", "-m", "755", str(root)], mkdir   # quoted: the path has a space
    # the build step lists create's own steps and commands (the plan 'envtool plan' makes for the target:
    # tests/test_publish_trust.py compares the two); the environment's path quoted as every word printed
    assert "   $ # create [create-venv] Create a venv at" in text, text
    assert f" -m venv --prompt 1.0 '{root}/plantest/1.0'" in text, text
    assert "dry run: nothing was changed" in text
    assert not root.exists() and not mods.exists() and not (tmp_path / "cache").exists()

    data = json.loads(run_envtool(*args, "--json", env=env, timeout=scaled(300)).stdout)
    assert data["dry_run"] is True and [s["id"] for s in data["plan"]["steps"]] == ids
    build = next(s for s in data["plan"]["steps"] if s["id"] == "build:plantest/1.0")
    venv_cmd = next(c for c in build["commands"] if c[0] != "#")
    assert venv_cmd[1:3] == ["-m", "venv"] and venv_cmd[-1] == str(root / "plantest" / "1.0"), venv_cmd
    (stack,) = data["stacks"]
    assert [c[1][len("create ["):].split("]")[0] for c in build["commands"]
            if c[0] == "#" and len(c) == 2 and c[1].startswith("create [")] == \
        [s.split(":")[0] for s in stack["steps"]]
    assert not root.exists() and not mods.exists() and not (tmp_path / "cache").exists()
