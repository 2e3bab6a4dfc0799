"""Site files may warn about a stack (Bede: WML-CE 1.7 and RHEL 8); `show` and `doctor` say so."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.speed import scaled

REPO = Path(__file__).resolve().parent.parent


def run_envtool(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVTOOL_")}
    return subprocess.run([sys.executable, "-m", "envtool", *args], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=scaled(300))


def doctor(spec):
    proc = run_envtool("doctor", "--prefix", sys.prefix, "--spec", spec, "--site", "bede", "--only", "site-warnings",
                       "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    findings = data["findings"] if isinstance(data, dict) else data
    return next(f for f in findings if f["id"] == "site-warnings")


def test_doctor_warns_about_wml_ce_on_bede_and_not_about_open_ce():
    f = doctor("ibm-wml-ce-1.7.0")
    assert f["status"] == "warn" and "RHEL 8" in f["summary"], f
    assert f["details"]["where"] == ("https://github.com/N8-CIR-Bede/documentation/blob/338157492d38/"
                                     "software/applications/wmlce.rst#L141")
    f = doctor("open-ce-1.7")
    assert f["status"] == "ok", f


def test_show_prints_the_warning_and_bede_maps_open_ce():
    proc = run_envtool("show", "ibm-wml-ce-1.6.2", "--site", "bede")
    assert proc.returncode == 0, proc.stderr
    assert "WARNING: WML-CE was archived by IBM" in proc.stdout
    proc = run_envtool("show", "open-ce-1.10", "--site", "bede", "--json")
    stack = json.loads(proc.stdout)["site"]["stack"]
    assert stack["key"] == "open-ce-*" and stack["warning"] is None and stack["source_kind"] == "repo"
