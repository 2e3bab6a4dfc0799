"""Alps, LUMI and Aurora site files and the GPU vendor as data (issue 44): each new site file loads
with every value's source, is detected from its centre's published evidence, ``plan`` derives
the ROCm and oneCCL build variables from the site's ``gpu.vendor``, and validation names RCCL's
network plug-in (librccl-net.so) beside NCCL's."""
from __future__ import annotations

import json

import pytest

from conftest import run_envtool
from helpers.speed import scaled

NEW_SITES = {"alps": "nvidia", "lumi": "amd", "aurora": "intel", "frontier": "amd"}
#: A GPU Horovod spec of the catalog's cpu-horovod with NCCL operations (no cuda pin: a ROCm site's
#: build needs none).
GPU_SPEC = "name: gpu-hvd\nextends: cpu-horovod\nsummary: NCCL/RCCL GPU operations\nhorovod:\n  gpu_operations: nccl\n"


@pytest.fixture(autouse=True)
def _bundled_only(monkeypatch):
    monkeypatch.delenv("ENVTOOL_SITE_PATH", raising=False)
    monkeypatch.delenv("ENVTOOL_SITE", raising=False)


@pytest.mark.parametrize("name", sorted(NEW_SITES))
def test_site_loads_with_its_vendor_and_every_fabric_value_sourced(name):
    from envtool.spec import provenance
    from envtool.spec.model import Pin
    from envtool.spec.sites import available, load_site

    sf = load_site(available()[name])
    assert sf.gpu is not None and sf.gpu.vendor == NEW_SITES[name]
    sources = dict(sf.sources)
    assert sf.gpu.source in sources and sf.batch.source in sources and all(r.source in sources for r in sf.detect)
    pins = [(f"fabric.{v.name}", Pin(value=v.value, mark=v.mark, source=v.source)) for v in sf.fabric]
    assert provenance.problems(sf.name, sf.sources, pins) == []


def test_each_site_is_detected_from_its_published_evidence():
    from envtool.spec.sites import detect

    def site(environ, host):
        found = detect(environ, host)
        return found.name if found else None

    # CSCS: $CLUSTER_NAME on every Alps cluster (cscs-cluster-name); login nodes daint-ln00[1-4], santis-ln00[1-4]
    assert site({"CLUSTER_NAME": "daint"}, "nid006352") == "alps"
    assert site({"CLUSTER_NAME": "clariden"}, "nid001") == "alps"
    assert site({}, "santis-ln002") == "alps" and site({}, "daint-ln001") == "alps"
    assert site({"CLUSTER_NAME": "eiger"}, "nid001") is None      # Alps's CPU-only cluster is not the GH200 file's
    # LUMI's login nodes lumi-uan01..04.csc.fi (lumi-login); Aurora's UANs aurora-uan-NNNN (alcf-aurora-login)
    assert site({}, "lumi-uan02.csc.fi") == "lumi"
    assert site({}, "aurora-uan-0009") == "aurora"
    assert site({}, "x4117c3s3b0n0") is None


def _build_env(tmp_path, site, extra=""):
    spec = tmp_path / "gpu-hvd.yaml"
    spec.write_text(GPU_SPEC + extra)
    proc = run_envtool("show", spec, "--site", site, "--json", timeout=scaled(60))
    return proc, (json.loads(proc.stdout) if proc.returncode == 0 else None)


@pytest.mark.parametrize("site", ["frontier", "lumi"])
def test_a_rocm_site_builds_horovod_for_rocm_with_rccl(tmp_path, site):
    proc, view = _build_env(tmp_path, site)
    assert proc.returncode == 0, proc.stderr
    env = view["horovod"]["build_env"]
    # horovod@v0.28.1 docs/install.rst: HOROVOD_GPU=ROCM, NCCL operations (RCCL on ROCm), HOROVOD_ROCM_HOME
    assert env["HOROVOD_GPU"] == "ROCM" and env["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert env["HOROVOD_ROCM_HOME"] == "/opt/rocm" and "HOROVOD_CUDA_HOME" not in env


def test_plan_shows_the_rocm_build(tmp_path):
    (tmp_path / "gpu-hvd.yaml").write_text(GPU_SPEC)
    proc = run_envtool("plan", tmp_path / "gpu-hvd.yaml", "--site", "frontier", "--prefix", tmp_path / "env",
                       timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr
    build = next(line for line in proc.stdout.splitlines() if "[build-horovod]" in line)
    assert "HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_GPU=ROCM" in build and "HOROVOD_ROCM_HOME=/opt/rocm" in build


def test_the_rocm_home_may_be_named_and_cuda_settings_are_refused_on_amd(tmp_path):
    proc, view = _build_env(tmp_path, "frontier", "  extra_env: {HOROVOD_ROCM_HOME: /opt/rocm-7.1.1}\n")
    assert proc.returncode == 0, proc.stderr
    assert view["horovod"]["build_env"]["HOROVOD_ROCM_HOME"] == "/opt/rocm-7.1.1"
    proc, _ = _build_env(tmp_path, "frontier", "  cuda_cc_list: \"90\"\n")
    assert proc.returncode == 2 and "horovod.cuda_cc_list" in proc.stderr and "amd" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_aurora_uses_oneccl_for_cpu_operations_and_refuses_gpu_operations(tmp_path):
    proc = run_envtool("show", "cpu-horovod", "--site", "aurora", "--json", timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr
    env = json.loads(proc.stdout)["horovod"]["build_env"]
    assert env["HOROVOD_CPU_OPERATIONS"] == "CCL" and not any(k.startswith("HOROVOD_GPU") for k in env)
    proc, _ = _build_env(tmp_path, "aurora")
    assert proc.returncode == 2 and "horovod.gpu_operations" in proc.stderr and "oneCCL" in proc.stderr


def test_an_nvidia_site_and_no_vendor_keep_cuda_and_need_the_cuda_pin(tmp_path):
    from envtool.core import gpu_vendors

    assert gpu_vendors.vendor(None) is None and gpu_vendors.VENDORS["nvidia"].build_env == ()
    proc, _ = _build_env(tmp_path, "perlmutter")   # no gpu.vendor: GPU operations need CUDA, as before
    assert proc.returncode == 2 and "a 'cuda' pin" in proc.stderr


# RCCL with aws-ofi-rccl on LUMI, as LUMI's user guide prints it
# (Lumi-supercomputer/lumi-userguide@6c3a26c0fc8f:docs/software/packages/pytorch.md#L99-L103).
RCCL_PLUGIN_LINES = ["NCCL INFO NET/OFI Using aws-ofi-rccl 1.4.0", "NCCL INFO NET/OFI Selected Provider is cxi"]
# NCCL without a plug-in: NVIDIA/nccl#229's neighbour in tests/test_sweep.py (Mellanox/nv_peer_memory#56).
NO_PLUGIN = "master_node:20:289 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so)."


def test_validation_names_the_vendors_network_plugin():
    from envtool.spec.sites import available, load_site
    from envtool.core import gpu_vendors
    from envtool.validate import sweep

    amd = gpu_vendors.vendor(load_site(available()["lumi"]).gpu.vendor)
    assert amd.net_plugin == "librccl-net.so" and gpu_vendors.VENDORS["nvidia"].net_plugin == "libnccl-net.so"
    got = sweep.plugin_status(RCCL_PLUGIN_LINES, amd)
    assert got == {"library": "librccl-net.so", "in_use": True, "missing": []}
    assert sweep.nccl_transports(RCCL_PLUGIN_LINES)["initialised"] == ["ofi"]
    assert sweep.plugin_status([NO_PLUGIN], None) == {"library": "libnccl-net.so", "in_use": False,
                                                      "missing": ["libnccl-net.so"]}
    bad = sweep.check_fabric("socket", "ofi", amd, {"missing": ["librccl-net.so"]})
    assert bad.startswith("RCCL used the socket transport") and "found no librccl-net.so" in bad
    assert "aws-ofi-rccl plugin (librccl-net.so" in bad
    assert "aws-ofi-nccl plugin (libnccl-net.so" in sweep.check_fabric("socket", "ofi")
