"""The bundled catalog: every spec and site loads, carries provenance, resolves and plans."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from envtool.core.errors import SpecError
from envtool.spec import catalog, sites
from envtool.spec.model import MARKS
from envtool.spec.yamlload import load_yaml
from envtool.core.plan import PlanOptions
from envtool.steps.create.planner import make_plan

REPO = Path(__file__).resolve().parent.parent
SPEC_FILES = sorted((REPO / "specs").glob("*.yaml"))
CONCRETE = [p.stem for p in SPEC_FILES if load_yaml(p).get("abstract") is not True]
SITE_NAMES = sorted(p.stem for p in (REPO / "sites").glob("*.yaml"))

#: What issue 3 asks the catalog to ship.
REQUIRED = ["ibm-wml-ce-1.6.1", "ibm-wml-ce-1.6.2", "ibm-wml-ce-1.7.0", "open-ce-0.1", "open-ce-1.0.1",
            "open-ce-1.1.3"] + [f"open-ce-1.{n}" for n in range(2, 12)] + [
    "perlmutter-horovod", "nersc-pytorch-1.13.1", "nersc-tensorflow-2.9.0", "polaris-conda-2022-07-19",
    "polaris-conda-2022-09-08", "polaris-conda-2022-09-08-hvd-nccl", "polaris-conda-2023-01-10", "polaris-conda-2023-10-04", "cpu-horovod"]


@pytest.fixture(autouse=True)
def _bundled_only(monkeypatch):
    monkeypatch.delenv("ENVTOOL_SPEC_PATH", raising=False)
    monkeypatch.delenv("ENVTOOL_SITE_PATH", raising=False)


def test_catalog_ships_every_required_spec_and_site():
    assert set(REQUIRED) <= set(CONCRETE), sorted(set(REQUIRED) - set(CONCRETE))
    assert set(sites.BUNDLED_SITES) <= set(SITE_NAMES)


@pytest.mark.parametrize("name", CONCRETE)
def test_every_pin_has_a_mark_and_a_known_source(name):
    spec = catalog.load_spec(name)
    assert spec.sources, f"{name} lists no sources"
    ids = dict(spec.sources)
    pins = list(spec.pins())
    assert pins, f"{name} pins nothing"
    for field, pin in pins:
        assert pin.mark in MARKS, f"{name}: {field} ({pin.value}) has no provenance mark"
        assert pin.source in ids, f"{name}: {field} ({pin.value}) cites no source of the spec"


def test_provenance_check_catches_a_pin_without_mark(tmp_path, monkeypatch):
    """The check above fails for a spec whose pin lacks a mark (so it can fail at all)."""
    (tmp_path / "nomark.yaml").write_text("sources: {ref: x}\npackages:\n  pip: ['torch==2.13.0']\n")
    monkeypatch.setenv("ENVTOOL_SPEC_PATH", str(tmp_path))
    with pytest.raises(AssertionError, match="no provenance mark"):
        test_every_pin_has_a_mark_and_a_known_source("nomark")


@pytest.mark.slow  # 5-11 s a site with two workers: the full suite only (tests/README.md, fast tier)
@pytest.mark.parametrize("site", SITE_NAMES)
def test_every_site_with_every_spec_resolves_and_plans(site, tmp_path):
    sf = sites.load_site(sites.find(site))
    planned = 0
    for name in CONCRETE:
        try:
            spec = sites.resolve(name, site=site)
        except SpecError as exc:
            if "gpu.vendor" in str(exc):
                # A GPU build the site's GPUs cannot take (CUDA settings on AMD's, GPU operations on
                # Intel's: envtool.core.gpu_vendors), refused by the spec's rules.
                assert exc.field.startswith("horovod.") and catalog.load_spec(name).horovod.uses_gpu, str(exc)
                continue
            # The other refusal allowed: the site runs none of the spec's platforms.
            assert exc.path == sf.path and exc.field == "platforms", str(exc)
            assert not set(catalog.load_spec(name).platforms) & set(sf.platforms)
            continue
        assert spec.site.name == sf.name and set(spec.platforms) <= set(sf.platforms)
        plan = make_plan(spec, PlanOptions(prefix=tmp_path / name, site=site))
        ids = [s.id for s in plan.steps]
        assert ("load-modules" in ids) == bool(spec.site.modules)
        assert "validate" in ids
        if spec.horovod.install == "pip-build":
            assert "build-horovod" in ids
        planned += 1
    # Alps's GH200 nodes are linux-aarch64, which no spec of the catalog runs yet.
    assert planned >= 1 or not any(set(catalog.load_spec(n).platforms) & set(sf.platforms) for n in CONCRETE)
    for mapping in sf.stacks:
        assert mapping.mark in MARKS, f"{site}: stacks.{mapping.key} has no provenance mark"


def test_summit_overlay_for_open_ce_1_1_3():
    spec = sites.resolve("open-ce-1.1.3", site="summit")
    assert spec.site.modules == ("open-ce/1.1.3-py38-0",)
    assert spec.site.base_env.endswith("open-ce-1.1.3-py38-0")
    assert spec.site.launcher == "jsrun -r1 -g6 -a6 -c42 -bpacked:7" and spec.site.scheduler == "lsf"
    assert spec.platforms == ("linux-ppc64le",)
    assert spec.python.value == "3.8" and spec.python.source == "olcf-opence-modules"
    assert "https://ftp.osuosl.org/pub/open-ce/1.1.3/" in spec.channels


def test_wml_ce_1_6_x_ddl_builds():
    for name, commit, version in (("ibm-wml-ce-1.6.1", "9f87459", "0.16.4"), ("ibm-wml-ce-1.6.2", "bbf09d79", "0.18.2")):
        spec = catalog.load_spec(name)
        h = spec.horovod
        assert h.install == "pip-build" and commit in h.source and h.version.value == version
        assert dict(h.gpu_ops) == {"allreduce": "ddl"} and h.cuda_home == "${CONDA_PREFIX}"
        assert dict(spec.env)["IBM_POWERAI_LICENSE_ACCEPT"] == "yes" and "linux-ppc64le" in spec.platforms
    assert catalog.load_spec("ibm-wml-ce-1.6.1").expect.check_build is None
    # OLCF's recipe installs the compiler for the Horovod build and removes it: a build-only package
    wml162 = catalog.load_spec("ibm-wml-ce-1.6.2")
    assert [p.value for p in wml162.horovod.build_packages] == ["gxx_linux-ppc64le 7.3.0.*"]
    assert not any(p.value.startswith("gxx") for p in wml162.packages.conda)
    assert catalog.load_spec("ibm-wml-ce-1.7.0").horovod.install == "conda"


def test_wml_ce_1_6_1_follows_the_primary_source_not_seed_000():
    spec = catalog.load_spec("ibm-wml-ce-1.6.1")
    pins = " ".join(p.value for _, p in spec.pins())
    assert "tensorflow-gpu 1.14" in pins and "pytorch 1.1.0" in pins and "ddl 1.4.0" in pins
    assert "seed 000" in spec.notes.lower() or "olcf" in spec.notes.lower()


def test_bede_glob_mapping_and_site_env():
    spec = sites.resolve("ibm-wml-ce-1.6.2", site="bede")
    assert spec.site.base_env == "/opt/software/apps/anaconda3/envs/wmlce_env"
    assert spec.site.launcher == "bede-ddlrun" and spec.site.gpus_per_node == 4
    assert dict(spec.site.env)["OMP_NUM_THREADS"] == "1" and spec.site.modules == ("slurm/dflt",)


def test_site_path_and_site_file(tmp_path, monkeypatch):
    (tmp_path / "mycluster.yaml").write_text(textwrap.dedent("""\
        name: mycluster
        sources: {wiki: https://wiki.example.org/dl}
        platforms: [linux-64]
        scheduler: slurm
        launcher: "srun -n {ranks}"
        gpus_per_node: 8
        modules: [cuda/12.2]
        stacks:
          open-ce-1.1*:
            modules: [open-ce/1.1]
            base_env: /opt/envs/opence
            mark: I
            source: wiki
            overrides:
              python: {value: "3.7", mark: I, source: wiki}
        """))
    monkeypatch.setenv("ENVTOOL_SITE_PATH", str(tmp_path))
    spec = sites.resolve("open-ce-1.1.3", site="mycluster")
    assert spec.site.modules == ("cuda/12.2", "open-ce/1.1") and spec.site.base_env == "/opt/envs/opence"
    assert spec.python.value == "3.7" and spec.platforms == ("linux-64",) and spec.site.gpus_per_node == 8
    same = sites.resolve("open-ce-1.1.3", site_file=str(tmp_path / "mycluster.yaml"))
    assert same == spec


@pytest.mark.parametrize("text,field", [
    ("name: x\nstack: {}\n", "stack"),
    ("name: x\nstacks: {cpu-horovod: {mark: Q}}\n", "stacks.cpu-horovod.mark"),
    ("name: x\nstacks: {cpu-horovod: {source: nowhere}}\n", "stacks.cpu-horovod.source"),
    ("name: x\nplatforms: [linux-32]\n", "platforms"),
    ("name: x\nstacks: {cpu-horovod: {overrides: {horovod: {instal: conda}}}}\n", "horovod.instal"),
])
def test_bad_site_files_name_file_and_field(tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        sites.resolve("cpu-horovod", site_file=str(path))
    assert info.value.path == str(path) and info.value.field == field


def test_override_that_breaks_a_rule_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nstacks:\n  cpu-horovod:\n    overrides:\n      horovod: {gpu_operations: nccl}\n")
    with pytest.raises(SpecError) as info:
        sites.resolve("cpu-horovod", site_file=str(path))
    assert info.value.field == "horovod.gpu_operations"


def test_polaris_site_libraries_per_module_with_and_without_the_site():
    """cuDNN and NCCL of each Polaris conda module, as its modulefile names them
    (argonne-lcf/conda_install_scripts modulefiles, site.libraries), kept when the site is applied."""
    want = {"polaris-conda-2022-07-19": ("8.3.3.40", "2.12.10"), "polaris-conda-2022-09-08": ("8.4.1.50", "2.14.3"),
            "polaris-conda-2022-09-08-hvd-nccl": ("8.4.1.50", "2.14.3"),
            "polaris-conda-2023-01-10": ("8.6.0.163", "2.16.2"), "polaris-conda-2023-10-04": ("8.6.0.163", "2.18.3")}
    for name, (cudnn, nccl) in want.items():
        for spec in (catalog.load_spec(name), sites.resolve(name, site="polaris")):
            libs = {k: (p.value, p.mark) for k, p in spec.site.libraries}
            assert libs == {"cudnn": (cudnn, "V"), "nccl": (nccl, "V")}, (name, libs)
            assert "site.libraries.nccl" in dict(spec.pins())
            # the child's site section merges with the parent's key by key: site.name stays polaris
            assert spec.site.name == "polaris"
    # another site's resolution does not claim Polaris's libraries
    assert sites.resolve("polaris-conda-2023-10-04", site="local").site.libraries == ()

