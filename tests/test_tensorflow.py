"""TensorFlow and Keras with Horovod, for real (issue 40): Horovod 0.28.1 compiled against
TensorFlow 2.12.1 (``specs/cpu-tensorflow-horovod.yaml``), validated through ``horovod.tensorflow``
and ``horovod.tensorflow.keras`` with each controller, on this host (``create``, ``validate``) and
across the 2-node test Slurm (``validate --submit``); a broken binding fails naming the framework
and the rank.

The environment (``cpu_tensorflow_env``, tests/conftest.py) is built once per run, after the
cpu-horovod one; its ``create --json`` output is kept beside it (``create.json``).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, TENSORFLOW_TESTS, run_envtool
from test_multinode import site  # noqa: F401 - the test cluster's site file
from helpers.speed import scaled

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not TENSORFLOW_TESTS, reason="ENVTOOL_TEST_TENSORFLOW=0 leaves the TensorFlow tests out")]


def envtool(*args, timeout=600):
    """The real CLI (conftest's ``run_envtool``) with a timeout scaled to the machine."""
    return run_envtool(*args, timeout=scaled(timeout))


def _keras_agrees(per_rank):
    """Every rank's Keras check passed, trained, and ended with rank 0's weights (same digest)."""
    assert len(per_rank) == 2, per_rank
    assert all(k["ok"] and k["trained"] and k["max_difference"] == 0.0 for k in per_rank), per_rank
    assert len({k["weights_sha256"] for k in per_rank}) == 1, per_rank


def test_create_builds_horovod_with_tensorflow_and_runs_both_controllers(cpu_tensorflow_env):
    """check-build shows [X] TensorFlow with both controllers; create's 2-rank allreduce ran through
    horovod.tensorflow with Gloo and with MPI, each with a Keras fit whose weights agree on both
    ranks; the DataLoader check says why it was skipped; TensorFlow's start-up lines on fd 2 were
    each matched by the spec's expect.import_warnings (none unexpected)."""
    data = json.loads((cpu_tensorflow_env / "create.json").read_text())
    assert data["ok"], data
    v = data["results"]["validate"]
    found = v["check_build"]["found"]
    assert found["frameworks"]["TensorFlow"] is True, found
    assert found["controllers"] == {"MPI": True, "Gloo": True}, found
    runs = {(a["framework"], a["controller"]): a for a in v["allreduces"]}
    assert sorted(runs) == [("tensorflow", "gloo"), ("tensorflow", "mpi")], v["allreduces"]
    for run in runs.values():
        assert run["ok"], run
        _keras_agrees(run["keras_fit"])
    assert "do not include PyTorch" in v["dataloader_skipped"], v
    assert "dataloader" not in v
    imports = v["imports"]
    assert [m["module"] for m in imports["modules"]] == ["tensorflow", "horovod.tensorflow", "horovod.tensorflow.keras"]
    assert imports["unexpected"] == [], imports
    # what TensorFlow printed is really there and really matched (not an empty capture)
    assert "oneDNN custom operations are on" in imports["modules"][0]["stderr"], imports
    # Horovod's TensorFlow extension finds TensorFlow's libraries without `import tensorflow` first
    # (envtool adds the RUNPATH; the pre-flight on each node runs ldd on it)
    (ext,) = (cpu_tensorflow_env / "env").glob("lib/python3*/site-packages/horovod/tensorflow/mpi_lib*.so")
    ldd = subprocess.run(["ldd", str(ext)], capture_output=True, text=True, timeout=60).stdout
    assert "libtensorflow_framework.so.2 => " in ldd and "not found" not in ldd, ldd
    changed = data["results"]["build-horovod"]["runpath"]["changed"]
    assert any(c.endswith("/horovod/tensorflow/" + ext.name) for c in changed), changed
    # the wheel-cache key names TensorFlow's version
    from envtool.core.paths import cache_root

    build = data["results"]["build-horovod"]
    key = json.loads((cache_root() / "horovod-wheels" / build["cache_key"] / "key.json").read_text())
    assert ["tensorflow-cpu", "2.12.1"] in [list(f) for f in key["frameworks"]], key
    print(f"Horovod compiled against TensorFlow: {key.get('compiled')}")


def test_validate_runs_each_controller_through_the_tensorflow_binding_and_a_keras_benchmark(cpu_tensorflow_env):
    """``validate`` on this host: one 2-rank run per controller with horovod.tensorflow (allreduce,
    Keras fit with weights compared across ranks), ranks naming their framework; the benchmark is a
    synthetic Keras step at 1 and 2 ranks."""
    prefix = cpu_tensorflow_env / "env"
    proc = envtool("validate", "--prefix", prefix, "--benchmark", "--steps", "3", "--batch-size", "8", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["checks"] == ["horovod-tf-mpi", "horovod-tf-gloo"], data["checks"]
    assert sorted(data["runs"]) == ["tensorflow-gloo", "tensorflow-mpi"]
    for key, recs in data["runs"].items():
        assert [r["rank"] for r in recs] == [0, 1], recs
        for r in recs:
            assert r["framework"] == "tensorflow" and r["controller"] == key.split("-")[1], r
            assert r["checks"]["allreduce_cpu"]["ok"] and r["checks"]["allreduce_cpu"]["value"] == 1.5, r
            assert r["import"]["modules"] == ["tensorflow", "horovod.tensorflow", "horovod.tensorflow.keras"], r
        _keras_agrees([r["checks"]["keras_fit"] for r in recs])
    assert "do not include PyTorch" in data["skipped"]["dataloader"], data["skipped"]
    bench = data["benchmark"]
    assert bench["framework"] == "tensorflow" and [p["ranks"] for p in bench["points"]] == [1, 2], bench
    assert all(p["samples_per_sec_per_rank"] > 0 for p in bench["points"]), bench
    # the text form's table: each rank's framework and the Keras column
    from envtool.validate import ranks as rk

    table = rk.table(data["runs"]["tensorflow-gloo"])
    assert table.splitlines()[0].split()[:5] == ["rank", "host", "local", "framework", "controller"], table
    assert "keras fit" in table.splitlines()[0] and "tensorflow  gloo" in table and "weights agree" in table, table


def test_doctor_reads_tensorflows_own_view(cpu_tensorflow_env):
    """``doctor`` on the TensorFlow environment: versions and the build as the spec expects, the
    DataLoader check skipped naming why, and the GPU check carrying TensorFlow's own view
    (``tf.test.is_built_with_cuda()``, ``tf.config.list_physical_devices("GPU")``) of this CPU-only
    machine."""
    proc = envtool("doctor", "--prefix", cpu_tensorflow_env / "env", "--json", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = {f["id"]: f for f in json.loads(proc.stdout)["findings"]}
    assert found["versions"]["status"] == "ok" and "tensorflow 2.12.1" in found["versions"]["summary"], found
    assert found["horovod-build"]["status"] == "ok", found["horovod-build"]
    assert "do not include PyTorch" in found["start-method"]["summary"], found["start-method"]
    gpu = found["gpu"]
    assert gpu["details"]["tensorflow_gpu"] == {"built_with_cuda": False, "cuda": None, "cudnn": None,
                                                "devices": []}, gpu


def test_lock_diff_sbom_modulefile_jobscript_and_pack_work_on_the_tensorflow_environment(cpu_tensorflow_env, tmp_path):
    """Issue 40, item 4: what follows ``create`` on a TensorFlow-only environment. A lock snapshot
    names TensorFlow and the built Horovod and ``diff`` finds no drift against it; the SBOM lists
    them; an Lmod modulefile loads the environment and ``horovod.tensorflow`` imports through it;
    a Slurm job script (Perlmutter's) activates it and warns that the environment is CPU-only; a
    tar pack carries Horovod's TensorFlow extension and the lockfile."""
    import tarfile

    from test_modulefile import LMOD_INIT, module_shell

    env = cpu_tensorflow_env / "env"
    lock = tmp_path / "tf.conda-lock.yml"
    proc = envtool("lock", "--prefix", env, "-o", lock, "--json", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    locked = lock.read_text()
    for name, version in (("tensorflow-cpu", "2.12.1"), ("horovod", "0.28.1"), ("keras", "2.12.0")):
        assert f"- name: {name}\n  version: {version}\n  manager: pip" in locked, name
    proc = envtool("diff", "--prefix", env, "--lock", lock, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    drift = json.loads(proc.stdout)
    assert (drift["added"], drift["removed"], drift["changed"]) == ([], [], []), drift

    proc = envtool("sbom", "--prefix", env)
    assert proc.returncode == 0, proc.stderr
    components = {c["name"]: c.get("version") for c in json.loads(proc.stdout)["components"]}
    assert components["tensorflow-cpu"] == "2.12.1" and components["horovod"] == "0.28.1", components

    proc = envtool("modulefile", "--prefix", env, "--root", tmp_path / "modules", "--name", "tf/2.12", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tensorflow-cpu 2.12.1" in " ".join(json.loads(proc.stdout)["content"]["whatis"])
    if LMOD_INIT or os.environ.get("CI"):
        assert LMOD_INIT, "Lmod is not installed (tests/setup.d/modules.sh)"
        p = module_shell(LMOD_INIT, f"module use {tmp_path / 'modules'}; module load tf/2.12; "
                         "python -c 'import horovod.tensorflow as hvd, sys; print(sys.prefix, hvd.__file__)'",
                         timeout=scaled(300))
        assert p.returncode == 0, p.stdout + p.stderr
        assert p.stdout.split()[0] == str(env) and "/horovod/tensorflow/" in p.stdout, p.stdout

    job = tmp_path / "job.sh"
    proc = envtool("jobscript", "--prefix", env, "--site", "perlmutter", "--account", "m0000", "--nodes", "2",
                   "--output", job, "--", "python", "train.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = job.read_text()
    assert f"source {env}/bin/activate" in text and "#SBATCH -N 2" in text, text
    assert "CPU-only (tensorflow-cpu 2.12.1)" in proc.stderr, proc.stderr

    packed = tmp_path / "tf.tar"
    proc = envtool("pack", "--prefix", env, "--format", "tar", "-o", packed, "--json", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with tarfile.open(packed) as tar:
        names = tar.getnames()
    assert any("horovod/tensorflow/mpi_lib" in n and n.endswith(".so") for n in names), names[:20]
    assert any(n.endswith("conda-lock.yml") for n in names), names[:20]
    packed.unlink()  # 1.7 GB: not kept until the run ends


def _copy_without_tensorflow_extension(prefix: Path, dest: Path) -> Path:
    """A venv at ``dest`` that is ``prefix`` except for Horovod's TensorFlow extension: the
    interpreter link and ``pyvenv.cfg`` copied, every other site-packages entry a symbolic link to
    ``prefix``'s, ``horovod`` a real copy without ``horovod/tensorflow/mpi_lib*.so``."""
    dest.mkdir()
    shutil.copy2(prefix / "pyvenv.cfg", dest / "pyvenv.cfg")
    (dest / "bin").mkdir()
    for f in (prefix / "bin").iterdir():
        if f.is_symlink():
            (dest / "bin" / f.name).symlink_to(os.readlink(f))
        else:
            shutil.copy2(f, dest / "bin" / f.name)
    (site_packages,) = (prefix / "lib").glob("python3*/site-packages")
    new_site = dest / site_packages.relative_to(prefix)
    new_site.mkdir(parents=True)
    for entry in site_packages.iterdir():
        if entry.name == "horovod":
            shutil.copytree(entry, new_site / "horovod", symlinks=True)
        else:
            (new_site / entry.name).symlink_to(entry)
    removed = sorted((new_site / "horovod" / "tensorflow").glob("mpi_lib*.so"))
    assert removed, "no horovod/tensorflow/mpi_lib*.so to remove"
    for f in removed:
        f.unlink()
    return dest


def test_a_broken_tensorflow_binding_fails_validate_naming_the_framework_and_the_rank(cpu_tensorflow_env, tmp_path):
    """Horovod's TensorFlow extension removed from a copy of the environment: ``validate`` exits 1,
    each controller's problem names the framework's check and each rank."""
    broken = _copy_without_tensorflow_extension(cpu_tensorflow_env / "env", tmp_path / "broken")
    spec = REPO / "specs" / "cpu-tensorflow-horovod.yaml"
    proc = envtool("validate", "--prefix", broken, "--spec", spec, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    problems = data["problems"]
    # check-build asks the bindings: the only one broken, it lists no framework and no controller,
    # and horovodrun starts no rank; every check names its framework, its binding and its ranks
    assert problems[0].startswith("check-build: TensorFlow (frameworks), MPI (controllers), Gloo (controllers)")
    for key, controller in (("tensorflow-mpi", "MPI"), ("tensorflow-gloo", "Gloo")):
        said = [p for p in problems if p.startswith(key + ": ")]
        assert said[0].startswith(f"{key}: no TensorFlow rank started: horovodrun exited with 1 (ValueError: "
                                  f"{controller} support has not been built."), said
        assert "check-build lists no TensorFlow: Horovod's horovod.tensorflow does not import here" in said[0], said
        assert said[1:] == [f"{key}: rank {r}: no result (it did not start or was killed; see the job output)"
                            for r in (0, 1)], said


@pytest.mark.multinode
def test_a_broken_tensorflow_binding_in_a_job_names_each_rank_and_its_error(multinode_cluster, site,  # noqa: F811
                                                                            cpu_tensorflow_env, tmp_path):
    """The same broken copy in a job (srun starts the ranks, not horovodrun): the ranks report that
    horovod.tensorflow has not been built, naming their node and framework. The step runs under
    ``srun --kill-on-bad-exit=1`` (issue 45: a failed rank ends the step), so the rank that fails
    first may end the other before it writes its record (seen in rehearsal 28: node2's rank was
    terminated): that rank is then named as having no result, never left out."""
    from test_multinode import envtool as cluster_envtool

    broken = _copy_without_tensorflow_extension(cpu_tensorflow_env / "env", tmp_path / "broken")
    proc = cluster_envtool(multinode_cluster, "validate", "--prefix", broken, "--spec",
                           REPO / "specs" / "cpu-tensorflow-horovod.yaml", "--site-file", site, "--submit",
                           "--nodes", "2", "--ranks-per-node", "1", "--sweep-max", "0", "--workdir", tmp_path / "run",
                           "--json", "--timeout", "300", timeout=scaled(400))
    assert proc.returncode == 1, proc.stderr + proc.stdout + multinode_cluster.logs()
    problems = json.loads(proc.stdout)["problems"]
    named = {rank for rank, node in ((0, "node1"), (1, "node2"))
             if any(p.startswith(f"rank {rank} on {node} (tensorflow): ImportError: Extension horovod.tensorflow "
                                 "has not been built") for p in problems)}
    assert named, problems
    for rank in {0, 1} - named:  # ended by the step's kill-on-bad-exit before it wrote its record
        assert f"rank {rank}: no result (it did not start or was killed; see the job output)" in problems, problems
    assert multinode_cluster.wait_queue_empty() == ""


@pytest.mark.multinode
def test_validate_submit_runs_the_tensorflow_binding_on_both_nodes(multinode_cluster, site,  # noqa: F811
                                                                   cpu_tensorflow_env, tmp_path):
    """2 ranks, one on node1 and one on node2, with horovod.tensorflow: MPI through srun --mpi=pmix,
    Gloo through srun --mpi=none and the rendezvous; each rank's allreduce, sweep (to 64 B, numpy
    arrays through TensorFlow tensors) and Keras fit pass, and the weights agree on both nodes.
    One rank per node: 4 ranks took 111 s here against the other worker's tests (each rank imports
    TensorFlow, 3-5 s of CPU)."""
    from test_multinode import envtool as cluster_envtool

    run = tmp_path / "run"
    proc = cluster_envtool(multinode_cluster, "validate", "--prefix", cpu_tensorflow_env / "env", "--site-file", site,
                           "--submit", "--nodes", "2", "--ranks-per-node", "1", "--sweep-max", "64B",
                           "--workdir", run, "--json", "--timeout", "600", timeout=scaled(700))
    assert proc.returncode == 0, proc.stderr + proc.stdout + multinode_cluster.logs()
    data = json.loads(proc.stdout)
    assert data["checks"] == ["horovod-tf-mpi", "horovod-tf-gloo"], data["checks"]
    assert sorted(data["controllers"]) == ["tensorflow-gloo", "tensorflow-mpi"]
    for name, c in data["controllers"].items():
        ranks = c["ranks"]
        assert [r["host"] for r in ranks] == ["node1", "node2"], (name, ranks)
        for r in ranks:
            assert r["ok"] and r["size"] == 2 and r["framework"] == "tensorflow", (name, r)
            assert r["controller"] == name.split("-")[1], (name, r)
            assert r["checks"]["allreduce_cpu"]["value"] == 1.5, (name, r)
            sizes = r["checks"]["sweep"]["sizes"]
            assert [s["bytes"] for s in sizes] == [8, 16, 32, 64] and all(s["exact"] for s in sizes), (name, r)
        keras = [r["checks"]["keras_fit"] for r in ranks]
        assert all(k["ok"] and k["max_difference"] == 0.0 for k in keras), (name, keras)
        assert len({k["weights_sha256"] for k in keras}) == 1, (name, keras)
    assert multinode_cluster.wait_queue_empty() == ""
