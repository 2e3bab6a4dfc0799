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
from helpers.shared import once
from helpers.speed import scaled

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
    def build(base: Path) -> None:  # once per run: the multi-node tests (another xdist worker) use it too
        base.mkdir()
        t0 = time.monotonic()
        proc = run_envtool("image", cpu_horovod_env, "--output", base / "cpu-horovod", "--json", timeout=scaled(3600))
        took = time.monotonic() - t0
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (base / "result.json").write_text(proc.stdout)
        res = json.loads(proc.stdout)
        print(f"\nimage built in {took:.0f} s: " + ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in res["sizes"].items())
              + f"; steps {res['step_seconds']}")

    base = once(tmp_path_factory, "image", build)
    return base / "cpu-horovod", json.loads((base / "result.json").read_text())


def test_image_forms_and_check_build_inside(image, cpu_horovod_env):
    out, res = image
    assert set(res["forms"]) == {"dir", "squashfs", "oci"}
    assert res["libmpi"].startswith("libmpi.so.40 => "), res["libmpi"]
    rootfs = out / "rootfs"
    # nothing of the build is left next to the output
    assert sorted(p.name for p in out.parent.iterdir()) == ["cpu-horovod", "result.json"]  # result.json: the fixture's record
    t0 = time.monotonic()
    p = subprocess.run(["ch-run", str(rootfs), "--", "/opt/env/bin/horovodrun", "--check-build"],
                       capture_output=True, text=True, timeout=scaled(600), env={**os.environ, "USER": "root"})
    print(f"ch-run horovodrun --check-build: {time.monotonic() - t0:.0f} s\n{p.stdout}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[X] PyTorch" in p.stdout and "[X] MPI" in p.stdout and "[X] Gloo" in p.stdout
    # the interpreter inside is the image's (Debian's), at the fixed prefix
    p = subprocess.run(["ch-run", str(rootfs), "--", "/opt/env/bin/python", "-c",
                        "import sys, horovod.torch; print(sys.prefix, sys.base_prefix)"],
                       capture_output=True, text=True, timeout=scaled(600), env={**os.environ, "USER": "root"})
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
                       capture_output=True, text=True, timeout=scaled(300))
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


MPICH_SITE = ("name: mpich-site\nsources: {cce: https://cpe.ext.hpe.com/docs/}\n"
              "container: {runtime: charliecloud, source: cce, mpi_abi: mpich}\n")


@pytest.fixture(scope="module")
def mpich_image(tools, cpu_horovod_env, tmp_path_factory):
    """The cpu-horovod environment's image for a site whose images carry the MPICH ABI (Cray MPICH's):
    the environment's wheel links Open MPI, so Horovod is compiled inside (the dir form only)."""
    def build(base: Path) -> None:  # once per run: the multi-node test (another xdist worker) uses it too
        base.mkdir()
        site = base / "mpich.yaml"
        site.write_text(MPICH_SITE)
        t0 = time.monotonic()
        proc = run_envtool("image", cpu_horovod_env, "--output", base / "img", "--site-file", site, "--format", "dir",
                           "--json", timeout=scaled(3600))
        took = time.monotonic() - t0
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (base / "result.json").write_text(proc.stdout)
        res = json.loads(proc.stdout)
        print(f"\nMPICH image (Horovod compiled inside) built in {took:.0f} s: "
              + ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in res["sizes"].items()) + f"; steps {res['step_seconds']}")

    base = once(tmp_path_factory, "mpich-image", build)
    return base / "img", json.loads((base / "result.json").read_text())


def test_image_for_the_mpich_abi_compiles_horovod_inside(mpich_image, cpu_horovod_env):
    """Horovod compiled in a build root against Debian's MPICH (``libmpich.so.12``, the MPICH ABI) with
    the environment's HOROVOD_* variables; check-build and a two-rank MPI allreduce inside the image
    (MPICH's own mpiexec); the image's lock and SBOM name the compiled wheel."""
    from envtool.horovod.cache import file_sha256
    from envtool.lock.lockio import read_lock

    out, res = mpich_image
    hc = res["horovod_compiled"]
    assert hc["mpi"].startswith("MPICH "), hc
    assert "openmpi" in hc["why"] and "mpi_abi is mpich" in hc["why"], hc["why"]
    assert hc["build_env"]["HOROVOD_WITH_MPI"] == "1" and hc["build_env"]["HOROVOD_WITH_GLOO"] == "1", hc
    assert res["libmpi"].startswith("libmpich.so.12 => "), res["libmpi"]
    # nothing of the build is left next to the output; the image holds no compiler
    assert sorted(p.name for p in out.parent.iterdir()) == ["img", "mpich.yaml", "result.json"]
    rootfs = out / "rootfs"
    assert not (rootfs / "usr/bin/cmake").exists() and not (rootfs / "usr/bin/g++").exists()
    env = {**os.environ, "USER": "root"}
    p = subprocess.run(["ch-run", str(rootfs), "--", "/opt/env/bin/horovodrun", "--check-build"],
                       capture_output=True, text=True, timeout=scaled(600), env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[X] PyTorch" in p.stdout and "[X] MPI" in p.stdout and "[X] Gloo" in p.stdout, p.stdout
    # both ranks' values (1 and 2) in the sum; only rank 0 prints (mpiexec forwards the ranks' output
    # in pieces, which interleave)
    code = ("import torch, horovod.torch as hvd; hvd.init(); "
            "t = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum); "
            "hvd.rank() == 0 and print('size', hvd.size(), 'sum', t.item(), 'mpi', hvd.mpi_enabled(), flush=True)")
    p = subprocess.run(["ch-run", str(rootfs), "--", "mpiexec", "-n", "2", "/opt/env/bin/python", "-c", code],
                       capture_output=True, text=True, timeout=scaled(600), env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "size 2 sum 3.0 mpi True" in p.stdout.splitlines(), p.stdout + p.stderr
    # the image's lock names the compiled wheel, which is in the image with that hash
    image_env = rootfs / "opt/env"
    (hvd,) = [e for e in read_lock(image_env / "conda-lock.yml").packages if e.name == "horovod"]
    assert hvd.sha256 == hc["sha256"]
    assert file_sha256(image_env / "share/envtool" / hc["wheel"]) == hc["sha256"]
    # the SBOM in the image: the environment's components; Horovod the same version with its own hash
    in_image = _components(json.loads((image_env / "share/envtool/sbom.cdx.json").read_text()))
    proc = run_envtool("sbom", "--prefix", cpu_horovod_env)
    assert proc.returncode == 0, proc.stderr
    env_components = _components(json.loads(proc.stdout))
    hvd_env, hvd_image = env_components.pop("horovod"), in_image.pop("horovod")
    assert in_image == env_components
    assert hvd_image[0] == hvd_env[0] and ("SHA-256", hc["sha256"]) in hvd_image[2], (hvd_env, hvd_image)


def test_image_without_the_locked_wheel_names_compile_horovod(tools, cpu_horovod_env, tmp_path):
    """A lock whose Horovod wheel no cache holds: exit 1 before anything is downloaded, naming
    ``--compile-horovod``; only the log is left."""
    from dataclasses import replace

    from envtool.lock.lockio import read_lock, write_lock

    env = tmp_path / "env"
    (env / ".envtool").mkdir(parents=True)
    lock = read_lock(cpu_horovod_env / "conda-lock.yml")
    write_lock(replace(lock, packages=tuple(replace(e, sha256="ab" * 32) if e.name == "horovod" else e
                                            for e in lock.packages)), env / "conda-lock.yml")
    shutil.copy2(cpu_horovod_env / ".envtool" / "create.json", env / ".envtool" / "create.json")
    out = tmp_path / "out"
    out.mkdir()
    proc = run_envtool("image", env, "--output", out / "img", "--format", "dir", "--json", timeout=scaled(600))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert "--compile-horovod" in data["error"] and "ab" * 32 in data["error"], data
    assert [p.name for p in out.iterdir()] == ["img.envtool-image.log"]
    log = Path(data["log"]).read_text()
    assert "ab" * 32 in log and "pip download" not in log, log  # nothing was downloaded first


def test_compile_on_a_base_without_build_tools_is_exit_2_before_downloading(tools, image, cpu_horovod_env, tmp_path):
    """``--compile-horovod`` with a ``dir:`` base that has no compiler (the Open MPI image's own root):
    exit 2 naming container.base and what is missing, looked for inside the base, before any download."""
    rootfs = image[0] / "rootfs"
    site = tmp_path / "site.yaml"
    site.write_text("name: dirbase\nsources: {ch: https://hpc.github.io/charliecloud/ch-run.html}\n"
                    f"container: {{runtime: charliecloud, source: ch, mpi_abi: openmpi, base: 'dir:{rootfs}'}}\n")
    work = tmp_path / "out"
    work.mkdir()
    proc = run_envtool("image", cpu_horovod_env, "--output", work / "img", "--site-file", site, "--format", "dir",
                       "--compile-horovod", "--json", timeout=scaled(600))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert "container.base" in data["error"] and "c++ (the C++ compiler)" in data["error"], data["error"]
    assert "cmake (CMake)" in data["error"] and "python3-config" in data["error"], data["error"]
    assert [p.name for p in work.iterdir()] == ["img.envtool-image.log"]
    assert "pip download" not in Path(data["log"]).read_text()


def test_gpu_build_on_a_debian_base_is_exit_2(tools, cpu_horovod_env, tmp_path):
    """An environment whose Horovod was built with NCCL operations cannot be compiled on a Debian base
    (no CUDA, no NCCL): exit 2 naming container.base and the variable, nothing downloaded."""
    env = tmp_path / "env"
    (env / ".envtool").mkdir(parents=True)
    shutil.copy2(cpu_horovod_env / "conda-lock.yml", env / "conda-lock.yml")
    record = json.loads((cpu_horovod_env / ".envtool" / "create.json").read_text())
    (step,) = [s for s in record["steps"] if s["id"] == "build-horovod"]
    step["env"]["HOROVOD_GPU_OPERATIONS"] = "NCCL"
    (env / ".envtool" / "create.json").write_text(json.dumps(record))
    work = tmp_path / "out"
    work.mkdir()
    proc = run_envtool("image", env, "--output", work / "img", "--format", "dir", "--compile-horovod", "--json",
                       timeout=scaled(600))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert "container.base: debian:bookworm" in data["error"] and "HOROVOD_GPU_OPERATIONS=NCCL" in data["error"]
    assert [p.name for p in work.iterdir()] == ["img.envtool-image.log"]
    assert "pip download" not in Path(data["log"]).read_text()


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


def _cluster_site(tmp_path: Path, cluster, container: str) -> Path:
    """A site file for the test cluster whose ranks run in Charliecloud images (``container`` section)."""
    site = tmp_path / "testcluster.yaml"
    site.write_text(f"""name: testcluster
summary: the multi-node Slurm the tests start, its ranks in Charliecloud images
sources: {{ch: https://hpc.github.io/charliecloud/ch-run.html}}
platforms: [linux-64]
scheduler: slurm
launcher: "srun -n {{ranks}}"
gpus_per_node: 0
batch:
  cpus_per_node: {cluster.cpus}
  mpi: pmix
container: {container}
""")
    return site


def _validate_image_on_two_nodes(cluster, rootfs: Path, site: Path, run: Path, env=None, args=()) -> dict:
    """``validate --image ROOTFS --submit`` on both nodes of the test cluster; its JSON result.
    ``env``: more variables for the submission (the job and its ranks inherit them); ``args``: more
    options."""
    import sys

    t0 = time.monotonic()
    proc = cluster.run(sys.executable, "-m", "envtool", "validate", "--image", rootfs, *args,
                       "--site-file", site, "--submit", "--nodes", "2", "--ranks-per-node", "1",
                       "--sweep-max", "0", "--workdir", run, "--timeout", "900", "--json",
                       cwd=str(REPO), env={"ENVTOOL_DEBUG": "", "USER": "root", **(env or {})}, timeout=1200)
    print(f"\nvalidate --image across 2 nodes: {time.monotonic() - t0:.0f} s")
    res = json.loads(proc.stdout)
    assert proc.returncode == 0, json.dumps(res.get("problems"), indent=1) + proc.stderr
    assert res["check_build"]["ok"], res["check_build"]
    ranks = res["ranks"]
    assert sorted(r["host"] for r in ranks) == ["node1", "node2"], ranks
    assert all(r["ok"] for r in ranks), ranks
    assert {r["import"]["prefix"] for r in ranks} == {"/opt/env"}, ranks  # the image's environment
    return res


@pytest.fixture(scope="module")
def mpich_image_dir(request) -> Path:
    """The MPICH image's directory: ``ENVTOOL_TEST_MPICH_IMAGE`` (an ``envtool image`` output for an
    MPICH-ABI site, to reuse one while developing), else the module's :func:`mpich_image`."""
    reuse = os.environ.get("ENVTOOL_TEST_MPICH_IMAGE")
    if reuse and (Path(reuse) / "rootfs" / "opt" / "env" / "bin" / "python").exists() and not os.environ.get("CI"):
        return Path(reuse)
    return request.getfixturevalue("mpich_image")[0]


@pytest.mark.multinode
def test_validate_image_across_two_nodes_with_charliecloud(tools, image_dir, multinode_cluster, tmp_path):
    """``validate --image``: check-build and the MPI allreduce (every rank under ``ch-run``) across
    the two nodes of the test cluster, the ranks' Python the image's /opt/env."""
    site = _cluster_site(tmp_path, multinode_cluster, "{runtime: charliecloud, source: ch, mpi_abi: openmpi}")
    _validate_image_on_two_nodes(multinode_cluster, image_dir / "rootfs", site, tmp_path / "run")
    script = (tmp_path / "run" / "job.sh").read_text()
    assert "ch-run" in script and str(image_dir / "rootfs") in script


@pytest.mark.multinode
def test_validate_mpich_image_across_two_nodes_through_pmi2(tools, mpich_image_dir, multinode_cluster, tmp_path):
    """The image whose Horovod was compiled against MPICH: its ranks start through Slurm's PMI-2
    (``srun --mpi=pmi2``, as Perlmutter starts Shifter images) on both nodes, and the allreduce passes."""
    out = mpich_image_dir
    site = _cluster_site(tmp_path, multinode_cluster,
                         "{runtime: charliecloud, source: ch, mpi_abi: mpich, mpi: pmi2}")
    # The test cluster's nodes share one kernel, so Debian's MPICH (ch4:ucx) takes the two ranks for
    # one host and tries UCX's shared memory through /proc/PID/fd, which ch-run's unprivileged user
    # namespaces refuse ("mm_posix.c … Permission denied"); on real nodes UCX picks the network.
    # UCX_TLS (https://openucx.readthedocs.io/en/master/faq.html) keeps it to TCP here.
    # The spec of the environment in the image names the DataLoader start method its ranks use
    # (forkserver). This MPICH (4.0.2, ch4:ucx) can hang in MPI_Finalize at the ranks' exit, after
    # their checks (https://github.com/pmodels/mpich/pull/6596, fixed in 4.2.0); the ranks bound
    # Horovod's shutdown and validate names it as a warning, printed here when it happens.
    res = _validate_image_on_two_nodes(multinode_cluster, out / "rootfs", site, tmp_path / "run",
                                       env={"UCX_TLS": "tcp,self"}, args=("--spec", "cpu-horovod"))
    said = res["ranks"]
    for warning in res.get("warnings", ()):
        print(f"validate warned: {warning}")
    assert [r["checks"]["dataloader"]["method"] for r in said] == ["forkserver", "forkserver"], said
    script = (tmp_path / "run" / "job.sh").read_text()
    assert "--mpi=pmi2" in script and "ch-run" in script, script


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
    def mmdebstrap_writes_the_base() -> bool:
        """The moment this test means: mmdebstrap runs for this output (a command line naming it and
        the work directory) and has begun the base (its rootfs/usr exists). Either alone can be
        another phase: the wheelhouse's download comes before mmdebstrap, the install into the root
        (rootfs/usr there, no mmdebstrap) after it."""
        if not any(work.glob(".img.envtool-image-*/rootfs/usr")):
            return False
        found = subprocess.run(["pgrep", "-f", f"mmdebstrap.*{work}"], capture_output=True, text=True,
                               timeout=scaled(30))
        return found.returncode == 0

    # the locked wheels are downloaded first: minutes on a quiet machine, more on a loaded one
    deadline = time.monotonic() + scaled(900)
    seen = False
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if mmdebstrap_writes_the_base():
                seen = True
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        assert seen, f"mmdebstrap was not seen writing the base of {work} within {scaled(900):.0f} s"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=scaled(120))
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
    The build fails at its first step: no wheel cache holds the lock's Horovod wheel (and pip may not
    reach an index: PIP_NO_INDEX, no cache)."""
    env = tmp_path / "env"
    env.mkdir()
    shutil.copy2(REPO / "lockfiles" / "cpu-horovod.conda-lock.yml", env / "conda-lock.yml")
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (out / "img.envtool-image.log").symlink_to(victim)
    proc = run_envtool("image", env, "--output", out / "img", "--format", "dir", "--json",
                       env={"PIP_NO_INDEX": "1", "PIP_CACHE_DIR": str(tmp_path / "pip-cache")}, timeout=scaled(600))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert victim.read_text() == "precious\n"
    log = Path(data["log"])
    assert log.parent == out and log.name != "img.envtool-image.log" and not log.is_symlink()
    assert "Horovod wheel" in log.read_text() and oct(log.stat().st_mode & 0o777) == "0o600"
    assert data["outcome"] == f"nothing was left at {out / 'img'}"
    assert sorted(p.name for p in out.iterdir()) == sorted(["img.envtool-image.log", log.name])
