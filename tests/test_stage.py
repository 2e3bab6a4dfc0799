"""Staging a packed environment to node-local storage in job scripts (issue 25, items 2 and 4).

Without a cluster: the staging lines ``jobscript --stage`` writes for Slurm (Perlmutter), LSF
(Summit) and PBS (Polaris) sites (``bash -n`` checks each script), a job script of a site without
a scheduler *run* with bash (the same staging, unpacking and clean-up on this machine, with the
source prefix hidden by a tmpfs in a private mount namespace), the site files' ``node_local`` field
and the refusals (exit 2, naming file and field).

On the multi-node test cluster (tests/helpers/cluster.py): ``validate --submit --stage`` while the
source prefix is hidden from both nodes (an empty directory bind-mounted over it in each node's
mount namespace), for a tar and a squashfs pack; the pre-flight's lockfile hash on every node is
the source's; nothing is left in the nodes' ``/tmp`` afterwards, also when the job fails. The slow
test stages the real cpu-horovod environment and runs the full validation (4 ranks on 2 nodes).
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_envtool
from helpers.speed import scaled


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def make_venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=scaled(120))
    (where / "conda-lock.yml").write_text(f"version: 1\nmetadata: {{}}\npackage: []\n# {where.name}\n")
    return where


def pack(env: Path, fmt: str, out: Path, *extra) -> dict:
    proc = run_envtool("pack", env, "--format", fmt, "-o", out, "--json", *extra, timeout=scaled(600))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A venv with a lockfile and its tar pack."""
    tmp = tmp_path_factory.mktemp("stage")
    env = make_venv(tmp / "smallenv")
    data = pack(env, "tar", tmp / "smallenv.tar")
    return env, tmp / "smallenv.tar", data


def jobscript(*args, env=None, expect=0):
    proc = run_envtool("jobscript", *args, env=dict({"USER": "alice"}, **(env or {})), timeout=scaled(120))
    assert proc.returncode == expect, proc.stderr + proc.stdout
    return proc


def bash_n(text: str, tmp_path: Path) -> None:
    f = tmp_path / "job.sh"
    f.write_text(text)
    proc = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True, timeout=scaled(30))
    assert proc.returncode == 0, proc.stderr + text


def lines_from(text: str, start: str):
    return [l for l in text.splitlines() if l.startswith(start)]


def test_slurm_lsf_pbs_staging_lines(small, tmp_path):
    env, tar, data = small
    # Slurm (Perlmutter): sbcast to /tmp, one unpack per node, the ranks run from the copy
    out = jobscript("--stage", tar, "--site", "perlmutter", "--account", "m1", "--nodes", "2", "--json",
                    "--", "python", "train.py").stdout
    res = json.loads(out)
    st, text = res["stage"], res["script"]
    assert st["format"] == "tar" and st["lock_sha256"] == sha256(env / "conda-lock.yml")
    assert st["prefix"].startswith("/tmp/envtool-smallenv-") and st["node_local"] == "/tmp"
    assert st["source"].startswith("nersc-tmp: https://docs.nersc.gov/")
    body = text.splitlines()
    sb = body.index(shlex.join(["sbcast", "--force", str(tar), st["copy"]]))
    unpack = [i for i, l in enumerate(body) if l.startswith("srun --mpi=none -N 2 -n 2 --ntasks-per-node=1 bash -c ")
              and "tar --no-same-owner --no-same-permissions -xf" in l]
    assert len(unpack) == 1 and unpack[0] == sb + 1
    words = shlex.split(body[unpack[0]])
    assert words[-6:-3] == ["envtool-stage", st["copy"], st["prefix"]] and int(words[-3]) > 0
    assert words[-2:] == ["bin/python", ".envtool/unpack.py"]
    assert body.index(f"source {st['prefix']}/bin/activate") > sb
    assert body.index("trap envtool_unstage EXIT") < sb and "trap 'exit 143' TERM" in body
    ranks = [i for i, l in enumerate(body) if l.startswith("srun") and l.endswith("python train.py")]
    assert ranks and ranks[0] > unpack[0]
    assert str(env) + "/" not in text and f"{env} " not in text   # nothing of the source prefix reaches the job
    bash_n(text, tmp_path)
    # LSF (Summit): the NVMe burst buffer, its -alloc_flags, jsrun one task per host
    text = jobscript("--stage", tar, "--site", "summit", "--retired-ok", "--account", "P1", "--nodes", "2", "--", "python",
                     "t.py").stdout
    assert "#BSUB -alloc_flags NVME" in text.splitlines()
    cp = lines_from(text, "jsrun -n 2 -r1 -a1 -c1 cp -- ")
    assert len(cp) == 1 and shlex.split(cp[0])[-2:][0] == str(tar)
    dest = shlex.split(cp[0])[-1]
    assert dest.startswith("/mnt/bb/alice/envtool-smallenv-") and dest.endswith(".tar")
    assert lines_from(text, "jsrun -n 2 -r1 -a1 -c1 bash -c ") and "source /mnt/bb/alice/envtool-smallenv-" in text
    assert "olcf-nvme: https://docs.olcf.ornl.gov/" in text
    bash_n(text, tmp_path)
    # PBS (Polaris): the local SSD, mpiexec one process per node
    text = jobscript("--stage", tar, "--site", "polaris", "--account", "P1", "--nodes", "3", "--", "python",
                     "t.py").stdout
    cp = lines_from(text, "mpiexec -n 3 --ppn 1 cp -- ")
    assert len(cp) == 1 and shlex.split(cp[0])[-1].startswith("/local/scratch/envtool-smallenv-")
    assert lines_from(text, "mpiexec -n 3 --ppn 1 bash -c ")
    unstage = lines_from(text, "envtool_unstage() { envtool_limit=\"${ENVTOOL_UNSTAGE_TIMEOUT:-120}\"; ")
    assert len(unstage) == 1 and "; timeout -k 10 \"$envtool_limit\" mpiexec -n 3 --ppn 1 bash -c " in unstage[0], text
    bash_n(text, tmp_path)


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
@pytest.mark.parametrize("ignores_term", [False, True], ids=["stops-on-sigterm", "ignores-sigterm"])
def test_a_clean_up_launcher_that_never_returns_is_stopped_and_named(small, tmp_path, ignores_term):
    """The job script's clean-up (``envtool_unstage``, run by the EXIT trap) on a Slurm site, when
    its ``srun`` never returns (a scheduler that is gone): a stand-in ``srun`` on PATH that sleeps
    for an hour, and in the second case ignores SIGTERM. The clean-up is stopped after
    ``$ENVTOOL_UNSTAGE_TIMEOUT`` s (then SIGKILL 10 s later), the hung launcher is gone, the job's
    standard error names the launcher, the limit and what is left, and the script goes on (exit 0)."""
    env, tar, data = small
    text = jobscript("--stage", tar, "--site", "perlmutter", "--account", "m1", "--nodes", "2", "--", "python",
                     "t.py").stdout
    func = lines_from(text, "envtool_unstage() {")
    assert len(func) == 1, text
    bindir = tmp_path / "bin"
    bindir.mkdir()
    pidfile = tmp_path / "srun.pid"
    (bindir / "srun").write_text("#!/bin/sh\n" + ("trap '' TERM\n" if ignores_term else "") +
                                 f"echo $$ > {shlex.quote(str(pidfile))}\nexec sleep 3600\n")
    (bindir / "srun").chmod(0o755)
    t0 = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", f"set -e\n{func[0]}\nenvtool_unstage\necho after the clean-up"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", ENVTOOL_UNSTAGE_TIMEOUT="2"))
    try:
        out, err = proc.communicate(timeout=scaled(60))
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=scaled(10))
    pid = int(pidfile.read_text())
    assert proc.returncode == 0 and out.strip() == "after the clean-up", (proc.returncode, out, err)
    assert "envtool stage: the clean-up (srun on every node) did not finish within 2 s and was stopped; remove " \
           "/tmp/envtool-smallenv-" in err, err
    assert (11 if ignores_term else 1.5) < took < scaled(30), took
    # the hung launcher was killed: gone, or a zombie (SIGKILL'd with timeout's process group, it is
    # re-parented and reaped by init)
    for _ in range(round(scaled(50))):                 # a SIGKILL is delivered at once; allow 5 s (scaled)
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            state = "gone"
        if state in ("gone", "Z", "X"):
            break
        time.sleep(0.1)
    assert state in ("gone", "Z", "X"), state


def test_a_clean_up_limit_that_is_not_a_number_falls_back_to_the_default(small, tmp_path):
    """``ENVTOOL_UNSTAGE_TIMEOUT=soon`` in the job: timeout(1) would refuse it (exit 125) and nothing
    would be removed; the clean-up warns, uses 120 s and runs (a stand-in ``srun`` on PATH that
    records its words and returns at once)."""
    env, tar, data = small
    text = jobscript("--stage", tar, "--site", "perlmutter", "--account", "m1", "--nodes", "2", "--", "python",
                     "t.py").stdout
    func = lines_from(text, "envtool_unstage() {")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    words = tmp_path / "srun.words"
    (bindir / "srun").write_text(f"#!/bin/sh\necho \"$@\" > {shlex.quote(str(words))}\n")
    (bindir / "srun").chmod(0o755)
    proc = subprocess.run(["bash", "-c", f"set -e\n{func[0]}\nenvtool_unstage\necho after the clean-up"],
                          capture_output=True, text=True, timeout=scaled(60),
                          env=dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", ENVTOOL_UNSTAGE_TIMEOUT="soon"))
    assert proc.returncode == 0 and proc.stdout.strip() == "after the clean-up", proc.stderr
    assert proc.stderr == ("envtool stage: ENVTOOL_UNSTAGE_TIMEOUT=soon is not a whole number of seconds; "
                           "using 120\n"), proc.stderr
    assert "envtool-unstage /tmp/envtool-smallenv-" in words.read_text()   # the clean-up ran


def test_squashfs_staging_lines_mount_once_per_node(small, tmp_path):
    env, _, _ = small
    img = tmp_path / "small.squashfs"
    pack(env, "squashfs", img, "--dest-prefix", "/tmp/envtool-small-mnt")
    text = jobscript("--stage", img, "--site", "perlmutter", "--account", "m1", "--nodes", "2", "--", "python",
                     "t.py").stdout
    mount = [l for l in text.splitlines() if "squashfuse" in l and l.endswith(" &")]
    assert len(mount) == 1 and mount[0].startswith("srun --overlap --mpi=none -N 2 -n 2 --ntasks-per-node=1 "
                                                   "squashfuse -f /tmp/envtool-smallenv-")
    assert shlex.split(mount[0][:-2])[-1] == "/tmp/envtool-small-mnt"
    assert "source /tmp/envtool-small-mnt/bin/activate" in text and "fusermount -u" in text
    bash_n(text, tmp_path)


def _local_site(tmp_path: Path, node: Path) -> Path:
    site = tmp_path / "here.yaml"
    site.write_text(f"""name: here
summary: this machine, no scheduler
sources:
  test: the test's own directory standing in for a node's local disk
scheduler: none
launcher: "env ENVTOOL_RANKS={{ranks}}"
gpus_per_node: 0
batch:
  cpus_per_node: auto
node_local:
  path: {node}
  source: test
""")
    return site


def _hidden(prefix: Path, argv, timeout=120, **kw):
    """Run ``argv`` in a private mount namespace where an empty tmpfs covers ``prefix``."""
    inner = f"mount -t tmpfs -o size=1m envtool-hide {shlex.quote(str(prefix))} && exec " + shlex.join(map(str, argv))
    return subprocess.Popen(["unshare", "--mount", "--propagation", "private", "bash", "-c", inner],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_staged_script_runs_here_from_the_copy_and_cleans_up(small, tmp_path):
    """A site without a scheduler: the script is run for real with bash; the source is hidden."""
    env, tar, data = small
    node = tmp_path / "node-local"
    node.mkdir()
    site = _local_site(tmp_path, node)
    script = tmp_path / "job.sh"

    def write(*command):
        proc = jobscript("--stage", tar, "--site-file", site, "--nodes", "1", "--ranks-per-node", "1", "-o", script,
                         "--json", "--", *command)
        return json.loads(proc.stdout)["stage"]

    st = write("python", "-c", "import sys; print('prefix', sys.prefix)")
    proc = _hidden(env, ["bash", script])
    out, err = proc.communicate(timeout=scaled(120))
    assert proc.returncode == 0, err
    assert f"prefix {st['prefix']}" in out.splitlines()
    assert list(node.iterdir()) == []                       # the copy was removed at the end
    # a failing command: the job fails, the copy is still removed
    write("python", "-c", "import sys; sys.exit(3)")
    proc = _hidden(env, ["bash", script])
    proc.communicate(timeout=scaled(120))
    assert proc.returncode == 3 and list(node.iterdir()) == []
    # SIGTERM (a cancelled job) while the ranks run: exit 143, removed
    st = write("python", "-c", "import time; print('up', flush=True); time.sleep(60)")
    proc = _hidden(env, ["bash", script], start_new_session=True)
    for _ in range(round(scaled(600))):
        if (Path(st["prefix"]) / "bin").exists() or proc.poll() is not None:
            break
        time.sleep(0.1)
    deadline = time.monotonic() + scaled(60)  # the rank runs (its python, in the job's session)
    while proc.poll() is None and time.monotonic() < deadline and subprocess.run(
            ["pgrep", "-s", str(proc.pid), "-f", "time.sleep\\(60\\)"], capture_output=True).returncode != 0:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=scaled(120))
    assert proc.returncode in (143, -15) and list(node.iterdir()) == [], list(node.iterdir())


@pytest.mark.parametrize("block, field, words", [
    ("node_local:\n  path: tmp\n  source: test\n", "node_local.path", "absolute directory"),
    ("node_local:\n  path: /tmp/$(id)\n  source: test\n", "node_local.path", "no quotes, spaces"),
    ("node_local:\n  path: '/tmp/a b'\n  source: test\n", "node_local.path", "no quotes, spaces"),
    ("node_local:\n  path: /tmp/../etc\n  source: test\n", "node_local.path", "'..'"),
    ("node_local:\n  path: /tmp\n", "node_local.source", "documents the path"),
    ("node_local:\n  path: /tmp\n  source: nowhere\n", "node_local.source", "documents the path"),
    ("node_local:\n  paht: /tmp\n  source: test\n", "node_local.paht", "did you mean 'path'"),
    ("node_local: /tmp\n", "node_local", "a mapping"),
])
def test_bad_node_local_is_refused_naming_file_and_field(small, tmp_path, block, field, words):
    site = tmp_path / "bad.yaml"
    site.write_text("name: bad\nsummary: x\nsources:\n  test: a test\nscheduler: none\n" + block)
    proc = jobscript("--stage", small[1], "--site-file", site, "--nodes", "1", "--ranks-per-node", "1", "--",
                     "true", expect=2)
    assert str(site) in proc.stderr and field in proc.stderr and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_stage_refusals(small, tmp_path):
    env, tar, _ = small
    args = ("--site", "perlmutter", "--account", "m1", "--nodes", "2", "--", "python", "t.py")
    junk = tmp_path / "junk.tar"
    junk.write_bytes(os.urandom(4096))
    err = jobscript("--stage", junk, *args, expect=2).stderr
    assert f"--stage {junk}" in err
    # a manifest whose values would break out of the script's comment lines
    import io
    import tarfile

    hostile = tmp_path / "hostile.tar"
    with tarfile.open(hostile, "w") as t:
        body = json.dumps({"format": "tar", "kind": "venv", "source_prefix": str(env), "unpack": [],
                           "lock_sha256": "0" * 64 + "\ntouch /tmp/pwned"}).encode()
        ti = tarfile.TarInfo(".envtool/pack.json")
        ti.size = len(body)
        t.addfile(ti, io.BytesIO(body))
    err = jobscript("--stage", hostile, *args, expect=2).stderr
    assert "field lock_sha256: expected a sha256" in err
    err = jobscript("--stage", tmp_path / "missing.tar", *args, expect=2).stderr
    assert "no such file" in err
    err = jobscript("--stage", tar, "--module", "x/1", *args, expect=2).stderr
    assert "not --module" in err
    err = jobscript("--stage", tar, "--site", "bede", "--account", "a", "--nodes", "1", "--", "t", expect=2).stderr
    assert "bede.yaml" in err and "node_local" in err
    other = make_venv(tmp_path / "other")
    err = jobscript("--stage", tar, "--prefix", other, *args, expect=2).stderr
    assert "pack it again" in err
    img = tmp_path / "elsewhere.squashfs"
    pack(env, "squashfs", img, "--dest-prefix", "/opt/envtool-elsewhere")
    err = jobscript("--stage", img, *args, expect=2).stderr
    assert "not under site perlmutter's node-local storage /tmp" in err and "--dest-prefix /tmp/smallenv" in err
    err = jobscript("--stage", tar, "--site", "summit", "--retired-ok", "--account", "P", "--nodes", "1", "--", "t",
                    env={"USER": ""}, expect=2).stderr
    assert "node_local.path" in err and "summit.yaml" in err
    proc = run_envtool("validate", "--stage", tar, "--site", "perlmutter", timeout=scaled(120))
    assert proc.returncode == 2 and "add --submit" in proc.stderr


def _with_members(src: Path, out: Path, *members) -> Path:
    """A copy of the tar ``src`` with ``members`` (``(TarInfo, bytes or None)``) appended."""
    import io
    import tarfile

    with tarfile.open(src) as old, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as new:
        for m in old:
            new.addfile(m, old.extractfile(m) if m.isreg() else None)
        for ti, data in members:
            ti.size = len(data or b"")
            new.addfile(ti, io.BytesIO(data) if data is not None else None)
    return out


def test_a_staged_tar_is_unpacked_as_the_job_user_and_special_members_are_refused(small, tmp_path):
    """Issue 43: a job run as root unpacks with ``tar``, which as root makes device nodes and keeps
    the archive's owners and set-user-ID bits. ``jobscript --stage`` refuses a pack with a device
    node or a set-user-ID member (exit 2, naming them), and the job's unpack line, run here by
    root on a pack that slipped past, gives the files to the user running it without the bit."""
    import tarfile

    from envtool.scheduler.stage import _UNPACK

    if os.geteuid() != 0:
        pytest.skip("tar keeps owners and set-user-ID bits only for root")
    env, tar, _ = small
    setuid = tarfile.TarInfo("bin/helper")
    setuid.mode, setuid.uid, setuid.gid = 0o4755, 4321, 4321
    device = tarfile.TarInfo("lib/mem")
    device.type, device.devmajor, device.devminor = tarfile.CHRTYPE, 1, 1
    args = ("--site", "perlmutter", "--account", "m1", "--nodes", "2", "--", "python", "t.py")
    for ti, said in ((setuid, "set-user-ID"), (device, "device node")):
        data = b"#!/bin/sh\n" if ti.isreg() else None
        bad = _with_members(tar, tmp_path / f"bad-{ti.name.replace('/', '-')}.tar", (ti, data))
        err = jobscript("--stage", bad, *args, expect=2).stderr
        assert str(bad) in err and ti.name in err and said in err and "expected" in err, err
    # the job's own unpack line (real bash, real tar) on the pack with the set-user-ID member
    copy = _with_members(tar, tmp_path / "copy.tar", (setuid, b"#!/bin/sh\n"))
    staged = tmp_path / "staged"
    proc = subprocess.run(["bash", "-c", _UNPACK, "envtool-stage", str(copy), str(staged), "0"],
                          capture_output=True, text=True, timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr
    st = os.lstat(staged / "bin" / "helper")
    assert not st.st_mode & 0o6000 and (st.st_uid, st.st_gid) == (0, 0), (oct(st.st_mode), st.st_uid)
    assert (staged / ".envtool" / "pack.json").is_file() and not copy.exists()


def test_a_staged_tar_writing_through_its_own_link_or_hard_linking_out_is_refused(small, tmp_path):
    """Held-out variants of issue 43's staged tars: a member below a symbolic link member
    (``lib/out -> /tmp``, then ``lib/out/pwned``: GNU tar refuses it only in the job, after the
    copy, exit 2 there) and hard links whose targets leave the directory: ``jobscript --stage``
    refuses each (exit 2, naming the member); a hard link inside the pack is fine."""
    import tarfile

    def link(name, target, kind):
        ti = tarfile.TarInfo(name)
        ti.type, ti.linkname = kind, target
        return ti, None

    args = ("--site", "perlmutter", "--account", "m1", "--nodes", "1", "--", "python", "t.py")
    for i, (members, said) in enumerate((
            ((link("lib/out", "/tmp", tarfile.SYMTYPE), (tarfile.TarInfo("lib/out/pwned"), b"x")),
             "'lib/out/pwned' (below 'lib/out', a symbolic link in the pack"),
            ((link("lib/passwd", "/etc/passwd", tarfile.LNKTYPE),), "'lib/passwd'"),
            ((link("lib/passwd", "../../etc/passwd", tarfile.LNKTYPE),), "'lib/passwd'"))):
        bad = _with_members(small[1], tmp_path / f"bad{i}.tar", *members)
        err = jobscript("--stage", bad, *args, expect=2).stderr
        assert str(bad) in err and said in err and "Traceback" not in err, err
    inside = (tarfile.TarInfo("lib/a.txt"), b"a"), link("lib/b.txt", "lib/a.txt", tarfile.LNKTYPE)
    jobscript("--stage", _with_members(small[1], tmp_path / "ok.tar", *inside), *args)


# --- on the multi-node test cluster -------------------------------------------------------------

def envtool_on_head(cluster, *args, timeout=None):
    return cluster.run(sys.executable, "-m", "envtool", *map(str, args), cwd=str(REPO), env={"ENVTOOL_DEBUG": ""},
                       timeout=scaled(300) if timeout is None else timeout)


@pytest.fixture
def tc_site(multinode_cluster, tmp_path) -> Path:
    path = tmp_path / "testcluster.yaml"
    path.write_text(f"""name: testcluster
summary: the multi-node Slurm the tests start (namespaces on one machine)
sources:
  tc: tests/helpers/cluster.py (each node has a private tmpfs /tmp)
platforms: [linux-64]
scheduler: slurm
launcher: "srun -n {{ranks}}"
gpus_per_node: 0
batch:
  cpus_per_node: {multinode_cluster.cpus}
  mpi: pmix
node_local:
  path: /tmp
  source: tc
""")
    return path


class hidden_on_nodes:
    """An empty directory bind-mounted over ``prefix`` in every compute node's mount namespace."""

    def __init__(self, cluster, prefix: Path, empty: Path):
        self.cluster, self.prefix, self.empty = cluster, prefix, empty

    def __enter__(self):
        self.empty.mkdir(exist_ok=True)
        for n in self.cluster.nodes:
            self.cluster.bind_over(n.name, self.empty, self.prefix)
        return self

    def __exit__(self, *exc):
        for n in self.cluster.nodes:
            self.cluster.unbind(n.name, self.prefix)


def node_tmp(cluster) -> dict:
    """What each node's private /tmp holds (envtool's staging leftovers would show here)."""
    return {n.name: sorted(x for x in cluster.run("ls", "-A", "/tmp", node=n.name).stdout.split()
                           if x.startswith("envtool-")) for n in cluster.nodes}


@pytest.mark.multinode
def test_staged_validation_passes_with_the_prefix_hidden_from_the_nodes(multinode_cluster, tc_site, tmp_path):
    env = make_venv(tmp_path / "shared-env")
    want = sha256(env / "conda-lock.yml")
    tar = tmp_path / "env.tar"
    img = tmp_path / "env.squashfs"
    pack(env, "tar", tar)
    pack(env, "squashfs", img, "--dest-prefix", f"/tmp/envtool-sq-{os.getpid()}")
    with hidden_on_nodes(multinode_cluster, env, tmp_path / "empty"):
        for n in multinode_cluster.nodes:
            assert multinode_cluster.run("ls", "-A", env, node=n.name).stdout == ""
        # without staging the nodes cannot see the environment: the pre-flight says so
        plain = envtool_on_head(multinode_cluster, "validate", "--prefix", env, "--site-file", tc_site, "--submit",
                                "--preflight", "--nodes", "2", "--ranks-per-node", "1", "--workdir", tmp_path / "r0",
                                "--json", "--timeout", "120")
        assert plain.returncode == 1, plain.stderr + plain.stdout
        problems = " ".join(json.loads(plain.stdout)["problems"])
        assert f"node1, node2: {env}: bin/python is absent" in problems, problems
        for fmt, f, fstype in (("tar", tar, "tmpfs"), ("squashfs", img, "fuseblk")):
            t0 = time.monotonic()
            proc = envtool_on_head(multinode_cluster, "validate", "--stage", f, "--site-file", tc_site, "--submit",
                                   "--preflight", "--nodes", "2", "--ranks-per-node", "1", "--workdir",
                                   tmp_path / f"r-{fmt}", "--json", "--timeout", "120")
            assert proc.returncode == 0, proc.stderr + proc.stdout + multinode_cluster.logs()
            data = json.loads(proc.stdout)
            assert data["ok"] and data["stage"]["format"] == fmt and data["stage"]["lock_sha256"] == want
            nodes = {r["host"]: r for r in data["preflight"]["nodes"]}
            assert sorted(nodes) == ["node1", "node2"]
            for r in nodes.values():     # the staged copy, on node-local storage, is the source environment
                assert r["prefix"] == "present" and r["python"] == "present", r
                assert r["lock_sha256"] == want and r["fstype"] == fstype, r
            script = (tmp_path / f"r-{fmt}" / "job.sh").read_text()
            assert f"sbcast --force {f} " in script and str(env) not in script
            print(f"staged pre-flight ({fmt}) on 2 nodes: {time.monotonic() - t0:.1f} s")
            assert node_tmp(multinode_cluster) == {"node1": [], "node2": []}
    assert multinode_cluster.wait_queue_empty() == ""


@pytest.mark.multinode
def test_failed_staged_job_leaves_nothing_on_the_nodes(multinode_cluster, tc_site, tmp_path):
    """The staged environment has no Horovod: the job's main step fails; the trap still removes the
    node-local copies on both nodes."""
    env = make_venv(tmp_path / "nohvd")
    tar = tmp_path / "nohvd.tar"
    pack(env, "tar", tar)
    with hidden_on_nodes(multinode_cluster, env, tmp_path / "empty"):
        proc = envtool_on_head(multinode_cluster, "validate", "--stage", tar, "--site-file", tc_site, "--submit",
                               "--nodes", "2", "--ranks-per-node", "1", "--workdir", tmp_path / "run", "--json",
                               "--timeout", "120")
    assert proc.returncode == 1, proc.stderr + proc.stdout
    data = json.loads(proc.stdout)
    assert data["preflight"]["ok"] and not data["ok"]
    assert node_tmp(multinode_cluster) == {"node1": [], "node2": []}
    assert multinode_cluster.wait_queue_empty() == ""


@pytest.mark.multinode
@pytest.mark.slow  # packs and stages the cpu-horovod environment (about 1 GB)
def test_staged_cpu_horovod_validation_across_two_nodes(multinode_cluster, tc_site, cpu_horovod_env, tmp_path):
    """The real cpu-horovod env packed as a tar, staged to both nodes while its prefix is hidden
    from them: 4 ranks, 2 per node, allreduce through Horovod's MPI controller. The nodes' /tmp is a
    2 GB tmpfs, too small for the pack and its unpacked tree at once (the staging says so, below);
    each node gets its own disk directory instead, bind-mounted at one path in its namespace."""
    import tempfile

    prefix = cpu_horovod_env
    tar = tmp_path / "cpu-horovod.tar"
    t0 = time.monotonic()
    data = pack(prefix, "tar", tar)
    packed = time.monotonic() - t0
    assert data["lock_sha256"] == sha256(prefix / "conda-lock.yml")
    # /tmp (2 GB tmpfs) is too small: refused on the nodes, with the room named
    proc = envtool_on_head(multinode_cluster, "validate", "--stage", tar, "--site-file", tc_site, "--submit",
                           "--preflight", "--nodes", "2", "--ranks-per-node", "1", "--workdir", tmp_path / "small",
                           "--json", "--timeout", "600", timeout=700)
    assert proc.returncode == 1, proc.stderr + proc.stdout
    problems = " ".join(json.loads(proc.stdout)["problems"])
    assert "did not finish on every node: envtool stage: node" in problems and "unpacking needs" in problems, problems
    assert node_tmp(multinode_cluster) == {"node1": [], "node2": []}
    local = Path(tempfile.mkdtemp(prefix="envtool-node-local-", dir="/var/tmp"))
    disks = {n.name: tmp_path / f"{n.name}-disk" for n in multinode_cluster.nodes}
    site = tmp_path / "disk-site.yaml"
    site.write_text(tc_site.read_text().replace("  path: /tmp\n", f"  path: {local}\n"))
    try:
        for name, d in disks.items():
            d.mkdir()
            multinode_cluster.bind_over(name, d, local)
        with hidden_on_nodes(multinode_cluster, prefix, tmp_path / "empty"):
            t1 = time.monotonic()
            proc = envtool_on_head(multinode_cluster, "validate", "--stage", tar, "--prefix", prefix, "--site-file",
                                   site, "--submit", "--sweep-max", "0", "--nodes", "2", "--ranks-per-node", "2",
                                   "--workdir", tmp_path / "run", "--json", "--timeout", "1200", timeout=1300)
            took = time.monotonic() - t1
    finally:
        for name in disks:
            multinode_cluster.unbind(name, local)
        local.rmdir()
    assert proc.returncode == 0, proc.stderr + proc.stdout + multinode_cluster.logs()
    res = json.loads(proc.stdout)
    assert res["state"] == "COMPLETED" and res["layout"] == {"nodes": 2, "ranks": 4, "ranks_per_node": 2}
    assert res["stage"]["prefix"].startswith(f"{local}/envtool-cpu-horovod-")
    assert [r["lock_sha256"] for r in res["preflight"]["nodes"]] == [data["lock_sha256"]] * 2
    ranks = res["ranks"]
    assert sorted(r["host"] for r in ranks) == ["node1", "node1", "node2", "node2"]
    for r in ranks:
        assert r["ok"] and r["size"] == 4 and r["checks"]["allreduce_cpu"]["value"] == 2.5, r
    assert {name: list(d.iterdir()) for name, d in disks.items()} == {name: [] for name in disks}
    print(f"pack {packed:.0f} s ({data['size'] / 1e6:.0f} MB); staged validation on 2 nodes {took:.0f} s; "
          f"load {open('/proc/loadavg').read().split()[:3]}")
