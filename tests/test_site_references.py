"""Published reference numbers in a site file (issue 44, item 3): ``validation.references`` as a
list, each number with its stack, a stable hash of that stack, its date and source; a reference
whose stack is not the environment's is "not comparable", neither passed nor failed, in the judge
and in ``validate --export reframe``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO, run_envtool
from envtool.core.errors import SpecError
from envtool.spec import sites
from envtool.spec.sites import RefStack
from envtool.steps.validate import judge
from envtool.steps.validate import references as published_refs
from envtool.steps.validate.results import ControllerResult
from helpers.speed import scaled

HEAD = ("name: refs\nsummary: reference numbers\nscheduler: slurm\nlauncher: \"srun -n {ranks}\"\n"
        "gpus_per_node: 0\nmodules: [nccl-net/1.0]\n"
        "sources:\n  s1: https://example.org/bench (2026-01-01)\n"
        "batch:\n  cpus_per_node: 2\n  mpi: pmix\n")
#: comparable with an environment that loads nccl-net/1.0 (the site's module) ...
SAME = ("    - {name: nccl_busbw_64MiB, value: 10, lower: -0.1, upper: null, unit: GB/s, nodes: 2, size: 64MiB,\n"
        "       controller: nccl, stack: {modules: [nccl-net/1.0]}, date: \"2026-01-02\", source: s1}\n")
#: ... and not with one whose NCCL is not 2.21.5 (or not known)
OTHER = ("    - {name: nccl_busbw_1GiB, value: 36.03, lower: -0.1, unit: GB/s, nodes: 2, size: 1GiB,\n"
         "       controller: nccl, stack: {nccl: \"2.21.5\", plugin: aws-ofi-nccl 1.9.1-aws},\n"
         "       date: \"2024-04-29\", source: s1}\n")


def _site(tmp_path: Path, refs: str = SAME + OTHER) -> Path:
    site = tmp_path / "refs.yaml"
    site.write_text(HEAD + "validation:\n  references:\n" + refs)
    return site


# --- parsing -----------------------------------------------------------------------------------

def test_the_list_form_carries_stack_hash_date_and_source(tmp_path):
    sf = sites.load_site(_site(tmp_path))
    same, other = sf.references
    assert (same.name, same.value, same.lower, same.upper, same.unit, same.nodes, same.size) == \
        ("nccl_busbw_64MiB", 10.0, -0.1, None, "GB/s", 2, 64 << 20)
    assert other.size == 1 << 30 and other.date == "2024-04-29" and other.source == "s1"
    assert other.stack == RefStack(nccl="2.21.5", plugin="aws-ofi-nccl 1.9.1-aws")
    assert other.stack_hash == RefStack(plugin="aws-ofi-nccl 1.9.1-aws", nccl="2.21.5").digest()
    assert sf.references_for(2) == (same, other) and sf.references_for(3) == ()


@pytest.mark.parametrize("entry, field", [
    ("{name: a, value: 1, unit: GB/s, nodes: 2, stack: {nccl: \"2.21\"}, date: \"2024-01-01\"}",
     "validation.references[0].source"),
    ("{name: a, value: 1, unit: GB/s, nodes: 2, stack: {nccl: \"2.21\"}, date: \"2024-01-01\", source: nope}",
     "validation.references[0].source"),
    ("{name: a, value: 1, unit: GB/s, nodes: 2, stack: {nccl: \"2.21\"}, date: 2024/01/01, source: s1}",
     "validation.references[0].date"),
    ("{name: a, value: 1, unit: GB/s, nodes: 2, stack: {}, date: \"2024-01-01\", source: s1}",
     "validation.references[0].stack"),
    ("{name: a, value: 1, unit: GB/s, nodes: 2, stack: {mpi: cray}, date: \"2024-01-01\", source: s1}",
     "validation.references[0].stack.mpi"),
    ("{name: a, value: 1, unit: GB/s, nodes: 2, stack: {nccl: \"2.21\"}, stack_hash: 0000000000000000,"
     " date: \"2024-01-01\", source: s1}", "validation.references[0].stack_hash"),
    ("{name: a, value: 1, lower: 0.2, unit: GB/s, nodes: 2, stack: {nccl: \"2.21\"}, date: \"2024-01-01\","
     " source: s1}", "validation.references[0].lower"),
    ("{name: a, value: 1, unit: furlongs, nodes: 2, stack: {nccl: \"2.21\"}, date: \"2024-01-01\", source: s1}",
     "validation.references[0].unit"),
    ("{name: a, value: 1, unit: GB/s, nodes: 0, stack: {nccl: \"2.21\"}, date: \"2024-01-01\", source: s1}",
     "validation.references[0].nodes"),
    ("{name: a, value: 1, unit: GB/s, nodes: 2, size: lots, stack: {nccl: \"2.21\"}, date: \"2024-01-01\","
     " source: s1}", "validation.references[0].size"),
])
def test_a_bad_entry_names_its_index_and_field(tmp_path, entry, field):
    site = _site(tmp_path, "    - " + entry + "\n")
    with pytest.raises(SpecError) as err:
        sites.load_site(site)
    assert field in str(err.value) and str(site) in str(err.value), str(err.value)


def test_a_bad_entry_exits_2_with_json(tmp_path):
    site = _site(tmp_path, SAME + "    - {name: b, value: 1, unit: GB/s, nodes: 2, date: \"2024-01-01\", source: s1}\n")
    proc = run_envtool("jobscript", "--site-file", site, "--module", "m", "--nodes", "1", "--json", "--", "true",
                       timeout=scaled(60))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert "validation.references[1].stack" in err and str(site) in err, err


# --- the stack hash ----------------------------------------------------------------------------

def test_the_stack_hash_is_stable_and_follows_the_description():
    stack = RefStack(nccl="2.21.5", plugin="aws-ofi-nccl 1.9.1-aws")
    # sha256 of {"nccl":"2.21.5","plugin":"aws-ofi-nccl 1.9.1-aws"}: the same on any machine, any run
    assert stack.digest() == "6ca710bd95385453"
    out = subprocess.run([sys.executable, "-c", "from envtool.spec.sites import RefStack; print(RefStack("
                          "plugin='aws-ofi-nccl 1.9.1-aws', nccl='2.21.5').digest())"], capture_output=True,
                         text=True, cwd=REPO, env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"}, check=True)
    assert out.stdout.strip() == stack.digest()
    assert RefStack(nccl="2.21.5", plugin="none").digest() != stack.digest()
    assert RefStack(modules=("a/1", "b/2")).digest() != RefStack(modules=("b/2", "a/1")).digest()


def test_the_bundled_references_state_the_hash_of_their_stack():
    for name in ("polaris", "alps"):
        sf = sites.load_site(REPO / "sites" / f"{name}.yaml")
        assert sf.references, name
        for ref in sf.references:
            assert ref.stack is not None and ref.date and ref.source in dict(sf.sources), (name, ref)


# --- comparable or not -------------------------------------------------------------------------

def test_stack_differences_say_why():
    ref = RefStack(nccl="2.21", plugin="aws-ofi-nccl 1.9.1-aws", modules=("conda/2025-09-25",))
    same = RefStack(modules=("craype", "conda/2025-09-25"), nccl="2.21.5", plugin="aws-ofi-nccl v1.9.1-aws")
    assert sites.stack_differences(ref, same) == []
    why = sites.stack_differences(ref, RefStack(modules=("conda/2023-10-04",), nccl="2.28.3", plugin="none"))
    assert len(why) == 3 and "not conda/2025-09-25" in why[0] and "NCCL 2.21" in why[1] and "none" in why[2]
    assert sites.stack_differences(ref, RefStack(modules=("conda/2025-09-25",), plugin="aws-ofi-nccl")) == [
        "the reference was measured with NCCL version 2.21; the environment's NCCL version is not known"]


def _plan(site, modules=("nccl-net/1.0",), nodes=2):
    target = SimpleNamespace(site=site, spec=None, modules=modules)
    return SimpleNamespace(target=target, layout=SimpleNamespace(nodes=nodes))


def _rows(busbw_64mib: float):
    return [{"bytes": 64 << 20, "busbw_gbs": busbw_64mib, "latency_us": 1.0}]


def _nccl_entry(busbw: float, log_lines):
    facts = {"plugin": published_refs.sweep.plugin_status(log_lines),
             "version": published_refs.nccl_version_in(log_lines)}
    return ControllerResult(phase="mpi", sweep=_rows(busbw), nccl=facts, logs=["nccl/0.log"])


#: NCCL's own first lines (NCCL_DEBUG=INFO), as on Polaris with the plug-in (host:pid:tid [dev])
LOG = ["x3006c0s13b1n0:61241:61241 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
       "x3006c0s13b1n0:61241:61300 [0] NCCL INFO NET/OFI Using aws-ofi-nccl 1.9.1-aws"]


def test_the_judge_compares_only_references_measured_on_the_environments_stack(tmp_path):
    sf = sites.load_site(_site(tmp_path))
    problems: list = []
    out = judge.reference_verdicts(_plan(sf), {"nccl": _nccl_entry(5.0, LOG)}, problems)
    by = {v["name"]: v for v in out}
    assert by["nccl_busbw_64MiB"]["status"] == "failed" and by["nccl_busbw_64MiB"]["got"] == 5.0
    assert problems == ["reference " + published_refs.line(by["nccl_busbw_64MiB"])]
    # NCCL 2.21.5 said so in its log, but no plug-in is listed for the site: not comparable, not failed
    other = by["nccl_busbw_1GiB"]
    assert other["status"] == "not comparable" and "network plug-in" in other["why"][0], other
    assert other["stack_hash"] == RefStack(nccl="2.21.5", plugin="aws-ofi-nccl 1.9.1-aws").digest()
    problems.clear()
    out = judge.reference_verdicts(_plan(sf), {"nccl": _nccl_entry(9.5, LOG)}, problems)
    assert [v["status"] for v in out] == ["passed", "not comparable"] and problems == []
    # another module set: the first is not comparable either, whatever it measured
    out = judge.reference_verdicts(_plan(sf, modules=("nccl-net/2.0",)), {"nccl": _nccl_entry(1.0, LOG)}, problems)
    assert out[0]["status"] == "not comparable" and "nccl-net/1.0" in out[0]["why"][0] and problems == []
    assert judge.reference_verdicts(_plan(sf, nodes=4), {"nccl": _nccl_entry(1.0, LOG)}, problems) == []


def test_a_comparable_reference_beyond_the_sweep_is_not_measured(tmp_path):
    site = _site(tmp_path, OTHER.replace("plugin: aws-ofi-nccl 1.9.1-aws", "plugin: none"))
    sf = sites.load_site(site)
    tcp = ["host:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
           "host:1:1 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation"]
    (v,) = judge.reference_verdicts(_plan(sf), {"nccl": _nccl_entry(1.0, tcp)}, [])
    assert v["status"] == "not measured" and v["environment_stack"] == {"modules": ["nccl-net/1.0"],
                                                                       "nccl": "2.21.5", "plugin": "none"}


# --- validate --export reframe -----------------------------------------------------------------

def test_the_reframe_export_carries_only_comparable_references(tmp_path):
    prefix = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=scaled(60))
    site = _site(tmp_path)
    args = ("validate", "--export", "reframe", "--prefix", prefix, "--site-file", site, "--nodes", "2",
            "--ranks-per-node", "1", "-o", tmp_path / "rfm.py")
    env = {"PYTHONPATH": str(REPO)}
    proc = run_envtool(*args, "--json", cwd=tmp_path, env=env, timeout=scaled(60))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["references"] == {"nccl_busbw_64MiB": [10.0, -0.1, None, "GB/s"]}
    (left,) = data["not_comparable"]
    assert left["name"] == "nccl_busbw_1GiB" and left["status"] == "not comparable" and left["date"] == "2024-04-29"
    assert "NCCL version is not known" in left["why"][0]
    assert "nccl_busbw_1GiB" not in (tmp_path / "rfm.py").read_text()
    text = run_envtool(*args, cwd=tmp_path, env=env, timeout=scaled(60))
    assert text.returncode == 0, text.stderr
    assert "reference nccl_busbw_1GiB (36.03 GB/s, 2024-04-29, s1; stack 6ca710bd95385453): not comparable" \
        in text.stdout, text.stdout
