"""create is atomic: a failed, refused or terminated create leaves nothing at the target and keeps its log."""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path


from conftest import REPO, run_envtool
from envtool.steps.kernel.relocate import rewrite_prefix
from helpers.speed import scaled

MISSING_FRAMEWORK = """name: needs-tensorflow
summary: asks Horovod for TensorFlow but installs none
engine: venv
horovod:
  version: 0.28.1
  install: pip-build
  frameworks: [tensorflow]
  controllers: [gloo]
expect:
  check_build: {frameworks: [TensorFlow], controllers: [Gloo], tensor_operations: [Gloo]}
"""


def leftovers(parent: Path, name: str):
    return [p.name for p in parent.iterdir() if name in p.name]


def test_failed_build_leaves_nothing_and_names_the_log(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "needs-tensorflow.yaml").write_text(MISSING_FRAMEWORK)
    target = tmp_path / "envs" / "tf"
    cache = tmp_path / "cache"
    proc = run_envtool("create", "needs-tensorflow", "--prefix", target,
                       env={"ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_CACHE_DIR": str(cache)}, timeout=900)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "tensorflow" in proc.stderr and "build-horovod" in proc.stderr
    assert not target.exists()
    assert leftovers(target.parent, "tf") == []
    match = re.search(r"build log: (\S+)", proc.stderr)
    assert match, proc.stderr
    log = Path(match.group(1))
    assert log.is_file() and log.parent == cache / "logs"
    text = log.read_text()
    assert "FAILED" in text and "nothing was left at" in text
    assert "-m venv" in text  # the log holds the subprocesses of the earlier steps too


def test_existing_target_is_refused_with_exit_2(tmp_path):
    target = tmp_path / "exists"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    proc = run_envtool("create", "cpu-horovod", "--prefix", target)
    assert proc.returncode == 2
    assert "--force" in proc.stderr
    assert (target / "keep.txt").read_text() == "mine"


SLOW_PIP = """name: slow-pip
engine: venv
packages:
  pip: ["torch==2.13.0"]
"""


def test_sigterm_during_create_removes_the_build_prefix(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "slow-pip.yaml").write_text(SLOW_PIP)
    target = tmp_path / "envs" / "slow"
    env = dict(os.environ, ENVTOOL_SPEC_PATH=str(specs), ENVTOOL_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-m", "envtool", "create", "slow-pip", "--prefix", str(target)],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + scaled(120)
    while time.monotonic() < deadline:  # wait until the venv exists in the build prefix
        builds = [p for p in target.parent.glob(".slow.envtool-build-*") if (p / "bin" / "python").exists()]
        if builds:
            break
        time.sleep(0.2)
    assert builds, "the build prefix never appeared"
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=scaled(120))
    assert proc.returncode == 130, err
    assert "interrupted" in err and "build log:" in err
    assert not target.exists()
    assert leftovers(target.parent, "slow") == []


def test_rewrite_prefix_text_and_binary(tmp_path):
    old = str(tmp_path / ".env.envtool-build-1")
    root = Path(old)
    (root / "bin").mkdir(parents=True)
    script = root / "bin" / "tool"
    script.write_text(f"#!{old}/bin/python\nprint('hi')\n")
    script.chmod(0o755)
    (root / "pyvenv.cfg").write_text(f"home = /usr/bin\ncommand = /usr/bin/python3 -m venv {old}\n")
    (root / "lib.so").write_bytes(b"\x7fELF\0\0" + old.encode() + b"\0rest")
    (root / "x.pyc").write_bytes(b"\0" + old.encode())
    report = rewrite_prefix(root, old, "/final/env")
    assert sorted(report.rewritten) == ["bin/tool", "pyvenv.cfg"]
    assert report.binaries == ["lib.so"]
    assert script.read_text().startswith("#!/final/env/bin/python\n")
    assert os.access(script, os.X_OK)
