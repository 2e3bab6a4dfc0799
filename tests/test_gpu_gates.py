"""GPU gates and known-bad communication stacks (issue 41, items 3 and 4).

The gates are checked on real ``nvidia-smi`` output and real ``torch.cuda.get_arch_list()`` lists
that people pasted in public threads (``tests/data/gpu/``, sources in its ``SOURCES.md``): no GPU
is needed. ``plan`` is run for real on a GPU spec with site files whose ``gpu`` section matches a
known-bad row, avoids it, or leaves it open.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conftest import run_envtool
from envtool.core import gpu_gates as g
from envtool.core import comm_rules

DATA = Path(__file__).parent / "data" / "gpu"
ARCH = json.loads((DATA / "torch-arch-lists.json").read_text())


def smi(name: str) -> str:
    return (DATA / name).read_text()


def arch(build: str) -> tuple:
    return tuple(ARCH[build]["arch_list"])


# -- parsing what nvidia-smi prints ------------------------------------------------------------------

@pytest.mark.parametrize("name, driver, cuda", [
    ("smi-450.57-titan-xp.txt", "450.57", "11.0"),
    ("smi-470.57.02-v100.txt", "470.57.02", "11.4"),
    ("smi-520.61.05-a100-mig.txt", "520.61.05", "11.8"),
    ("smi-550.54.15-h100.txt", "550.54.15", "12.4"),
    ("smi-580.126.09-a100.txt", "580.126.09", "13.0"),
    ("smi-610.43.02-b200.txt", "610.43.02", "13.3"),  # the 610 driver's "KMD Version" header
    ("smi-L-a100-mig-7x1g.10gb.txt", "535.216.01", "12.2"),
])
def test_the_header_of_every_driver_generation_is_read(name, driver, cuda):
    assert g.parse_smi_header(smi(name)) == (driver, cuda)


def test_no_cuda_version_is_no_header():
    # a vGPU host's nvidia-smi -q says "CUDA Version : Not Found" (bigstack-oss/cubecos#312)
    assert g.parse_smi_header("Driver Version                            : 580.105.06\n"
                              "CUDA Version                              : Not Found\n") is None


def test_mig_devices_are_counted_per_gpu():
    seven = g.parse_smi_list(smi("smi-L-a100-mig-7x1g.10gb.txt"))
    assert [(x.index, x.name, x.mig) for x in seven] == [(0, "NVIDIA A100-SXM4-80GB", ("1g.10gb",) * 7)]
    mixed = g.parse_smi_list(smi("smi-L-a100-mig-mixed.txt"))
    assert [len(x.mig) for x in mixed] == [4, 0, 0, 0]


def test_capabilities_from_the_query_or_by_name():
    caps = g.parse_smi_caps(smi("smi-caps-570.86.15.csv"))
    assert caps == {0: "7.0", 1: "8.9"}
    facts = g.node_facts("", smi("smi-L-caps-570.86.15.txt"), smi("smi-caps-570.86.15.csv"))
    assert (facts.gpu, facts.capability, facts.mig) == ("NVIDIA TITAN V", "7.0", False)
    # a 470 driver cannot be asked (compute_cap is no query field there): the name decides
    assert g.parse_smi_caps('Field "compute_cap" is not a valid field to query.\n') == {}
    assert [g.capability_of(n) for n in ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA B200",
                                         "NVIDIA GH200 480GB", "Tesla V100-SXM2-32GB", "NVIDIA A10",
                                         "NVIDIA L40S", "Some Future GPU")] == \
        ["9.0", "8.0", "10.0", "9.0", "7.0", "8.6", "8.9", None]


# -- the driver gate -----------------------------------------------------------------------------------

def test_driver_too_old_for_the_cuda_build_fails_naming_both_fixes():
    facts = g.node_facts(smi("smi-450.57-titan-xp.txt"), "", cuda=ARCH["2.6.0+cu124"]["cuda"])
    gate = g.driver_gate(facts)
    assert gate.status == "fail", gate
    assert "450.57" in gate.summary and "CUDA 12.4" in gate.summary and ">= 525" in gate.summary
    assert "CUDA 11.0 or older" in gate.fix and "driver >= 525" in gate.fix
    assert gate.source.startswith("https://docs.nvidia.com/deploy/cuda-compatibility/")


def test_driver_runs_older_cuda_natively_and_newer_minors_by_compatibility():
    ok = g.driver_gate(g.node_facts(smi("smi-520.61.05-a100-mig.txt"), "", cuda=ARCH["2.0.1+cu117"]["cuda"]))
    assert ok.status == "ok" and "natively" in ok.summary
    # 535.216.01 (CUDA 12.2) runs a CUDA 12.4 build through minor-version compatibility (>= 525)
    compat = g.driver_gate(g.node_facts(smi("smi-L-a100-mig-7x1g.10gb.txt"), "", cuda="12.4"))
    assert compat.status == "ok" and "minor-version compatibility" in compat.summary
    # ... but not a CUDA 13.0 one (a new major needs >= 580)
    new_major = g.driver_gate(g.node_facts(smi("smi-L-a100-mig-7x1g.10gb.txt"), "", cuda="13.0"))
    assert new_major.status == "fail" and "driver >= 580" in new_major.fix
    # a CPU build: nothing to compare
    assert g.driver_gate(g.node_facts(smi("smi-550.54.15-h100.txt"), "", cuda=None)).status == "unknown"


# -- the compute-capability gate -----------------------------------------------------------------------

def test_a_b200_with_a_cu126_torch_has_no_kernel_image():
    facts = g.node_facts(smi("smi-610.43.02-b200.txt"), "GPU 0: NVIDIA B200 (UUID: GPU-0)\n",
                         cuda=ARCH["2.11.0+cu126"]["cuda"], arch_list=arch("2.11.0+cu126"))
    gate = g.arch_gate(facts)
    assert gate.status == "fail" and "no kernel image is available" in gate.summary, gate
    assert "sm_100" in gate.fix
    ok = g.arch_gate(g.node_facts(smi("smi-610.43.02-b200.txt"), "GPU 0: NVIDIA B200 (UUID: GPU-0)\n",
                                  cuda="12.8", arch_list=arch("2.11.0+cu128")))
    assert ok.status == "ok" and "sm_100" in ok.summary


def test_an_h100_is_not_covered_by_sm_86_and_a_v100_not_by_a_build_without_sm_70():
    h100 = g.arch_gate(g.GateFacts(capability="9.0", gpu="NVIDIA H100 PCIe", arch_list=arch("2.0.1+cu117")))
    assert h100.status == "fail" and "sm_90" in h100.fix  # sm_86 is another major (pytorch/pytorch#110153)
    v100 = g.arch_gate(g.GateFacts(capability=g.capability_of("Tesla V100-SXM2-32GB"), gpu="V100",
                                   arch_list=arch("2.11.0+cu128")))
    assert v100.status == "fail"  # 2.11.0+cu128 dropped sm_70 (pytorch/pytorch#182250)
    assert g.arch_gate(g.GateFacts(capability="7.0", arch_list=arch("2.10.0+cu128"))).status == "ok"


@pytest.mark.parametrize("targets, capability, expected", [
    (("sm_80", "sm_86"), "8.9", "sm_86"),          # the closest cubin of the same major
    (("sm_80",), "9.0", None),                     # another major: no
    (("sm_80", "compute_80"), "9.0", "compute_80"),  # PTX compiled when loaded
    (("sm_90a",), "9.0", "sm_90a"),                # arch-specific: that capability only
    (("sm_90a",), "10.0", None),
    (("compute_90a",), "10.0", None),
    (arch("cu128-test"), "12.1", "sm_120"),
    (arch("cu128-test"), "13.0", "compute_120"),
])
def test_which_target_runs_on_which_capability(targets, capability, expected):
    assert g.covers(targets, capability) == expected


# -- the MIG gate --------------------------------------------------------------------------------------

def test_mig_with_several_nccl_ranks_is_refused():
    facts = g.node_facts(smi("smi-L-a100-mig-7x1g.10gb.txt"), smi("smi-L-a100-mig-7x1g.10gb.txt"),
                         nccl_ranks_per_gpu_node=4)
    gate = g.mig_gate(facts)
    assert gate.status == "fail" and "MIG" in gate.summary and "whole GPUs" in gate.fix, gate
    assert gate.source == "https://github.com/NVIDIA/nccl/issues/1716"
    one = g.node_facts("", smi("smi-L-a100-mig-7x1g.10gb.txt"), nccl_ranks_per_gpu_node=1)
    assert g.mig_gate(one).status == "ok"
    mixed = g.node_facts("", smi("smi-L-a100-mig-mixed.txt"), nccl_ranks_per_gpu_node=4)
    assert g.mig_gate(mixed).status == "fail"  # one GPU of four in MIG mode is enough
    whole = g.node_facts("", smi("smi-L-caps-570.86.15.txt"), nccl_ranks_per_gpu_node=2)
    assert g.mig_gate(whole).status == "ok"


def test_horovods_cuda_objects_without_the_gpus_architecture_name_the_fix():
    """``cuobjdump --list-elf`` of a Horovod library built for 7.0 and 8.0 (composed fixtures:
    tests/data/gpu/SOURCES.md): an H100 (9.0) has no image and the fix names
    HOROVOD_BUILD_CUDA_CC_LIST with 90; an A10 (8.6) runs the sm_80 cubin; PTX for 8.0 covers 9.0;
    a listing without device code decides nothing."""
    two = smi("cuobjdump-list-elf-sm70-sm80.txt")
    assert g.parse_cuobjdump_list(two) == ("sm_70", "sm_80")
    gate = g.cuda_objects_gate(two, "mpi_lib_v2.so", "9.0", "NVIDIA H100 80GB HBM3")
    assert gate.status == "fail" and "no kernel image is available" in gate.summary, gate
    assert "HOROVOD_BUILD_CUDA_CC_LIST including 90" in gate.fix and "horovod.cuda_cc_list" in gate.fix, gate
    assert gate.source.startswith("horovod/horovod@v0.28.1:docs/install.rst")
    a10 = g.cuda_objects_gate(two, "mpi_lib_v2.so", "8.6", "NVIDIA A10")
    assert a10.status == "ok" and "sm_80" in a10.summary and "a cubin" in a10.summary, a10
    ptx = smi("cuobjdump-list-elf-ptx-sm70-ptx80.txt")
    assert g.parse_cuobjdump_list(ptx) == ("sm_70", "compute_80")
    assert g.cuda_objects_gate(ptx, "mpi_lib_v2.so", "9.0").status == "ok"
    none = g.cuda_objects_gate(smi("cuobjdump-list-elf-no-device-code.txt"), "mpi_lib.so", "9.0")
    assert none.status == "unknown" and "no CUDA images" in none.summary, none
    assert g.cuda_objects_gate(two, "mpi_lib_v2.so", None).status == "unknown"


# -- the known-bad stacks ------------------------------------------------------------------------------

@pytest.mark.parametrize("value, excluded", [
    ("^LL128", True), ("^LL,LL128", True), ("Simple,LL", True), ("Simple", True),
    ("LL128", False), ("^LL", False), ("", False), (None, False), ("Simple,LL,LL128", False),
])
def test_nccl_proto_exclusion(value, excluded):
    assert comm_rules.proto_excludes(value, "LL128") is excluded


def _ids(rows):
    return sorted(r.id if isinstance(r, comm_rules.CommRule) else r[0].id for r in rows)


def test_each_known_bad_row_matches_its_stack_and_only_that():
    gh200 = comm_rules.CommFacts(gpu="NVIDIA GH200 480GB", network="slingshot", nccl="2.28.9",
                                 plugins=(("aws-ofi-nccl", "1.14.0"),))
    found = comm_rules.evaluate(gh200)
    assert _ids(found["matched"]) == ["gh200-slingshot-ll128", "nccl-2.28.9-aws-ofi-nccl"]
    # the same stack with LL128 off and NCCL 2.27.7: nothing left
    fixed = comm_rules.evaluate(comm_rules.CommFacts(gpu="NVIDIA GH200 480GB", network="slingshot", nccl="2.27.7",
                                                     plugins=(("aws-ofi-nccl", "1.14.0"),),
                                                     env={"NCCL_PROTO": "^LL128"}))
    assert fixed["matched"] == [] and _ids(fixed["avoided"]) == ["gh200-slingshot-ll128"]
    hpe = comm_rules.evaluate(comm_rules.CommFacts(gpu="GH200", network="slingshot", nccl="2.27.7",
                                                   env={"FI_CXI_RDZV_THRESHOLD": "0", "FI_CXI_RDZV_GET_MIN": "0"}))
    assert _ids(hpe["avoided"]) == ["gh200-slingshot-ll128"]
    # H100 over InfiniBand: NCCL 2.14 predates Hopper; 2.18.1 has the LL128 known issue
    assert _ids(comm_rules.evaluate(comm_rules.CommFacts(gpu="NVIDIA H100 80GB HBM3", network="infiniband",
                                                         nccl="2.14.3"))["matched"]) == ["hopper-nccl-before-2.15"]
    assert _ids(comm_rules.evaluate(comm_rules.CommFacts(gpu="NVIDIA H100 80GB HBM3", network="infiniband",
                                                         nccl="2.18.1"))["matched"]) == ["hopper-nccl-2.18.1-ll128"]
    assert _ids(comm_rules.evaluate(comm_rules.CommFacts(gpu="NVIDIA B200", nccl="2.21.5"))["matched"]) == \
        ["blackwell-nccl-before-2.25.1"]
    # an A100 over Slingshot with an old NCCL (Perlmutter's nccl/2.15.5-ofi): none of the rows
    assert comm_rules.evaluate(comm_rules.CommFacts(gpu="A100", network="slingshot", nccl="2.15.5-ofi",
                                                    plugins=(("aws-ofi-nccl", None),)))["matched"] == []


def test_a_missing_fact_leaves_a_row_open_not_matched():
    found = comm_rules.evaluate(comm_rules.CommFacts(gpu="NVIDIA GH200 480GB", nccl=None, network=None))
    assert found["matched"] == []
    assert {r.id: why for r, why in found["undecided"]} == {
        "gh200-slingshot-ll128": "not known: the network",
        "hopper-nccl-before-2.15": "not known: the NCCL version"}


def test_every_row_is_sourced_and_dated():
    import datetime

    for row in comm_rules.KNOWN:
        assert row.source.startswith("https://") and row.fix and row.reason, row.id
        datetime.date.fromisoformat(row.date)


# -- plan on a login node ------------------------------------------------------------------------------

SITE = """\
name: gpusite
summary: a test site with GPU nodes
sources:
  facts: https://example.org/site-docs (a test)
platforms: [linux-64]
launcher: "srun -n {{ranks}}"
gpus_per_node: 4
{env}gpu:
  model: NVIDIA GH200 480GB
  capability: "9.0"
  driver: "{driver}"
  network: slingshot
  nccl_plugins: ["aws-ofi-nccl 1.14.0"]
  source: facts
  date: "2026-05-05"
"""


def _plan(tmp_path, driver="580.95.05", env="", extra=()):
    site = tmp_path / "gpusite.yaml"
    site.write_text(SITE.format(driver=driver, env=env))
    return run_envtool("plan", "local-gpu-nccl", "--site-file", site, "--prefix", tmp_path / "env", *extra)


def test_plan_refuses_a_known_bad_stack_and_an_old_driver_naming_source_and_fix(tmp_path):
    proc = _plan(tmp_path, driver="550.54.15", extra=("--json",))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert "gh200-slingshot-ll128" in error and "NCCL_PROTO=^LL128" in error and "nccl/issues/2001" in error
    assert "driver 550.54.15" in error and ">= 580" in error
    assert "gpusite" in error and "2026-05-05" in error and "Nothing was done" in error


def test_plan_passes_when_the_site_works_around_it_and_says_so(tmp_path):
    proc = _plan(tmp_path, env="env:\n  NCCL_PROTO: \"^LL128\"\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "known-bad stack gh200-slingshot-ll128: avoided by NCCL_PROTO=^LL128" in proc.stdout
    assert "gpu gate driver: ok" in proc.stdout
    proc = _plan(tmp_path, env="env:\n  NCCL_PROTO: \"^LL128\"\n", extra=("--json",))
    gpu = json.loads(proc.stdout)["gpu"]
    assert [x["id"] for x in gpu["avoided"]] == ["gh200-slingshot-ll128"] and gpu["matched"] == []
    # the spec pins no NCCL: the NCCL rows are left open, not matched
    assert "hopper-nccl-before-2.15" in [x["id"] for x in gpu["undecided"]]


@pytest.mark.parametrize("field, value, words", [
    ("capability", '"8"', "gpu.capability"),
    ("driver", '"latest"', "gpu.driver"),
    ("date", '"last year"', "gpu.date"),
    ("network", "omnipath", "gpu.network"),
    ("nccl_plugins", '["aws ofi nccl"]', "gpu.nccl_plugins"),
])
def test_a_bad_gpu_section_is_exit_2_naming_the_field(tmp_path, field, value, words):
    site = tmp_path / "bad.yaml"
    text = SITE.format(driver="580.95.05", env="")
    lines = [ln if not ln.startswith(f"  {field}:") else f"  {field}: {value}" for ln in text.splitlines()]
    site.write_text("\n".join(lines) + "\n")
    proc = run_envtool("plan", "local-gpu-nccl", "--site-file", site, "--prefix", tmp_path / "env")
    assert proc.returncode == 2 and words in proc.stderr and str(site) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_cpu_spec_and_a_site_without_gpu_facts_are_not_gated(tmp_path):
    site = tmp_path / "gpusite.yaml"
    site.write_text(SITE.format(driver="450.57", env=""))
    proc = run_envtool("plan", "cpu-horovod", "--site-file", site, "--prefix", tmp_path / "env", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "CPU-only" in json.loads(proc.stdout)["gpu"]["skipped"]
    plain = tmp_path / "plain.yaml"
    plain.write_text(textwrap.dedent("""\
        name: plain
        platforms: [linux-64]
        gpus_per_node: 4
        """))
    proc = run_envtool("plan", "local-gpu-nccl", "--site-file", plain, "--prefix", tmp_path / "env2", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no gpu section" in json.loads(proc.stdout)["gpu"]["skipped"]


# -- doctor on a GPU node --------------------------------------------------------------------------

def test_doctor_reads_the_node_through_nvidia_smi(tmp_path):
    """doctor's GPU check on a node whose nvidia-smi prints the captured output of an A100 split
    into seven MIG devices (driver 535.216.01): nvidia-smi is a script here that prints that real
    output (no GPU on this machine). The environment has no CUDA build of torch, so no rank talks
    NCCL: the MIG gate passes saying so (its failure is tested above), the driver gate cannot
    compare (no CUDA version), and the check fails for torch missing, as before."""
    import subprocess
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "nvidia-smi"
    listing = DATA / "smi-L-a100-mig-7x1g.10gb.txt"
    shim.write_text("#!/bin/sh\n"
                    f"case \"$1\" in -L) cat '{listing}';; --query-gpu=*) exit 2;; *) cat '{listing}';; esac\n")
    shim.chmod(0o755)
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    spec = (Path(__file__).parent.parent / "specs" / "local-gpu-nccl.yaml").read_text()
    assert "  gpus_per_node: 1\n" in spec
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "migtest.yaml").write_text(spec.replace("name: local-gpu-nccl", "name: migtest")
                                        .replace("  gpus_per_node: 1\n", "  gpus_per_node: 4\n"))
    import os

    proc = run_envtool("doctor", "--prefix", env_dir, "--spec", "migtest", "--only", "gpu", "--json",
                       env={"ENVTOOL_SPEC_PATH": str(specs), "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    gpu = {f["id"]: f for f in json.loads(proc.stdout)["findings"]}["gpu"]
    gates = {x["id"]: x for x in gpu["details"]["gates"]["gates"]}
    assert gates["mig"]["status"] == "ok" and "MIG enabled, no NCCL ranks" in gates["mig"]["summary"], gates
    assert gates["driver"]["status"] == "unknown" and gates["arch"]["status"] == "unknown", gates
    assert "gpu gate mig: ok: MIG enabled" in " ".join(gpu["details"]["items"]), gpu


def test_doctor_reads_horovods_cuda_objects_through_cuobjdump(tmp_path):
    """doctor's GPU check on the captured A100 node (8.0) with an environment whose Horovod library
    holds only a sm_70 cubin: cuobjdump is a script printing the first line of the composed
    listing (tests/data/gpu/SOURCES.md; no CUDA toolkit here), the library a real file. The gate
    fails and the finding's fix names HOROVOD_BUILD_CUDA_CC_LIST with 80."""
    import os
    import subprocess
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    listing = DATA / "smi-L-a100-mig-7x1g.10gb.txt"
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\n"
                                        f"case \"$1\" in --query-gpu=*) exit 2;; *) cat '{listing}';; esac\n")
    (bin_dir / "cuobjdump").write_text(f"#!/bin/sh\nhead -n 1 '{DATA / 'cuobjdump-list-elf-sm70-sm80.txt'}'\n")
    for tool in ("nvidia-smi", "cuobjdump"):
        (bin_dir / tool).chmod(0o755)
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    site = next((env_dir / "lib").glob("python*/site-packages"))
    (site / "horovod" / "torch").mkdir(parents=True)
    (site / "horovod" / "torch" / "mpi_lib_v2.cpython-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    proc = run_envtool("doctor", "--prefix", env_dir, "--spec", "local-gpu-nccl", "--only", "gpu", "--json",
                       env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    gpu = {f["id"]: f for f in json.loads(proc.stdout)["findings"]}["gpu"]
    gates = {x["id"]: x for x in gpu["details"]["gates"]["gates"]}
    hvd = gates["horovod-arch"]
    assert hvd["status"] == "fail" and "torch/mpi_lib_v2" in hvd["summary"] and "sm_70" in hvd["summary"], gates
    assert "HOROVOD_BUILD_CUDA_CC_LIST including 80" in gpu["fix"], gpu


def test_doctor_asks_a_node_whose_driver_is_not_loaded_once(tmp_path):
    """doctor runs nvidia-smi once on a node where it exits 9 ("NVIDIA driver is not loaded"): the
    other queries cannot succeed there (each was run, up to 20 s apiece when it hangs). nvidia-smi is
    a real program here, first on PATH, that appends its arguments to a file and exits 9; on a
    node where it works, each different query runs once (the MIG test above)."""
    import os
    import subprocess
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    shim = bin_dir / "nvidia-smi"
    shim.write_text(f"#!/bin/sh\necho \"$*\" >> '{calls}'\nexit 9\n")
    shim.chmod(0o755)
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    proc = run_envtool("doctor", "--prefix", env_dir, "--json", env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert json.loads(proc.stdout)["findings"], proc.stdout + proc.stderr
    assert len(calls.read_text().splitlines()) == 1, calls.read_text()


def test_older_cuda_majors_run_on_newer_drivers_and_unknown_ones_stay_open():
    old = g.driver_gate(g.GateFacts(driver="535.154.05", cuda="10.1"))
    assert old.status == "ok", old  # backward compatibility: a driver runs every older toolkit
    assert g.driver_gate(g.GateFacts(driver="390.116", cuda="10.1")).status == "unknown"


def test_only_an_exact_nccl_pin_decides_a_rule():
    from types import SimpleNamespace

    from envtool.checks.gpu import spec_nccl_version

    def spec(*pins, modules=()):
        return SimpleNamespace(packages=SimpleNamespace(conda=[SimpleNamespace(value=v) for v in pins]),
                               site=SimpleNamespace(modules=modules, libraries=()))

    assert spec_nccl_version(spec("nccl 2.18.3")) == "2.18.3"
    assert spec_nccl_version(spec("nccl==2.14.3")) == "2.14.3"
    assert spec_nccl_version(spec("nccl >=2.14")) is None
    assert spec_nccl_version(spec("nccl >=2.14,<2.19")) is None
    assert spec_nccl_version(spec("python 3.11", modules=("nccl/2.15.5-ofi",))) == "2.15.5"
