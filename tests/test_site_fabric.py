"""A site file's ``fabric`` section (issue 44): parsed with errors that name the file and field,
and exported by ``jobscript`` and ``validate --submit`` when it applies (node count, stack), shown
but not exported again when the site's module sets it."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import run_envtool
from helpers.speed import scaled

HEAD = ("name: fab\nscheduler: {sched}\nlauncher: \"{launcher}\"\ngpus_per_node: 0\n"
        "sources:\n  s1: https://example.org/fabric (2026-01-01)\n"
        "batch:\n  cpus_per_node: 2\n  time: \"00:10:00\"\n")
FABRIC = ("fabric:\n"
          "  - {name: FI_X, value: \"AWS Libfabric $(touch PWNED)\", mark: V, source: s1}\n"
          "  - {name: NCCL_NET, value: \"a b\", when: nodes > 1, mark: V, source: s1}\n"
          "  - {name: FI_MOD, value: \"1\", module_sets: true, mark: V2, source: s1}\n"
          "  - {name: ONLY_NEW, value: \"1\", modules: [\"new/*\"], mark: V, source: s1}\n")


def _site(tmp_path: Path, fabric: str = FABRIC, sched: str = "slurm", launcher: str = "srun -n {ranks}") -> Path:
    site = tmp_path / "fab.yaml"
    site.write_text(HEAD.format(sched=sched, launcher=launcher) + fabric)
    return site


def test_jobscript_exports_what_applies_and_the_rank_sees_it_verbatim(tmp_path):
    site = _site(tmp_path, sched="none", launcher="env")
    proc = run_envtool("jobscript", "--site-file", site, "--module", "m", "--nodes", "1", "--ranks-per-node", "1",
                       "--", "python3", "-c", "import os; print(os.environ['FI_X']); print('NCCL_NET' in os.environ,"
                       " 'FI_MOD' in os.environ, 'ONLY_NEW' in os.environ)", timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "# FI_MOD=1 is set by the site's module" in text and "source s1" in text
    text = text.replace("module load m\n", "")   # no module system here: the rest runs as written
    job = tmp_path / "job.sh"
    job.write_text(text)
    run = subprocess.run(["bash", str(job)], capture_output=True, text=True, cwd=tmp_path, timeout=scaled(30))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-2:] == ["AWS Libfabric $(touch PWNED)", "False False False"]
    assert not (tmp_path / "PWNED").exists()


def test_nodes_bound_in_jobscript_and_validate(tmp_path):
    site = _site(tmp_path)
    one = run_envtool("jobscript", "--site-file", site, "--module", "m", "--nodes", "1", "--ranks-per-node", "1",
                      "--", "true", timeout=scaled(60))
    two = run_envtool("jobscript", "--site-file", site, "--module", "m", "--nodes", "2", "--ranks-per-node", "1",
                      "--", "true", timeout=scaled(60))
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    assert "NCCL_NET" not in one.stdout
    assert "export NCCL_NET='a b'  # fabric, nodes >= 2 (source s1, mark V)" in two.stdout
    for text in (one.stdout, two.stdout):
        assert "export FI_MOD" not in text and "ONLY_NEW" not in text
    new = run_envtool("jobscript", "--site-file", site, "--module", "new/1", "--nodes", "1", "--ranks-per-node", "1",
                      "--", "true", timeout=scaled(60))
    assert "export ONLY_NEW=1  # fabric, always" in new.stdout, new.stderr
    venv = tmp_path / "venv"
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(venv)], check=True, timeout=scaled(60))
    val = run_envtool("validate", "--prefix", venv, "--site-file", site, "--submit", "--dry-run", "--nodes", "2",
                      "--ranks-per-node", "1", timeout=scaled(60))
    assert val.returncode == 0, val.stderr
    assert "export NCCL_NET='a b'" in val.stdout and "export FI_MOD" not in val.stdout
    assert "# FI_MOD=1 is set by the site's module" in val.stdout


def test_modules_limit_and_when_forms(tmp_path):
    from envtool.spec.sites.fabric import applying
    from envtool.spec.sites.files import load_site

    sf = load_site(_site(tmp_path, FABRIC + "  - {name: NCCL_NET, value: c, when: nodes >= 4, mark: I, source: s1}\n"))
    names = lambda nodes, mods: [(v.name, v.value) for v in applying(sf.fabric, nodes, mods)]  # noqa: E731
    assert names(1, ()) == [("FI_X", "AWS Libfabric $(touch PWNED)"), ("FI_MOD", "1")]
    assert ("ONLY_NEW", "1") in names(1, ("a", "new/2025")) and ("ONLY_NEW", "1") not in names(1, ("old/2023",))
    assert ("NCCL_NET", "a b") in names(3, ()) and ("NCCL_NET", "c") in names(4, ())


@pytest.mark.parametrize("entry,field,words", [
    ("{name: 1X, value: a, mark: V, source: s1}", "fabric[0].name", "shell variable name"),
    ("{name: X, value: [a], mark: V, source: s1}", "fabric[0].value", "string or number"),
    ("{name: X, value: a, when: sometimes, mark: V, source: s1}", "fabric[0].when", "nodes > N"),
    ("{name: X, value: a, module_sets: yes please, mark: V, source: s1}", "fabric[0].module_sets", "true or false"),
    ("{name: X, value: a, source: s1}", "fabric[0].mark", "provenance mark"),
    ("{name: X, value: a, mark: V}", "fabric[0].source", "sources"),
    ("{name: X, value: a, mark: V, source: nope}", "fabric[0].source", "s1"),
    ("{name: X, value: a, mark: V, source: s1, colour: red}", "fabric[0]", "colour"),
    ("{name: X, value: a, modules: conda, mark: V, source: s1}", "fabric[0].modules", "module names or globs"),
])
def test_bad_fabric_exits_2_naming_file_and_field(tmp_path, entry, field, words):
    site = _site(tmp_path, f"fabric:\n  - {entry}\n")
    proc = run_envtool("jobscript", "--site-file", site, "--module", "m", "--nodes", "1", "--ranks-per-node", "1",
                       "--json", "--", "true", timeout=scaled(60))
    assert proc.returncode == 2, proc.stderr + proc.stdout
    env = json.loads(proc.stdout)
    msg = json.dumps(env)
    assert env["ok"] is False and str(site) in msg and field in msg and words in msg, msg
    assert "Traceback" not in proc.stderr


def test_fabric_not_a_list_exits_2(tmp_path):
    site = _site(tmp_path, "fabric: {NCCL_NET: x}\n")
    proc = run_envtool("jobscript", "--site-file", site, "--module", "m", "--nodes", "1", "--ranks-per-node", "1",
                       "--", "true", timeout=scaled(60))
    assert proc.returncode == 2 and "fabric" in proc.stderr and "a list of variables" in proc.stderr, proc.stderr


def test_polaris_aws_module_sets_its_fabric_and_the_default_module_gets_none():
    """Polaris (issue 44): conda/2025-09-25-aws-nccl-1.6.0 sets NCCL_NET and the FI_CXI_*
    variables itself (shown, not exported); the default conda/2025-09-25 sets none and envtool
    exports none (NCCL_NET without the plug-in on the library path fails)."""
    aws = run_envtool("jobscript", "--site", "polaris", "--module", "conda/2025-09-25-aws-nccl-1.6.0", "--nodes", "2",
                      "--account", "A", "--", "python", "x.py", timeout=scaled(60))
    plain = run_envtool("jobscript", "--site", "polaris", "--module", "conda/2025-09-25", "--nodes", "2",
                        "--account", "A", "--", "python", "x.py", timeout=scaled(60))
    assert aws.returncode == plain.returncode == 0, aws.stderr + plain.stderr
    assert "# NCCL_NET='AWS Libfabric' is set by the site's module" in aws.stdout
    assert "# FI_MR_CACHE_MONITOR=userfaultfd is set by the site's module" in aws.stdout
    for text in (aws.stdout, plain.stdout):
        assert "export NCCL" not in text and "export FI_" not in text
    assert "NCCL_NET" not in plain.stdout


def test_bundled_fabric_pins_cite_primary_sources():
    from envtool.spec import provenance
    from envtool.spec.model import Pin
    from envtool.spec.sites.files import BUNDLED_SITES, available, load_site

    for name in BUNDLED_SITES:
        sf = load_site(available()[name])
        pins = [(f"fabric.{v.name}", Pin(value=v.value, mark=v.mark, source=v.source)) for v in sf.fabric]
        assert provenance.problems(sf.name, sf.sources, pins) == [], name


def test_frontier_ncclnet_only_on_several_nodes_with_the_plugin_module_and_detection():
    """Frontier (issue 44): NCCL_NET=OFI only for jobs of 2+ nodes that load rccl-net-plugin
    (olcf-ncclnet); alt_read is the module's (shown, not exported); disable_rdzv_get asked for."""
    def job(nodes, module):
        proc = run_envtool("jobscript", "--site", "frontier", "--module", module, "--nodes", str(nodes),
                           "--account", "A", "--", "python", "x.py", timeout=scaled(60))
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    two, one, bare = job(2, "rccl-net-plugin"), job(1, "rccl-net-plugin"), job(2, "rocm/7.1.1")
    assert "export NCCL_NET=OFI  # fabric, nodes >= 2 (source olcf-ncclnet, mark V)" in two
    assert "#SBATCH --network=disable_rdzv_get" in two
    assert "# FI_CXI_RDZV_PROTO=alt_read is set by the site's module" in two and "export FI_CXI" not in two
    assert "NCCL_NET" not in one and "NCCL_SOCKET_IFNAME" not in one
    assert "NCCL_NET" not in bare and "export NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3" in bare
    from envtool.spec.sites.files import available, load_site

    sf = load_site(available()["frontier"])
    hit = lambda host: any(r.matches({}, host) for r in sf.detect)  # noqa: E731
    assert hit("login12.frontier") and hit("login01.frontier.olcf.ornl.gov") and hit("frontier00256")
    assert not hit("frontend01") and not hit("polaris-login-02")
