"""``envtool specs``, ``show``, ``diff-specs`` and ``plan`` with sites, through the real CLI."""
from __future__ import annotations

import json
import textwrap

import pytest

from conftest import run_envtool
from envtool.spec.matrix import COLUMNS
from helpers.speed import scaled

BASE_ENV = {"ENVTOOL_SPEC_PATH": "", "ENVTOOL_SITE_PATH": ""}


def envtool(*args, env=None):
    return run_envtool(*args, env={**BASE_ENV, **(env or {})}, timeout=scaled(120))


def ok(*args, env=None):
    proc = envtool(*args, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def spec_rows(*args):
    """The rows of ``envtool specs --json ARGS`` (under ``specs`` of the one JSON envelope)."""
    data = json.loads(ok("specs", "--json", *args))
    assert data["ok"] is True and data["exit"] == 0 and data["error"] is None
    return data["specs"]


def test_specs_table_and_json_carry_the_same_rows():
    table = ok("specs")
    rows = spec_rows()
    names = [r["name"] for r in rows]
    assert "open-ce-base" not in names and "ibm-wml-ce-base" not in names  # abstract parents
    for name in ("ibm-wml-ce-1.6.1", "open-ce-1.11", "polaris-conda-2023-10-04", "nersc-tensorflow-2.9.0",
                 "perlmutter-horovod", "cpu-horovod", "open-ce-0.1"):
        assert name in names and name in table
    header = table.splitlines()[0].split()
    assert len(header) == len(COLUMNS) and all(set(COLUMNS) <= set(r) for r in rows)
    assert len([l for l in table.splitlines() if not l.startswith("note: ")]) == len(rows) + 1  # + retired-site notes
    by_name = {r["name"]: r for r in rows}
    assert by_name["ibm-wml-ce-1.6.2"]["backend"] == "DDL" and by_name["ibm-wml-ce-1.6.2"]["horovod"] == "0.18.2"
    assert by_name["open-ce-1.1.3"]["tensorflow"] == "2.4.1" and by_name["open-ce-1.1.3"]["backend"] == "NCCL"
    assert by_name["cpu-horovod"]["backend"] == "Gloo+MPI (CPU)"


def test_specs_filters_and_sort():
    rows = spec_rows("--distribution", "open-ce", "--has", "horovod>=0.21",
                     "--sort", "horovod")
    assert rows and all(r["distribution"] == "open-ce" for r in rows)
    assert "open-ce-1.0.1" not in [r["name"] for r in rows] and "open-ce-1.1.3" in [r["name"] for r in rows]
    from packaging.version import Version

    versions = [Version(r["horovod"]) for r in rows]
    assert versions == sorted(versions)
    torch1 = spec_rows("--has", "torch<2", "--has", "cuda>=11")
    assert {r["name"] for r in torch1} >= {"open-ce-1.8", "polaris-conda-2022-07-19"}
    assert "open-ce-1.9" not in {r["name"] for r in torch1} and "open-ce-1.0.1" not in {r["name"] for r in torch1}


def test_specs_for_a_site_leaves_out_what_it_cannot_run():
    names = [r["name"] for r in spec_rows("--site", "summit")]
    assert "open-ce-1.1.3" in names and "cpu-horovod" not in names and "polaris-conda-2022-07-19" not in names


@pytest.mark.parametrize("args,words", [(("--sort", "colour"), "--sort"), (("--has", "horovod>>1"), "--has"),
                                        (("--has", "numpy>1"), "--has")])
def test_specs_bad_options_exit_2(args, words):
    proc = envtool("specs", *args)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


def test_show_resolved_with_provenance():
    text = ok("show", "open-ce-1.1.3", "--site", "summit")
    assert "open-ce/1.1.3-py38-0" in text and "jsrun -r1 -g6 -a6 -c42 -bpacked:7" in text
    d = json.loads(ok("show", "open-ce-1.1.3", "--site", "summit", "--json"))
    pins = {p["field"]: p for p in d["pins"]}
    assert pins["python"]["value"] == "3.8" and pins["python"]["defined_in"].endswith("sites/summit.yaml")
    assert pins["cuda"]["defined_in"].endswith("specs/open-ce-1.1.3.yaml") and pins["cuda"]["mark"] == "V"
    assert all(p["mark"] in ("V", "V2", "I") and p["source_ref"] for p in d["pins"])
    assert d["extends"][0].endswith("open-ce-base.yaml") and d["site"]["stack"]["key"] == "open-ce-1.1.3"
    assert d["horovod"]["build_env"]["HOROVOD_GPU_ALLREDUCE"] == "NCCL"


def test_diff_specs_open_ce_upgrade():
    d = json.loads(ok("diff-specs", "open-ce-1.1.3", "open-ce-1.2", "--json"))
    changes = {c["field"]: c for c in d["changes"]}
    assert changes["packages.conda.tensorflow-base"]["b"] == "tensorflow-base >=2.4.1,<2.4.5"
    assert changes["channels"]["change"] == "changed" and "packages.conda.pytorch-base" not in changes
    wml = ok("diff-specs", "ibm-wml-ce-1.6.2", "ibm-wml-ce-1.7.0")
    assert "horovod.build_env.HOROVOD_GPU_ALLREDUCE: DDL -> NCCL" in wml and "+ packages.conda.horovod" in wml
    assert json.loads(ok("diff-specs", "open-ce-1.1.3", "open-ce-1.1.3", "--json"))["changes"] == []


def test_plan_wml_ce_1_6_2_on_summit_builds_ddl_horovod():
    text = ok("plan", "ibm-wml-ce-1.6.2", "--site", "summit", "--platform-mismatch-ok")
    assert "module load ibm-wml-ce/1.6.2-5" in text
    assert "git+https://github.com/horovod/horovod.git@bbf09d79" in text and "HOROVOD_GPU_ALLREDUCE=DDL" in text
    assert "HOROVOD_CUDA_HOME='${CONDA_PREFIX}'" in text or "HOROVOD_CUDA_HOME=${CONDA_PREFIX}" in text
    assert "linux-ppc64le" in text


def test_plan_perlmutter_flags_unchanged():
    text = ok("plan", "perlmutter-horovod", "--site", "perlmutter")
    assert ("HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_LINK=SHARED HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_PYTORCH=1 "
            "HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MXNET=1") in text


@pytest.fixture
def summit_here(tmp_path):
    """Summit's site file with the open-ce-1.1.3 base env pointed at a real (empty) conda env here."""
    from pathlib import Path

    base = tmp_path / "open-ce-1.1.3-py38-0"
    (base / "conda-meta").mkdir(parents=True)
    (base / "conda-meta" / "history").write_text("")
    text = (Path(__file__).resolve().parent.parent / "sites" / "summit.yaml").read_text()
    text = text.replace("/sw/summit/open-ce/anaconda-base/envs/open-ce-1.1.3-py38-0", str(base))
    site = tmp_path / "sites"
    site.mkdir()
    (site / "summit.yaml").write_text(text)
    return {"ENVTOOL_SITE_PATH": str(site), "base": str(base)}


def test_plan_clone_names_module_and_base_env(summit_here):
    text = ok("plan", "open-ce-1.1.3", "--site", "summit", "--platform-mismatch-ok", "--clone", env=summit_here)
    assert "module load open-ce/1.1.3-py38-0" in text and summit_here["base"] in text


def test_plan_clone_names_the_open_ce_channel(summit_here):
    text = ok("plan", "open-ce-1.1.3", "--site", "summit", "--platform-mismatch-ok", "--clone", env=summit_here)
    assert "https://ftp.osuosl.org/pub/open-ce/1.1.3/" in text


def test_plan_clone_on_summit_from_elsewhere():
    text = ok("plan", "open-ce-1.1.3", "--site", "summit", "--platform-mismatch-ok", "--clone")
    assert "/sw/summit/open-ce/anaconda-base/envs/open-ce-1.1.3-py38-0" in text


BAD = {
    "unknown-key": ("horovod:\n  versoin: 0.28.1\n", "horovod.versoin", "did you mean 'version'"),
    "bad-version": ("packages:\n  conda: [{spec: 'pytorch 1.7..1', mark: V, source: r}]\n", "packages.conda[0]",
                    "match spec"),
    "bad-backend": ("cuda: {value: '11.0', mark: V, source: r}\nhorovod:\n  version: {value: '0.19.5', mark: V, "
                    "source: r}\n  frameworks: [pytorch]\n  gpu_operations: nccl\n", "horovod.gpu_operations",
                    "0.20.0"),
    "cycle": ("extends: cycle\n", "extends", "cycle"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
@pytest.mark.parametrize("command", ["plan", "show"])
def test_bad_specs_exit_2_naming_file_and_field(tmp_path, kind, command):
    body, field, words = BAD[kind]
    path = tmp_path / f"{kind}.yaml"
    path.write_text(textwrap.dedent("sources: {r: ref}\n" + body))
    proc = envtool(command, str(path), env={"ENVTOOL_SPEC_PATH": str(tmp_path)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert str(path) in proc.stderr and f"{field}:" in proc.stderr and words in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_unknown_site_exit_2():
    proc = envtool("show", "open-ce-1.1.3", "--site", "sumit")
    assert proc.returncode == 2 and "did you mean summit" in proc.stderr
    proc = envtool("plan", "cpu-horovod", "--site", "summit")
    assert proc.returncode == 2 and "sites/summit.yaml" in proc.stderr and "platforms" in proc.stderr


def test_specs_names_a_broken_user_spec(tmp_path):
    (tmp_path / "mine.yaml").write_text("sources: {r: x}\nplatforms: [linux-64]\nhorovod: {frameworks: [jax]}\n")
    proc = envtool("specs", env={"ENVTOOL_SPEC_PATH": str(tmp_path)})
    assert proc.returncode == 2 and "mine.yaml" in proc.stderr and "horovod.frameworks" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_plan_applies_the_spec_env_to_install_steps():
    # WML-CE's post-link scripts need IBM_POWERAI_LICENSE_ACCEPT=yes (specs/ibm-wml-ce-base.yaml)
    plan = json.loads(ok("plan", "ibm-wml-ce-1.7.0", "--json"))
    steps = {s["id"]: s for s in plan["steps"]}
    assert steps["conda-create"]["env"].get("IBM_POWERAI_LICENSE_ACCEPT") == "yes"
    assert "IBM_POWERAI_LICENSE_ACCEPT" not in steps["validate"]["env"]


# --- status (issue 16) -------------------------------------------------------------------------------

def test_specs_show_status_wml_ce_archived():
    rows = {r["name"]: r for r in spec_rows()}
    for name in ("ibm-wml-ce-1.6.1", "ibm-wml-ce-1.6.2", "ibm-wml-ce-1.7.0"):
        assert rows[name]["status"] == "archived"
    assert rows["open-ce-1.11"]["status"] == "active" and rows["cpu-horovod"]["status"] == "active"
    table = ok("specs").splitlines()
    assert table[0].split()[-1] == "STATUS"
    line = next(line for line in table if line.startswith("ibm-wml-ce-1.7.0 "))
    assert line.split()[-1] == "archived"
    from envtool.spec.catalog import load_spec

    status = load_spec("ibm-wml-ce-1.7.0").status
    assert (status.since, status.source) == ("2020-11-10", "bede-archived")


@pytest.mark.parametrize("body,field,expected", [
    ("status: retired\n", "status", "one of active, deprecated, archived"),
    ("status: {value: archived, since: 11/10/2020}\n", "status.since", "a date YYYY-MM-DD"),
    ("status: {value: archived, source: nowhere}\n", "status.source", "the id of an entry of sources"),
    ("status: {value: archived, when: 2020}\n", "status.when", "unknown key"),
])
def test_status_bad_input_exit_2(tmp_path, body, field, expected):
    (tmp_path / "s.yaml").write_text("name: s\nsources: {doc: a document}\n" + body)
    proc = envtool("show", "s", env={"ENVTOOL_SPEC_PATH": str(tmp_path)})
    assert proc.returncode == 2 and field in proc.stderr and expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_verbose_and_quiet_before_or_after_the_subcommand():
    from envtool.cli.main import build_parser

    parser = build_parser()
    for argv in (["-v", "plan", "cpu-horovod"], ["plan", "cpu-horovod", "-v"], ["plan", "--verbose", "cpu-horovod"]):
        args = parser.parse_args(argv)
        assert args.verbose is True and args.quiet is False, argv
    for argv in (["-q", "create", "cpu-horovod"], ["create", "cpu-horovod", "-q"]):
        assert parser.parse_args(argv).quiet is True, argv
    args = parser.parse_args(["specs"])
    assert args.verbose is False and args.quiet is False
    proc = run_envtool("lock", "--check", "cpu-horovod", "-q")
    assert proc.returncode == 0, proc.stderr
