"""Issue 29: container runtimes' run lines (envtool.scheduler.containers), `jobscript --image` and
`doctor` inside a container."""
from __future__ import annotations

import shlex

import pytest

from envtool.core.errors import UsageError
from envtool.scheduler import containers
from envtool.spec.sites import ContainerSection
from helpers.speed import scaled

#: The KISTI Perlmutter tutorial's Shifter line
#: (hwang2006/distributed-training-with-horovod-on-perlmutter@db9db9a20292:README.md#L471).
TUTORIAL_LINE = ("srun --mpi=pmi2 -l -n 8 shifter --module=gpu,nccl-2.15 "
                 "--image=qualis2006/tensorflow-pytorch-horovod:tf2.10_pt1.13 "
                 "python KISTI-DL-tutorial-using-horovod/src/tensorflow/tf_keras_cats_dogs.py")
TUTORIAL_IMAGE = "qualis2006/tensorflow-pytorch-horovod:tf2.10_pt1.13"
TUTORIAL_ARGV = ["python", "KISTI-DL-tutorial-using-horovod/src/tensorflow/tf_keras_cats_dogs.py"]


def test_registry_has_one_runtime_per_site_file_name():
    from envtool.spec.sites import CONTAINER_RUNTIMES
    assert containers.REGISTRY is CONTAINER_RUNTIMES
    assert CONTAINER_RUNTIMES.names() == ("shifter", "podman-hpc", "apptainer", "charliecloud")
    for name, rt in CONTAINER_RUNTIMES.items():
        assert rt.name == name and rt.program and rt.source and containers.runtime(name) is rt


def test_shifter_matches_the_tutorial_line():
    section = ContainerSection(runtime="shifter", source="kisti-shifter", modules=("gpu", "nccl-2.15"), mpi="pmi2")
    words = containers.wrap(section, TUTORIAL_IMAGE, TUTORIAL_ARGV)
    tutorial = shlex.split(TUTORIAL_LINE)
    assert words == tutorial[tutorial.index("shifter"):]


def test_shifter_binds_go_in_one_volume_option():
    section = ContainerSection(runtime="shifter", source="s", bind=("/global/cfs",))
    assert containers.wrap(section, "docker:a/b:1", ["true"], binds=["/pscratch/x:/data"]) == [
        "shifter", "--image=docker:a/b:1", "--volume=/global/cfs:/global/cfs;/pscratch/x:/data", "true"]


def test_podman_hpc_modules_are_flags():
    section = ContainerSection(runtime="podman-hpc", source="s", modules=("mpi", "gpu"))
    assert containers.wrap(section, "envtool/cpu-horovod:1", ["python", "-c", "print(1)"], binds=["/data"]) == [
        "podman-hpc", "run", "--rm", "--mpi", "--gpu", "--volume=/data:/data", "envtool/cpu-horovod:1",
        "python", "-c", "print(1)"]


def test_apptainer_exec_bind():
    section = ContainerSection(runtime="apptainer", source="s", modules=("nv",), bind=("/scratch",))
    assert containers.wrap(section, "/images/e.sif", ["python", "t.py"], binds=["/a:/b"]) == [
        "apptainer", "exec", "--nv", "--bind", "/scratch:/scratch", "--bind", "/a:/b", "/images/e.sif",
        "python", "t.py"]


def test_charliecloud_ends_its_options_with_double_dash():
    section = ContainerSection(runtime="charliecloud", source="s")
    assert containers.wrap(section, "/var/tmp/img", ["python", "--version"], binds=["/work"]) == [
        "ch-run", "-b", "/work:/work", "/var/tmp/img", "--", "python", "--version"]


@pytest.mark.parametrize("runtime,module", [("podman-hpc", "gpus"), ("apptainer", "gpu"), ("charliecloud", "gpu")])
def test_unknown_module_is_refused_naming_the_field(runtime, module):
    section = ContainerSection(runtime=runtime, source="s", modules=(module,))
    with pytest.raises(UsageError, match=r"container\.modules: " + module):
        containers.wrap(section, "img", ["true"])


@pytest.mark.parametrize("bind", ["relative/dir", "/a:relative", "/a:/b:/c"])
def test_bad_bind_is_refused(bind):
    section = ContainerSection(runtime="charliecloud", source="s")
    with pytest.raises(UsageError, match="container bind"):
        containers.wrap(section, "/img", ["true"], binds=[bind])


def test_empty_image_or_command_is_refused():
    section = ContainerSection(runtime="apptainer", source="s")
    with pytest.raises(UsageError, match="--image"):
        containers.wrap(section, "", ["true"])
    with pytest.raises(UsageError, match="empty command"):
        containers.wrap(section, "/i.sif", [])


def test_render_quotes_every_word():
    section = ContainerSection(runtime="charliecloud", source="s")
    line = containers.render(containers.wrap(section, "/tmp/my image", ["python", "-c", "print('a b')"]))
    assert line == "ch-run '/tmp/my image' -- python -c 'print('\"'\"'a b'\"'\"')'"
    assert shlex.split(line)[-1] == "print('a b')"


# --- jobscript --image -------------------------------------------------------------------------

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO, run_envtool


def _jobscript(*args, expect=0):
    proc = run_envtool("jobscript", *args, timeout=scaled(120))
    assert proc.returncode == expect, proc.stderr + proc.stdout
    return proc


def _run_line(text: str, program: str):
    """The words of the script line that starts with ``program``."""
    for line in text.splitlines():
        if line.startswith(program + " "):
            return shlex.split(line)
    raise AssertionError(f"no {program} line in:\n{text}")


def test_perlmutter_image_line_matches_the_tutorial_field_by_field():
    # The tutorial (README.md#L471) runs 8 ranks on 2 nodes: `srun --mpi=pmi2 -l -n 8 shifter
    # --module=gpu,nccl-2.15 --image=IMAGE python SCRIPT`; the job script gets the rank count from
    # its directives (-N 2, --ntasks-per-node=4) and srun takes the whole job.
    text = _jobscript("--site", "perlmutter", "--image", TUTORIAL_IMAGE, "--nodes", "2", "--account", "m1234_g",
                      "--", *TUTORIAL_ARGV).stdout
    words = _run_line(text, "srun")
    tutorial = shlex.split(TUTORIAL_LINE)
    k, t = words.index("shifter"), tutorial.index("shifter")
    assert words[0] == tutorial[0] == "srun"
    assert [w for w in words[1:k] if w.startswith("--mpi=")] == ["--mpi=pmi2"] == \
        [w for w in tutorial[1:t] if w.startswith("--mpi=")]
    assert words[k:] == tutorial[t:]  # runtime, modules, image, command: word for word
    assert "#SBATCH -N 2" in text and "#SBATCH --ntasks-per-node=4" in text  # 2 x 4 = the tutorial's -n 8
    # The image carries the environment: no module load, no activation.
    assert "module load" not in text and "activate" not in text and "CONDA_PREFIX" not in text
    assert "through shifter" in text and "kisti-shifter" in text


def _toy_site(tmp_path: Path, runtime: str, modules=(), extra="", bind=()) -> Path:
    site = tmp_path / f"toy-{runtime}.yaml"
    site.write_text(f"""name: toy-{runtime}
summary: a toy Slurm site whose ranks run in {runtime} images
sources:
  rt: https://example.org/{runtime}
platforms: [linux-64]
scheduler: slurm
launcher: "srun -n {{ranks}}"
gpus_per_node: 0
batch:
  cpus_per_node: 8
  mpi: pmix
{extra}container:
  runtime: {runtime}
  source: rt
  modules: [{", ".join(modules)}]
  bind: [{", ".join(bind)}]
""")
    return site


@pytest.mark.parametrize("runtime,modules,image,expect", [
    ("podman-hpc", ("mpi", "gpu"), "envtool/cpu-horovod:1",
     ["srun", "--mpi=pmix", "podman-hpc", "run", "--rm", "--mpi", "--gpu", "--volume=/scratch:/scratch",
      "envtool/cpu-horovod:1", "python", "train.py"]),
    ("apptainer", ("nv",), "/images/cpu horovod.sif",
     ["srun", "--mpi=pmix", "apptainer", "exec", "--nv", "--bind", "/scratch:/scratch", "/images/cpu horovod.sif",
      "python", "train.py"]),
    ("charliecloud", ("join",), "/var/tmp/cpu-horovod",
     ["srun", "--mpi=pmix", "ch-run", "--join", "-b", "/scratch:/scratch", "/var/tmp/cpu-horovod", "--",
      "python", "train.py"]),
])
def test_toy_sites_write_their_runtimes_line(tmp_path, runtime, modules, image, expect):
    site = _toy_site(tmp_path, runtime, modules, bind=("/scratch",))
    proc = _jobscript("--site-file", site, "--image", image, "--nodes", "1", "--ranks-per-node", "2", "--json",
                      "--", "python", "train.py")
    data = json.loads(proc.stdout)
    assert data["image"]["runtime"] == runtime
    assert shlex.split(data["image"]["run_line"]) == expect
    assert "module load" not in data["script"] and "activate" not in data["script"]
    f = tmp_path / "job.sh"
    f.write_text(data["script"])
    assert subprocess.run(["bash", "-n", str(f)]).returncode == 0


def test_container_mpi_wins_over_batch_mpi(tmp_path):
    site = _toy_site(tmp_path, "charliecloud")
    site.write_text(site.read_text() + "  mpi: pmi2\n")
    words = _run_line(_jobscript("--site-file", site, "--image", "/i", "--nodes", "1", "--ranks-per-node", "1",
                                 "--", "true").stdout, "srun")
    assert words[:2] == ["srun", "--mpi=pmi2"]


def test_container_mpi_on_a_site_without_srun_is_exit_2_naming_it(tmp_path):
    site = tmp_path / "toy-local.yaml"
    site.write_text("""name: toy-local
summary: no scheduler; ranks through horovodrun
sources: {rt: hpc/charliecloud@v0.31:doc/ch-run.rst}
platforms: [linux-64]
batch: {cpus_per_node: 2}
container: {runtime: charliecloud, source: rt, mpi: pmi2}
""")
    proc = _jobscript("--site-file", site, "--image", "/i", "--nodes", "1", "--ranks-per-node", "1", "--",
                      "true", expect=2)
    assert "toy-local.yaml: container.mpi: expected no value: srun --mpi= is a Slurm srun option" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_site_without_container_section_is_exit_2_naming_it(tmp_path):
    proc = _jobscript("--site", "local", "--image", "/i", "--nodes", "1", "--ranks-per-node", "1", "--json",
                      "--", "true", expect=2)
    data = json.loads(proc.stdout)
    assert data["ok"] is False and data["exit"] == 2
    assert "local.yaml: container: expected a container section" in data["error"]
    assert "Traceback" not in proc.stderr


def test_unknown_runtime_module_is_exit_2(tmp_path):
    site = _toy_site(tmp_path, "apptainer", ("gpu",))
    proc = _jobscript("--site-file", site, "--image", "/i.sif", "--nodes", "1", "--ranks-per-node", "1",
                      "--", "true", expect=2)
    # the site file and the field are named, with what the runtime takes
    assert f"{site}: container.modules: expected modules of apptainer: some of nv, rocm, nvccli" in proc.stderr
    assert "got 'gpu'" in proc.stderr and "Traceback" not in proc.stderr


def test_image_with_prefix_or_bind_without_image_is_exit_2(tmp_path):
    proc = _jobscript("--site", "perlmutter", "--image", "x", "--prefix", str(tmp_path), "--nodes", "1",
                      "--", "true", expect=2)
    assert "--image runs the environment the image carries" in proc.stderr
    proc = _jobscript("--site", "perlmutter", "--bind", "/x", "--prefix", str(tmp_path), "--nodes", "1",
                      "--", "true", expect=2)
    assert "--bind goes with --image" in proc.stderr


# --- a real Charliecloud container ------------------------------------------------------------

CH_SETUP = Path(__file__).resolve().parent / "setup.d" / "ch-run.sh"


def _ensure_ch_run() -> None:
    """ch-run on PATH: installed with tests/setup.d/ch-run.sh when missing (root); else skip (a
    failure under CI)."""
    import shutil

    if shutil.which("ch-run"):
        return
    why = "ch-run (Charliecloud) is not installed and the tests do not run as root"
    if os.geteuid() == 0:
        proc = subprocess.run(["bash", str(CH_SETUP)], capture_output=True, text=True, timeout=900)
        if proc.returncode == 0 and shutil.which("ch-run"):
            return
        why = f"tests/setup.d/ch-run.sh failed: {proc.stderr[-400:]}"
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def dir_image(root: Path, mounts=()) -> Path:
    """A Charliecloud directory image: an empty root file system (merged /usr, Debian's layout)
    into which the host's /usr is bound at run time (``-b /usr``), so the host's Python runs
    inside; ``mounts`` are further empty directories made for binds (ch-run needs the
    destination to exist in a read-only image, hpc/charliecloud@v0.31:doc/ch-run.rst ``-b``)."""
    img = root / "img"
    for d in ("dev", "proc", "sys", "usr", "tmp", "home", "etc", "root", "opt/env", "var/tmp"):
        (img / d).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "lib", "lib64", "sbin"):
        (img / link).symlink_to(f"usr/{link}")
    for f in ("passwd", "group", "hosts", "resolv.conf"):
        (img / "etc" / f).touch()
    for m in mounts:
        (img / str(m).lstrip("/")).mkdir(parents=True, exist_ok=True)
    return img


def ch_env() -> dict:
    """The environment ch-run needs: it refuses to start without $USER (ch-run.c)."""
    import pwd

    return dict(os.environ, USER=os.environ.get("USER") or pwd.getpwuid(os.getuid()).pw_name)


@pytest.mark.slurm
def test_charliecloud_job_script_runs_ranks_in_the_image_under_slurm(tmp_path):
    from helpers import slurm

    _ensure_ch_run()
    why = slurm.ensure_installed()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(f"Slurm cannot be installed here: {why}")
    img = dir_image(tmp_path)
    out = tmp_path / "ranks"
    out.mkdir()
    site = _toy_site(tmp_path, "charliecloud", bind=("/usr",))
    site.write_text(site.read_text().replace("cpus_per_node: 8", "cpus_per_node: 2").replace("mpi: pmix", "mpi: none"))
    probe = ("import os, pathlib; "
             "pathlib.Path(os.environ['OUT'], os.environ['SLURM_PROCID']).write_text("
             "os.environ.get('CH_RUNNING', '') + '|' + str(sorted(os.listdir('/opt'))))")
    script = tmp_path / "job.sh"
    _jobscript("--site-file", site, "--image", img, "--bind", f"{out}:/var/tmp", "--nodes", "1",
               "--ranks-per-node", "2", "--job-output", tmp_path / "job.out", "--output", script,
               "--", "/usr/bin/python3", "-c", probe)
    text = script.read_text()
    assert _run_line(text, "srun")[:4] == ["srun", "--mpi=none", "ch-run", "-b"]
    text = text.replace("set -e\n", "set -e\nexport OUT=/var/tmp\n", 1)  # where ranks write, inside the image
    script.write_text(text)
    cluster = slurm.start(tmp_path / "slurm", mpi_default="pmix")
    try:
        env = dict(ch_env(), **cluster.env)
        proc = subprocess.run(["sbatch", "--wait", str(script)], capture_output=True, text=True, env=env,
                              timeout=scaled(300), cwd=tmp_path)
        log = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
        assert proc.returncode == 0, proc.stdout + proc.stderr + log + cluster.logs()
    finally:
        cluster.stop()
    # Both ranks ran inside the Charliecloud image (ch-run sets CH_RUNNING; /opt holds the image's
    # own env/ directory, not the host's /opt) and wrote through the bound directory.
    assert sorted(p.name for p in out.iterdir()) == ["0", "1"], log
    for p in out.iterdir():
        assert p.read_text() == "Weird Al Yankovic|['env']"


# --- doctor inside a container ------------------------------------------------------------------

from envtool.checks import container as container_check


def test_detect_each_runtime_by_its_marker(tmp_path):
    assert container_check.detect({}, tmp_path) is None
    assert container_check.detect({"CH_RUNNING": "Weird Al Yankovic"}, tmp_path).runtime == "charliecloud"
    assert container_check.detect({"APPTAINER_CONTAINER": "/i.sif"}, tmp_path).runtime == "apptainer"
    assert container_check.detect({"SINGULARITY_CONTAINER": "/i.sif"}, tmp_path).runtime == "apptainer"
    assert container_check.detect({"SHIFTER_RUNTIME": "1"}, tmp_path).runtime == "shifter"
    (tmp_path / "opt" / "udiImage").mkdir(parents=True)
    assert container_check.detect({}, tmp_path).evidence == "/opt/udiImage"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".containerenv").write_text('engine="podman-4.3.1"\n')
    assert container_check.detect({}, tmp_path).runtime == "podman"


def test_origin_and_expected_injection():
    assert container_check.origin("/opt/udiImage/modules/mpich/lib64/libmpi.so.12") == "injected:mpich"
    assert container_check.origin("/global/cray/lib/libmpi.so.12", ["/global/cray"]) == "bound:/global/cray"
    assert container_check.origin("/opt/env/lib/libmpi.so.40", ["/global/cray"]) == "image"
    perlmutter = ContainerSection(runtime="shifter", source="s", modules=("gpu", "nccl-2.15"))
    assert container_check.expected_injection(perlmutter) == {"nccl": "shifter --module=nccl-2.15"}
    podman = ContainerSection(runtime="podman-hpc", source="s", modules=("mpi", "gpu"))
    assert container_check.expected_injection(podman) == {"mpi": "podman-hpc --mpi"}
    assert container_check.expected_injection(ContainerSection(runtime="charliecloud", source="s")) == {}


def _doctor_json(argv, env, timeout=None):
    proc = subprocess.run(argv, capture_output=True, text=True, env=env,
                          timeout=scaled(180) if timeout is None else timeout)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    (f,) = [f for f in data["findings"] if f["id"] == "container"]
    return f


@pytest.fixture
def ch_setup(tmp_path):
    """A directory image, a venv of this Python to bind at /opt/env, and what to bind so that
    envtool (this checkout) runs inside."""
    _ensure_ch_run()
    base = Path(sys.base_prefix)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    hostmpi = tmp_path / "hostmpi"
    img = dir_image(tmp_path, mounts=[base, REPO, hostmpi, "/opt/udiImage/modules/mpich"])
    binds = ["-b", "/usr"] + ([] if str(base).startswith("/usr/") else ["-b", str(base)]) + ["-b", str(REPO)]
    return {"img": img, "venv": venv, "hostmpi": hostmpi, "binds": binds}


def _real_libmpi() -> Path:
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu"):
        hits = sorted(Path(d).glob("libmpi.so.*")) if Path(d).is_dir() else []
        if hits:
            return hits[0]
    pytest.skip("no libmpi.so.* on this machine to place in the image")


def test_doctor_outside_a_container_says_so(ch_setup):
    f = _doctor_json([sys.executable, "-m", "envtool", "doctor", "--prefix", str(ch_setup["venv"]), "--only",
                      "container", "--json"], {k: v for k, v in os.environ.items() if k != "CH_RUNNING"})
    assert f["status"] == "ok" and f["details"] == {"in_container": False}
    assert f["summary"].startswith("not in a container")


def test_doctor_inside_charliecloud_reports_runtime_and_where_libmpi_comes_from(ch_setup, tmp_path):
    lib = _real_libmpi()
    # The image's own MPI: a real libmpi in the environment's lib (the venv bound at /opt/env).
    (ch_setup["venv"] / "lib").mkdir(exist_ok=True)
    import shutil

    shutil.copy2(lib, ch_setup["venv"] / "lib" / lib.name)
    # The host's MPI, bound into the image as the site file's container.bind says.
    (ch_setup["hostmpi"] / "lib").mkdir(parents=True)
    shutil.copy2(lib, ch_setup["hostmpi"] / "lib" / lib.name)
    sites_dir = tmp_path / "sites"
    sites_dir.mkdir()
    (sites_dir / "toych.yaml").write_text(f"""name: toych
summary: a site whose ranks run in Charliecloud images with the host's MPI bound in
sources: {{ch: hpc/charliecloud@v0.31:doc/ch-run.rst}}
platforms: [linux-64]
container: {{runtime: charliecloud, source: ch, bind: [{ch_setup['hostmpi']}]}}
""")
    (sites_dir / "toyshifter.yaml").write_text("""name: toyshifter
summary: a site whose ranks run in Shifter images with the mpich module
sources: {sh: NERSC/shifter@1378b5716e46:doc/modules.rst}
platforms: [linux-64]
container: {runtime: shifter, source: sh, modules: [mpich]}
""")
    env = dict(ch_env(), PYTHONPATH=str(REPO), ENVTOOL_SITE_PATH=str(sites_dir))
    env.pop("LD_LIBRARY_PATH", None)
    ch = ["ch-run", *ch_setup["binds"], "-b", f"{ch_setup['venv']}:/opt/env", "-b", str(ch_setup["hostmpi"])]
    doctor = ["/opt/env/bin/python", "-m", "envtool", "doctor", "--prefix", "/opt/env", "--only", "container", "--json"]

    # 1. The image's own libmpi (found in PREFIX/lib): ok, origin image.
    f = _doctor_json(ch + [str(ch_setup["img"]), "--", *doctor, "--site", "toych"], env)
    assert f["status"] == "ok", f
    d = f["details"]
    assert d["in_container"] is True and d["runtime"] == "charliecloud" and d["evidence"].startswith("CH_RUNNING=")
    assert d["site_runtime"] == "charliecloud"
    assert d["libraries"]["mpi"] == {"path": f"/opt/env/lib/{lib.name}", "found_by": "PREFIX/lib", "origin": "image"}

    # 2. The host's libmpi first on LD_LIBRARY_PATH, from the site's bound directory.
    env2 = dict(env, LD_LIBRARY_PATH=str(ch_setup["hostmpi"] / "lib"))
    f = _doctor_json(ch + [str(ch_setup["img"]), "--", *doctor, "--site", "toych"], env2)
    assert f["status"] == "ok", f
    assert f["details"]["libraries"]["mpi"]["origin"] == f"bound:{ch_setup['hostmpi']}"
    assert f["details"]["libraries"]["mpi"]["found_by"] == "LD_LIBRARY_PATH"

    # 3. A Shifter site whose mpich module should inject MPI: here the image's libmpi is used -> warn.
    f = _doctor_json(ch + [str(ch_setup["img"]), "--", *doctor, "--site", "toyshifter"], env)
    assert f["status"] == "warn", f
    assert "site toyshifter runs images with shifter, this container is charliecloud" in f["summary"]
    assert f"libmpi.so should come from the host (shifter --module=mpich) but is /opt/env/lib/{lib.name} " \
           "from the image" in f["summary"]

    # 4. The same library where the mpich module puts it (/opt/udiImage/modules/mpich): injected.
    env4 = dict(env, LD_LIBRARY_PATH="/opt/udiImage/modules/mpich")
    ch4 = ch + ["-b", f"{ch_setup['hostmpi'] / 'lib'}:/opt/udiImage/modules/mpich"]
    f = _doctor_json(ch4 + [str(ch_setup["img"]), "--", *doctor, "--site", "toyshifter"], env4)
    assert f["details"]["libraries"]["mpi"]["origin"] == "injected:mpich", f
    assert "should come from the host" not in f["summary"]


@pytest.mark.slow  # needs the cpu-horovod environment
def test_libmpi_found_is_the_one_the_horovod_extension_loads(cpu_horovod_env):
    import re

    exts = container_check.horovod_extensions(Path(cpu_horovod_env))
    assert exts, f"no Horovod MPI extension under {cpu_horovod_env}"
    hit = container_check.find_library("libmpi.so", {}, Path(cpu_horovod_env))
    assert hit is not None and hit[1] == f"ldd {exts[0]}"
    out = subprocess.run(["ldd", str(exts[0])], capture_output=True, text=True, timeout=scaled(60)).stdout
    m = re.search(r"^\s*libmpi\.so\.\d+ => (/\S+)", out, re.M)
    assert m and os.path.realpath(m.group(1)) == hit[0]
    assert container_check.origin(hit[0]) == "image"  # not under /opt/udiImage/modules, no site bind


def test_validate_image_refuses_benchmark_and_a_missing_image_before_writing(tmp_path):
    """``validate --image``: ``--benchmark`` would run on the host (exit 2), and a Charliecloud image
    is a path: a relative one is made absolute, a missing one is exit 2 naming ``--image``; neither
    writes the run directory."""
    site = _toy_site(tmp_path, "charliecloud")
    run = tmp_path / "run"
    bench = run_envtool("validate", "--image", "/", "--site-file", site, "--submit", "--nodes", "1",
                        "--ranks-per-node", "1", "--benchmark", "--workdir", run, "--json")
    assert bench.returncode == 2 and "--benchmark" in json.loads(bench.stdout)["error"], bench.stdout + bench.stderr
    missing = run_envtool("validate", "--image", "imgs/rootfs", "--site-file", site, "--submit", "--nodes", "1",
                          "--ranks-per-node", "1", "--workdir", run, "--json", cwd=tmp_path)
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert json.loads(missing.stdout)["error"].startswith("--image: imgs/rootfs: no such image here")
    assert not run.exists()


def test_image_path_is_absolute_for_path_runtimes_only(tmp_path, monkeypatch):
    from envtool.steps.jobscript.container_run import image_path

    monkeypatch.chdir(tmp_path)
    ch = ContainerSection(runtime="charliecloud", source="s")
    assert image_path(ch, "imgs/rootfs") == str(tmp_path / "imgs" / "rootfs")
    shifter = ContainerSection(runtime="shifter", source="s")
    assert image_path(shifter, "docker:repo/img:tag") == "docker:repo/img:tag"
    with pytest.raises(UsageError, match="--image"):
        image_path(ch, "imgs/rootfs", must_exist=True)


def test_image_for_a_site_without_container_section_or_retired_is_exit_2(tmp_path):
    """``envtool image --site S`` takes the site's MPI ABI and base from its container section: a
    site without one is exit 2 naming ``container`` (no invented default); a retired site needs
    ``--retired-ok``."""
    env = tmp_path / "env"
    env.mkdir()
    polaris = run_envtool("image", env, "--output", tmp_path / "o", "--site", "polaris", "--json")
    assert polaris.returncode == 2, polaris.stdout + polaris.stderr
    assert "polaris.yaml: container: expected a container section" in json.loads(polaris.stdout)["error"]
    summit = run_envtool("image", env, "--output", tmp_path / "o", "--site", "summit", "--json")
    assert summit.returncode == 2 and "--retired-ok" in json.loads(summit.stdout)["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env"]


def test_debian_mpich_library_name_counts_as_libmpi(tmp_path):
    """Debian's MPICH ships the MPICH ABI library as ``libmpich.so.12`` only: doctor finds it for
    ``libmpi.so`` on ``LD_LIBRARY_PATH`` (it found nothing there before, or another MPI)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libmpich.so.12.2.2").write_bytes(b"\x7fELF")
    (lib / "libmpich.so.12").symlink_to("libmpich.so.12.2.2")
    (lib / "libmpichcxx.so.12").write_bytes(b"\x7fELF")  # not an MPI library of that name
    hit = container_check.find_library("libmpi.so", {"LD_LIBRARY_PATH": str(lib)}, None)
    assert hit == (str(lib / "libmpich.so.12.2.2"), "LD_LIBRARY_PATH"), hit
