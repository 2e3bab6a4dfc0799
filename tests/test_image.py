"""``envtool image`` (issue 29, item 1): a real image of the real ``cpu-horovod`` environment, built
from its lockfile with Debian's mmdebstrap (Debian's archive; no image registry, nothing pulled),
run with Charliecloud's ``ch-run``, its SBOM compared with the environment's.

Needs root (mmdebstrap, chroot) and the tools tests/setup.d/image.sh installs. The Horovod wheel is
the one ``envtool create`` stored in the wheel cache for the environment (under CI the session's
``cpu_horovod_env`` fixture made it; when reusing ``ENVTOOL_TEST_CPU_ENV``, ``ENVTOOL_CACHE_PATH`` may
name a published cache that holds it).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, run_envtool

SETUP = REPO / "tests" / "setup.d" / "image.sh"
TOOLS = ("mmdebstrap", "umoci", "mksquashfs", "unsquashfs", "ch-run")

pytestmark = [pytest.mark.slow]


def _tools() -> str:
    """'' when the tools are here (tests/setup.d/image.sh installs them as root), else why not."""
    if os.geteuid() != 0:
        return "envtool image runs as root"
    if not all(shutil.which(t) for t in TOOLS):
        subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=900)
    missing = [t for t in TOOLS if not shutil.which(t)]
    return f"missing {', '.join(missing)} (tests/setup.d/image.sh installs them)" if missing else ""


@pytest.fixture(scope="module")
def tools():
    why = _tools()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


def _components(sbom: dict) -> dict:
    """name -> (version, purl, sorted hashes) of a CycloneDX SBOM's components."""
    return {c["name"]: (c.get("version"), c.get("purl"), sorted((h["alg"], h["content"]) for h in c.get("hashes", [])))
            for c in sbom["components"]}


@pytest.fixture(scope="module")
def image(tools, cpu_horovod_env, tmp_path_factory):
    """``envtool image`` of the cpu-horovod environment, all three forms (built once)."""
    out = tmp_path_factory.mktemp("image") / "cpu-horovod"
    t0 = time.monotonic()
    proc = run_envtool("image", cpu_horovod_env, "--output", out, "--json", timeout=3600)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout)
    print(f"\nimage built in {took:.0f} s: " + ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in res["sizes"].items())
          + f"; steps {res['step_seconds']}")
    return out, res


def test_image_forms_and_check_build_inside(image, cpu_horovod_env):
    out, res = image
    assert set(res["forms"]) == {"dir", "squashfs", "oci"}
    assert res["libmpi"].startswith("libmpi.so.40 => "), res["libmpi"]
    rootfs = out / "rootfs"
    # nothing of the build is left next to the output
    assert sorted(p.name for p in out.parent.iterdir()) == ["cpu-horovod"]
    t0 = time.monotonic()
    p = subprocess.run(["ch-run", str(rootfs), "--", "/opt/env/bin/horovodrun", "--check-build"],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "USER": "root"})
    print(f"ch-run horovodrun --check-build: {time.monotonic() - t0:.0f} s\n{p.stdout}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[X] PyTorch" in p.stdout and "[X] MPI" in p.stdout and "[X] Gloo" in p.stdout
    # the interpreter inside is the image's (Debian's), at the fixed prefix
    p = subprocess.run(["ch-run", str(rootfs), "--", "/opt/env/bin/python", "-c",
                        "import sys, horovod.torch; print(sys.prefix, sys.base_prefix)"],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "USER": "root"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["/opt/env", "/usr"]


def test_image_sbom_equals_the_environments(image, cpu_horovod_env, tmp_path):
    out, res = image
    in_image = json.loads((out / "rootfs/opt/env/share/envtool/sbom.cdx.json").read_text())
    proc = run_envtool("sbom", "--prefix", cpu_horovod_env)
    assert proc.returncode == 0, proc.stderr
    env_sbom = json.loads(proc.stdout)
    assert _components(in_image) == _components(env_sbom)
    # and what is installed in the image lists the same (the SBOM of the image's /opt/env itself)
    proc = run_envtool("sbom", "--prefix", out / "rootfs/opt/env")
    assert proc.returncode == 0, proc.stderr
    installed = {k: (v[0], v[1], v[2]) for k, v in _components(json.loads(proc.stdout)).items()}
    assert installed == _components(env_sbom)
    horovod = _components(env_sbom)["horovod"]
    assert horovod[2], "the environment's Horovod records its wheel's hash"
    # squashfs: the same file inside
    p = subprocess.run(["unsquashfs", "-cat", str(out / "image.sqfs"), "opt/env/share/envtool/sbom.cdx.json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert _components(json.loads(p.stdout)) == _components(env_sbom)
    # OCI: the manifest's annotation and the config's label name the SBOM's path
    oci = out / "oci"
    index = json.loads((oci / "index.json").read_text())
    (desc,) = [m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "env"]
    blob = lambda d: json.loads((oci / "blobs" / "sha256" / d["digest"].split(":")[1]).read_text())  # noqa: E731
    manifest = blob(desc)
    assert manifest["annotations"]["org.envtool.sbom"] == "/opt/env/share/envtool/sbom.cdx.json"
    config = blob(manifest["config"])
    assert config["config"]["Labels"]["org.envtool.sbom"] == "/opt/env/share/envtool/sbom.cdx.json"


def test_image_refuses_another_mpi_abi_and_leaves_nothing(tools, cpu_horovod_env, tmp_path):
    """The environment's Horovod wheel links Open MPI: a site whose images carry MPICH's ABI needs
    Horovod compiled in the image, which envtool does not do: exit 1, nothing left."""
    site = tmp_path / "mpich.yaml"
    site.write_text("name: mpich-site\nsources: {cce: https://cpe.ext.hpe.com/docs/}\n"
                    "container: {runtime: charliecloud, source: cce, mpi_abi: mpich}\n")
    work = tmp_path / "out"
    work.mkdir()
    proc = run_envtool("image", cpu_horovod_env, "--output", work / "img", "--site-file", site, "--json", timeout=1800)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert "compiled inside the image" in err and "mpich" in err
    assert [p.name for p in work.iterdir()] == ["img.envtool-image.log"]


def test_image_bad_input_exit_2(tools, cpu_horovod_env, tmp_path):
    (tmp_path / "taken").mkdir()
    proc = run_envtool("image", cpu_horovod_env, "--output", tmp_path / "taken", "--json")
    assert proc.returncode == 2 and "exists" in json.loads(proc.stdout)["error"]
    proc = run_envtool("image", cpu_horovod_env, "--output", tmp_path / "x", "--format", "tar", "--json")
    assert proc.returncode == 2 and "--format" in json.loads(proc.stdout)["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


@pytest.fixture(scope="module")
def image_dir(request) -> Path:
    """An image directory of cpu-horovod: ``ENVTOOL_TEST_IMAGE`` (an ``envtool image`` output, to
    reuse one while developing, like ``ENVTOOL_TEST_CPU_ENV``), else the module's :func:`image`."""
    reuse = os.environ.get("ENVTOOL_TEST_IMAGE")
    if reuse and (Path(reuse) / "rootfs" / "opt" / "env" / "bin" / "python").exists() and not os.environ.get("CI"):
        return Path(reuse)
    return request.getfixturevalue("image")[0]


@pytest.mark.multinode
def test_validate_image_across_two_nodes_with_charliecloud(tools, image_dir, multinode_cluster, tmp_path):
    """``validate --image``: check-build and the MPI allreduce (every rank under ``ch-run``) across
    the two nodes of the test cluster, the ranks' Python the image's /opt/env."""
    out = image_dir
    site = tmp_path / "testcluster.yaml"
    site.write_text(f"""name: testcluster
summary: the multi-node Slurm the tests start, its ranks in Charliecloud images
sources: {{ch: https://hpc.github.io/charliecloud/ch-run.html}}
platforms: [linux-64]
scheduler: slurm
launcher: "srun -n {{ranks}}"
gpus_per_node: 0
batch:
  cpus_per_node: {multinode_cluster.cpus}
  mpi: pmix
container: {{runtime: charliecloud, source: ch, mpi_abi: openmpi}}
""")
    import sys

    t0 = time.monotonic()
    proc = multinode_cluster.run(sys.executable, "-m", "envtool", "validate", "--image", out / "rootfs",
                                 "--site-file", site, "--submit", "--nodes", "2", "--ranks-per-node", "1",
                                 "--sweep-max", "1KiB", "--workdir", tmp_path / "run", "--timeout", "900", "--json",
                                 cwd=str(REPO), env={"ENVTOOL_DEBUG": "", "USER": "root"}, timeout=1200)
    took = time.monotonic() - t0
    print(f"\nvalidate --image across 2 nodes: {took:.0f} s")
    res = json.loads(proc.stdout)
    assert proc.returncode == 0, json.dumps(res.get("problems"), indent=1) + proc.stderr
    assert res["check_build"]["ok"], res["check_build"]
    ranks = res["ranks"]
    assert sorted(r["host"] for r in ranks) == ["node1", "node2"], ranks
    assert all(r["ok"] for r in ranks), ranks
    assert {r["import"]["prefix"] for r in ranks} == {"/opt/env"}, ranks  # the image's environment
    script = (tmp_path / "run" / "job.sh").read_text()
    assert "ch-run" in script and str(out / "rootfs") in script


def test_image_interrupted_leaves_nothing(tools, cpu_horovod_env, tmp_path):
    """Ctrl-C while mmdebstrap makes the base: exit 130, no half-built image, no mount, no child left."""
    import signal
    import sys

    work = tmp_path / "out"
    work.mkdir()
    env = dict(os.environ)
    env.pop("ENVTOOL_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-m", "envtool", "image", str(cpu_horovod_env), "--output",
                             str(work / "img"), "--format", "dir"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if any(work.glob(".img.envtool-image-*/rootfs/usr")):  # mmdebstrap is writing the base
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert [p.name for p in work.iterdir()] == ["img.envtool-image.log"], list(work.iterdir())
    with open("/proc/self/mountinfo") as fh:
        assert str(work) not in fh.read()
    left = subprocess.run(["pgrep", "-f", f"mmdebstrap.*{work}"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout


def test_failed_build_keeps_its_log_without_following_a_planted_link(tools, tmp_path):
    """A failed build keeps its log next to the output; a symbolic link another user put at the
    log's name is neither followed nor replaced (the log gets a new name), and ``--json`` names it.
    The build fails at its first step: pip may not reach an index (PIP_NO_INDEX) and has no cache."""
    env = tmp_path / "env"
    env.mkdir()
    shutil.copy2(REPO / "lockfiles" / "cpu-horovod.conda-lock.yml", env / "conda-lock.yml")
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (out / "img.envtool-image.log").symlink_to(victim)
    proc = run_envtool("image", env, "--output", out / "img", "--format", "dir", "--json",
                       env={"PIP_NO_INDEX": "1", "PIP_CACHE_DIR": str(tmp_path / "pip-cache")}, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert victim.read_text() == "precious\n"
    log = Path(data["log"])
    assert log.parent == out and log.name != "img.envtool-image.log" and not log.is_symlink()
    assert "pip" in log.read_text() and oct(log.stat().st_mode & 0o777) == "0o600"
    assert data["outcome"] == f"nothing was left at {out / 'img'}"
    assert sorted(p.name for p in out.iterdir()) == sorted(["img.envtool-image.log", log.name])
