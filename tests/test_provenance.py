"""The catalog's provenance: every source entry resolves, every V pin cites a primary source.

Offline: repository citations are checked against tests/data/source_index.json (written by
scripts/source_index.py from the repositories at the cited refs); seed citations against the
same index and, when ../shared/seeds is beside the repository, against the seeds themselves.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from envtool.spec import catalog, provenance, sites
from envtool.spec.model import Pin
from envtool.spec.yamlload import load_yaml

REPO = Path(__file__).resolve().parent.parent
INDEX = json.loads((REPO / "tests" / "data" / "source_index.json").read_text())
SEEDS = REPO.parent / "shared" / "seeds"
SPEC_FILES = sorted((REPO / "specs").glob("*.yaml"))
CONCRETE = [p.stem for p in SPEC_FILES if load_yaml(p).get("abstract") is not True]
SITE_FILES = sorted((REPO / "sites").glob("*.yaml"))


@pytest.fixture(autouse=True)
def _bundled_only(monkeypatch):
    monkeypatch.delenv("ENVTOOL_SPEC_PATH", raising=False)
    monkeypatch.delenv("ENVTOOL_SITE_PATH", raising=False)


def all_entries():
    """``(file, id, text)`` for every ``sources`` entry of every bundled spec and site file."""
    for f in SPEC_FILES + SITE_FILES:
        for sid, text in (load_yaml(f).get("sources") or {}).items():
            yield f.name, str(sid), str(text)


def check_entry(text: str) -> str:
    """'' when ``text`` resolves (see the module docstring), else why not."""
    ref = provenance.parse(text)
    if ref is None:
        return "neither owner/repo@ref:path, a URL, a seed line, docs/… nor shared/reference/…"
    if ref.kind == "repo":
        entry = INDEX["repo_files"].get(f"{ref.repo}@{ref.ref}:{ref.path}")
        if entry is None:
            return "not in tests/data/source_index.json (run scripts/source_index.py)"
        if ref.lines and not 1 <= ref.lines[0] <= ref.lines[1] <= entry["lines"]:
            return f"lines {ref.lines} outside the file's {entry['lines']} lines"
    elif ref.kind == "seed":
        entry = INDEX["seeds"].get(ref.path)
        if entry is None:
            return f"seed {ref.path} not in the index"
        if ref.lines is None:
            return "a seed is cited without its line"
        if not 1 <= ref.lines[0] <= ref.lines[1] <= entry["lines"]:
            return f"lines {ref.lines} outside the seed's {entry['lines']} lines"
    elif ref.kind == "project":
        f = REPO / ref.path
        if not f.is_file():
            return f"no file {ref.path} in the repository"
        if ref.lines and ref.lines[1] > len(f.read_text().splitlines()):
            return f"lines {ref.lines} outside {ref.path}"
    elif ref.kind == "secondary":
        if not ref.path.startswith("shared/reference/"):
            return "a secondary source lives under shared/reference/"
    return ""


def test_every_source_entry_resolves():
    bad = [f"{f}: {sid}: {text!r}: {why}" for f, sid, text in all_entries() if (why := check_entry(text))]
    assert not bad, "\n".join(bad)


def test_the_entry_check_fails_on_bad_entries():
    assert check_entry("CUDA 13.0 release notes")
    assert check_entry("open-ce/open-ce@open-ce-v9.9.9:README.md#L1")  # never read at that tag
    assert check_entry("open-ce/open-ce@open-ce-v1.7.0:README.md#L99999")
    assert check_entry("seed 000_21419d89f8c7e024:99999")
    assert check_entry("seed 000_21419d89f8c7e024")
    assert check_entry("docs/no-such-file.md")
    assert not check_entry("open-ce/open-ce@open-ce-v1.7.0:README.md#L27 (Python)")


@pytest.mark.parametrize("name", CONCRETE)
def test_v_pins_cite_primary_sources(name):
    spec = catalog.load_spec(name)
    assert provenance.problems(name, spec.sources, spec.pins()) == []


@pytest.mark.parametrize("site_file", SITE_FILES, ids=lambda p: p.stem)
def test_site_mappings_and_their_overrides_cite_primary_sources(site_file):
    sf = sites.load_site(site_file)
    pins = [(f"stacks.{s.key}", Pin(value=" ".join(s.modules), mark=s.mark, source=s.source)) for s in sf.stacks]
    assert provenance.problems(sf.name, sf.sources, pins) == []
    for s in sf.stacks:
        if s.spec is None and any(c in s.key for c in "*?["):
            continue
        spec = sites.resolve(s.key, site_file=str(site_file))
        assert provenance.problems(f"{sf.name}:{s.key}", spec.sources, spec.pins()) == []


def test_problems_finds_a_v_pin_citing_a_secondary_source_or_none():
    sources = (("stacks", "shared/reference/stacks.md (Open-CE)"),
               ("rd", "open-ce/open-ce@open-ce-v1.7.0:README.md#L27"),
               ("bad", "my notes"), ("seed", "seed 000_21419d89f8c7e024"))
    pins = [("python", Pin("3.9", "V", "stacks")), ("cuda", Pin("11.4", "V", "nope")),
            ("x", Pin("1", "V2", "stacks")), ("y", Pin("2", "V", "rd"))]
    out = provenance.problems("t", sources, pins)
    assert len(out) == 4, out
    assert any("python (3.9) is marked V but cites 'stacks', a secondary source" in p for p in out)
    assert any("cuda (11.4) is marked V but cites no source" in p for p in out)
    assert any("'bad'" in p for p in out) and any("without a line" in p for p in out)


def test_parse_forms():
    r = provenance.parse("open-ce/horovod-feedstock@open-ce-v1.4.0:recipe/build.sh#L39 (HOROVOD_NCCL_HOME)")
    assert (r.kind, r.repo, r.ref, r.path, r.lines, r.description) == (
        "repo", "open-ce/horovod-feedstock", "open-ce-v1.4.0", "recipe/build.sh", (39, 39), "HOROVOD_NCCL_HOME")
    assert r.where() == "https://github.com/open-ce/horovod-feedstock/blob/open-ce-v1.4.0/recipe/build.sh#L39"
    s = provenance.parse("seed 001_3e99217d705b0dac:94-95 (bede-ddlrun)")
    assert (s.kind, s.path, s.lines, s.primary) == ("seed", "001_3e99217d705b0dac.txt", (94, 95), True)
    assert provenance.parse("https://pypi.org/project/horovod/0.28.1/").kind == "url"
    sec = provenance.parse("shared/reference/stacks.md (Open-CE)")
    assert sec.kind == "secondary" and not sec.primary
    assert provenance.parse("CUDA 13.0 release notes") is None


@pytest.mark.skipif(not SEEDS.is_dir(), reason="../shared/seeds is not beside the repository")
def test_seed_index_matches_the_seeds():
    for name, entry in INDEX["seeds"].items():
        data = (SEEDS / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name
        assert len(data.splitlines()) == entry["lines"], name


def _envtool(*args):
    return subprocess.run([sys.executable, "-m", "envtool", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_show_sources_lists_where_each_pin_can_be_read():
    proc = _envtool("show", "open-ce-1.7", "--sources")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    python = next(line for line in lines if line.strip().startswith("python "))
    assert "3.9" in python and "[V]" in python
    assert "https://github.com/open-ce/open-ce/blob/open-ce-v1.7.0/README.md#L27" in python
    spec = catalog.load_spec("open-ce-1.7")
    assert len(lines) == 1 + len(list(spec.pins()))

    proc = _envtool("show", "ibm-wml-ce-1.7.0", "--site", "bede", "--sources", "--json")
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    kinds = {p["field"]: (p["mark"], p["source_kind"]) for p in view["pins"]}
    assert kinds["horovod.version"] == ("V", "seed")
    assert all(kind not in ("secondary", None) for mark, kind in kinds.values() if mark == "V")
    assert view["site"]["where"] == "shared/seeds/001_3e99217d705b0dac.txt line 141"
    assert "RHEL 8" in view["site"]["warning"]


def test_summit_variants_resolve_under_their_own_name():
    proc = _envtool("show", "open-ce-1.1.3-py36", "--site", "summit", "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["name"] == "open-ce-1.1.3-py36"
    assert d["site"]["modules"] == ["open-ce/1.1.3-py36-0"]
    assert next(p for p in d["pins"] if p["field"] == "python")["value"] == "3.6"
    assert d["site"]["stack"]["spec"] == "open-ce-1.1.3"
    # a variant is a site's name: without that site it is no spec
    proc = _envtool("show", "open-ce-1.1.3-py36")
    assert proc.returncode == 2 and "open-ce-1.1.3" in proc.stderr


def test_a_variant_of_an_unknown_spec_names_the_site_file(tmp_path):
    site = tmp_path / "x.yaml"
    site.write_text("name: x\nplatforms: [linux-64]\nstacks:\n  foo:\n    spec: no-such-spec\n    modules: [a/1]\n")
    proc = _envtool("show", "foo", "--site-file", str(site))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{site}:5: stacks.foo.spec: expected the name of a known spec, got 'no-such-spec'" in proc.stderr
