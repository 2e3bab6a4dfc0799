"""The catalog's provenance: every source entry resolves, every V pin cites a primary source.

Offline: repository citations are checked against tests/data/source_index.json (written by
scripts/source_index.py from the repositories at the cited refs). Every citation is one a user
can open: a public repository file, a public page, or a file of this repository.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from envtool.spec import catalog, provenance, sites
from envtool.spec.model import Pin
from envtool.spec.yamlload import load_yaml
from helpers.speed import scaled

REPO = Path(__file__).resolve().parent.parent
INDEX = json.loads((REPO / "tests" / "data" / "source_index.json").read_text())
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
        return "neither owner/repo@ref:path, a URL, docs/… nor docs/reference/…"
    if ref.kind == "repo":
        entry = INDEX["repo_files"].get(f"{ref.repo}@{ref.ref}:{ref.path}")
        if entry is None:
            return "not in tests/data/source_index.json (run scripts/source_index.py)"
        if ref.lines and not 1 <= ref.lines[0] <= ref.lines[1] <= entry["lines"]:
            return f"lines {ref.lines} outside the file's {entry['lines']} lines"
    elif ref.kind == "project":
        f = REPO / ref.path
        if not f.is_file():
            return f"no file {ref.path} in the repository"
        if ref.lines and ref.lines[1] > len(f.read_text().splitlines()):
            return f"lines {ref.lines} outside {ref.path}"
    elif ref.kind == "secondary":
        if not (REPO / ref.path).is_file():
            return f"no file {ref.path} in the repository"
    return ""


def test_every_source_entry_resolves():
    bad = [f"{f}: {sid}: {text!r}: {why}" for f, sid, text in all_entries() if (why := check_entry(text))]
    assert not bad, "\n".join(bad)


def test_the_entry_check_fails_on_bad_entries():
    assert check_entry("CUDA 13.0 release notes")
    assert check_entry("open-ce/open-ce@open-ce-v9.9.9:README.md#L1")  # never read at that tag
    assert check_entry("open-ce/open-ce@open-ce-v1.7.0:README.md#L99999")
    assert check_entry("seed 000_21419d89f8c7e024:12")   # an internal document: no user can open it
    assert check_entry("shared/reference/stacks.md (Open-CE)")
    assert check_entry("docs/reference/no-such.md")
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
    sources = (("stacks", "docs/reference/stacks.md (Open-CE)"),
               ("rd", "open-ce/open-ce@open-ce-v1.7.0:README.md#L27"),
               ("bad", "my notes"), ("seed", "seed 000_21419d89f8c7e024:12"))
    pins = [("python", Pin("3.9", "V", "stacks")), ("cuda", Pin("11.4", "V", "nope")),
            ("x", Pin("1", "V2", "stacks")), ("y", Pin("2", "V", "rd"))]
    out = provenance.problems("t", sources, pins)
    assert len(out) == 4, out
    assert any("python (3.9) is marked V but cites 'stacks', a secondary source" in p for p in out)
    assert any("cuda (11.4) is marked V but cites no source" in p for p in out)
    assert any("'bad'" in p for p in out) and any("'seed'" in p for p in out)


def test_parse_forms():
    r = provenance.parse("open-ce/horovod-feedstock@open-ce-v1.4.0:recipe/build.sh#L39 (HOROVOD_NCCL_HOME)")
    assert (r.kind, r.repo, r.ref, r.path, r.lines, r.description) == (
        "repo", "open-ce/horovod-feedstock", "open-ce-v1.4.0", "recipe/build.sh", (39, 39), "HOROVOD_NCCL_HOME")
    assert r.where() == "https://github.com/open-ce/horovod-feedstock/blob/open-ce-v1.4.0/recipe/build.sh#L39"
    assert provenance.parse("seed 001_3e99217d705b0dac:94-95 (bede-ddlrun)") is None
    assert provenance.parse("https://pypi.org/project/horovod/0.28.1/").kind == "url"
    sec = provenance.parse("docs/reference/stacks.md (Open-CE)")
    assert sec.kind == "secondary" and not sec.primary
    assert provenance.parse("CUDA 13.0 release notes") is None


def test_no_user_visible_text_names_an_internal_document():
    """Specs, site files, the package's messages and docstrings, the README and the docs cite what
    a user can open: never the team's seed files or shared/ notes."""
    bad = re.compile(r"\bseed[ -]?`*0\d\d|\bseeds?\b.*\b0\d\d_|shared/(?:seeds|reference)|\bthe seeds?\b", re.I)
    files = [*SPEC_FILES, *SITE_FILES, *sorted((REPO / "envtool").rglob("*.py")),
             *sorted((REPO / "envtool").rglob("*.sh")), REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    hits = [f"{f.relative_to(REPO)}:{n}: {line.strip()}" for f in files
            for n, line in enumerate(f.read_text().splitlines(), 1) if bad.search(line)]
    assert not hits, "\n".join(hits)


def _envtool(*args):
    return subprocess.run([sys.executable, "-m", "envtool", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=scaled(120))


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
    assert kinds["horovod.version"] == ("V", "repo")
    assert all(kind not in ("secondary", None) for mark, kind in kinds.values() if mark == "V")
    assert view["site"]["where"] == ("https://github.com/N8-CIR-Bede/documentation/blob/338157492d38/"
                                     "software/applications/wmlce.rst#L141")
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


# --- What the cited lines say (issue 30) ---------------------------------------------------------

_VERSION_RE = re.compile(r"\d+(?:\.\d+)+")


def cited_text(text: str) -> Optional[str]:
    """The text a source entry cites, from the index: its cited lines (a repository file,
    ``None`` when no line is named), a project record's lines, or a URL's own address (a versioned
    page names its version in the address); None for a secondary or unparsable source."""
    ref = provenance.parse(text)
    if ref is None or ref.kind == "secondary":
        return None
    if ref.kind == "url":
        return ref.url
    if ref.kind == "project":
        lines = (REPO / ref.path).read_text().splitlines()
        return "\n".join(lines[ref.lines[0] - 1:ref.lines[1]] if ref.lines else lines)
    if ref.lines is None:
        return None
    entry = INDEX["repo_files"].get(f"{ref.repo}@{ref.ref}:{ref.path}")
    if entry is None:
        return None
    return "\n".join(entry["cited"].get(str(n), "") for n in range(ref.lines[0], ref.lines[1] + 1))


states = provenance.states


def pin_version(pin) -> Optional[str]:
    """The one version a pin names, or a range's lower bound (``>=0.21.0,<0.22.2`` → ``0.21.0``)."""
    if pin.version:
        return pin.version
    m = _VERSION_RE.search(pin.value)
    return m.group(0) if m else None


#: Pins whose version is not on their cited line, each with the reason. Empty: every V and V2 pin
#: that cites a line (or a versioned URL) is stated there.
NOT_ON_THE_CITED_LINE: Dict[Tuple[str, str], str] = {}


def pin_line_problems(name: str, sources, pins) -> List[str]:
    """One message per V or V2 pin whose version is not on the line it cites (see :func:`states`),
    or whose range's upper bound (``<X``) is not backed by the source the pin's note names
    (``upper bound: ID``, whose cited line must state the version just below ``X``)."""
    src = dict(sources)
    out = []
    for field, pin in pins:
        if pin.mark not in ("V", "V2") or (name, field) in NOT_ON_THE_CITED_LINE:
            continue
        text = src.get(pin.source or "")
        body = cited_text(text) if text else None
        if body is None:
            if pin.mark == "V" and text and provenance.parse(text).kind == "repo":
                out.append(f"{name}: {field} ({pin.value}) is V but cites no line: {text}")
            continue
        python = field == "python" or pin.name == "python" or pin.value.startswith("python")
        version = pin_version(pin)
        if version and not states(body, version, python=python):
            out.append(f"{name}: {field} ({pin.value}): {version} is not on {text}: {body!r}")
        upper = re.search(r"<\s*(\d+(?:\.\d+)+)", pin.value)
        if upper:
            m = re.search(r"upper bound: ([\w.-]+)", pin.note or "")
            below = cited_text(src.get(m.group(1), "")) if m else None
            parts = upper.group(1).split(".")
            last = int(parts[-1]) - 1
            want = ".".join(parts[:-1] + [str(last)]) if last >= 0 else None
            if below is None or want is None or not states(below, want):
                out.append(f"{name}: {field} ({pin.value}): the upper bound <{upper.group(1)} needs a note "
                           f"'upper bound: SOURCE-ID' whose cited line states {want}")
    return out


@pytest.mark.parametrize("name", CONCRETE)
def test_pin_versions_are_on_their_cited_lines(name):
    spec = catalog.load_spec(name)
    assert pin_line_problems(name, spec.sources, spec.pins()) == []


@pytest.mark.parametrize("site_file", SITE_FILES, ids=lambda p: p.stem)
def test_site_mappings_are_on_their_cited_lines(site_file):
    sf = sites.load_site(site_file)
    src = dict(sf.sources)
    bad = []
    for s in sf.stacks:
        body = cited_text(src.get(s.source or "", "")) if s.mark in ("V", "V2") else None
        if body is not None and s.modules and not all(mod in body for mod in s.modules):
            bad.append(f"stacks.{s.key}: {' '.join(s.modules)} not on {src[s.source]}")
        for key, val in (s.overrides or {}).items():
            if isinstance(val, dict) and val.get("mark") in ("V", "V2"):
                body = cited_text(src.get(str(val.get("source")), ""))
                if body is not None and not states(body, str(val.get("value")), python=key == "python"):
                    bad.append(f"stacks.{s.key}.overrides.{key}: {val.get('value')} not on {src[val.get('source')]}")
    assert bad == []


def test_the_line_check_finds_a_version_its_line_does_not_state():
    sources = (("hvd", "horovod/horovod@bbf09d79c257:horovod/__init__.py#L1"),
               ("conda", "argonne-lcf/conda_install_scripts@899e23cf3cc7:"
                         "alcf_polaris/install_datascience_conda_fromsource.sh#L197"),
               ("last", "open-ce/horovod-feedstock@open-ce-v1.2.6:recipe/meta.yaml#L2"),
               ("pypi", "https://pypi.org/project/horovod/0.28.1/"))
    ok = [("horovod.version", Pin.bare("0.18.2", mark="V", source="hvd")),
          ("python", Pin.bare("3.8", mark="V", source="conda")),
          ("x", Pin(value="horovod >=0.21.0,<0.22.2", mark="V", source="hvd",
                    note="upper bound: last")),
          ("y", Pin.bare("0.28.1", mark="V", source="pypi"))]
    assert pin_line_problems("t", sources, ok) == [
        "t: x (horovod >=0.21.0,<0.22.2): 0.21.0 is not on horovod/horovod@bbf09d79c257:horovod/__init__.py#L1: "
        "\"__version__ = '0.18.2'\""]
    bad = [("horovod.version", Pin.bare("0.18.2+1", mark="V", source="hvd")),
           ("python", Pin.bare("3.10", mark="V", source="conda")),
           ("cuda", Pin.bare("0.18", mark="V2", source="hvd")),
           ("z", Pin(value="horovod 0.18.*,<0.22.3", mark="V", source="hvd", note="upper bound: last")),
           ("y", Pin.bare("0.28.0", mark="V", source="pypi"))]
    out = pin_line_problems("t", sources, bad)
    assert len(out) == 4, out
    assert any("0.18.2+1 is not on" in p for p in out) and any("3.10 is not on" in p for p in out)
    assert any("upper bound <0.22.3" in p for p in out) and any("0.28.0 is not on" in p for p in out)
    assert not states("tensorflow 2.4.10", "2.4.1") and states("nccl_2.14.3-1+cuda11.6", "2.14.3")


# --- HOROVOD_* variables against the build script a spec mirrors (issue 30) ------------------------

_ASSIGN = re.compile(r"(?:^|\s)(?:export\s+)?(HOROVOD_[A-Z0-9_]+)=(\"[^\"]*\"|'[^']*'|\$\([^)]*\)|\S*)")
#: The source id that names the lines of a build script where it sets its HOROVOD_* variables.
BUILD_SOURCE = "horovod-build"
#: Specs with Horovod and no build script of their own to compare with, each with the reason.
NO_BUILD_SCRIPT = {
    "cpu-horovod": "envtool's own build; it mirrors no site's or vendor's script",
    "cpu-tensorflow-horovod": "envtool's own build; it mirrors no site's or vendor's script",
    "cpu-tf-torch-horovod": "envtool's own build; it mirrors no site's or vendor's script",
    "local-gpu-nccl": "envtool's own build on the workplace's GPU machine (docs/gpu-proof.md)",
    "ibm-wml-ce-1.7.0": "IBM's conda package of the WML-CE channel; its build script is not public",
    "open-ce-0.1": "OLCF's pre-release Summit module; horovod-feedstock has no tag for it",
    "open-ce-1.11": "open-ce/horovod-feedstock has no open-ce-v1.11.x tag (it inherits the base's v1.1.3 citation)",
    "polaris-conda-2022-09-08-hvd-nccl": "ALCF's repository has no script for this build (only its module's help "
                                         "text, module-no-mpi); it inherits its parent's citation",
    "nersc-pytorch-1.13.1": "no Horovod",
}
_OPEN_CE = ("open-ce-1.0.1", "open-ce-1.1.0", "open-ce-1.1.3", "open-ce-1.2", "open-ce-1.3", "open-ce-1.4",
            "open-ce-1.5", "open-ce-1.6", "open-ce-1.7", "open-ce-1.8", "open-ce-1.9", "open-ce-1.10")
#: Differences from the mirrored script that are kept, each with the reason: (spec, variable).
BUILD_DIFFERENCES: Dict[Tuple[str, str], str] = {
    **{(n, "HOROVOD_BUILD_ARCH_FLAGS"): "per-architecture compiler flags (-march=nocona on x86_64, -mcpu=power8 "
                                       "on ppc64le) of the channel's package; one spec covers both platforms and "
                                       "installs that package (install: conda)" for n in _OPEN_CE},
    **{(n, "HOROVOD_CMAKE"): "the scripts set it to $(which cmake), the cmake on PATH that Horovod's setup.py runs "
                             "without it" for n in ("polaris-conda-2022-09-08", "polaris-conda-2023-01-10",
                                                    "polaris-conda-2023-10-04")},
    ("polaris-conda-2022-07-19", "HOROVOD_GPU_OPERATIONS"): "[I] the script of the build date sets only "
        "HOROVOD_WITH_MPI=1; NCCL operations are an inference (ALCF's scripts add them on 2022-07-26)",
    ("ibm-wml-ce-1.6.1", "HOROVOD_WITHOUT_GLOO"): "envtool leaves Gloo out so the expected build is "
        "deterministic; Horovod 0.16.4 reads no Gloo variable",
    ("ibm-wml-ce-1.6.2", "HOROVOD_WITHOUT_GLOO"): "envtool leaves Gloo out so the expected check-build is "
        "deterministic (the spec's notes)",
}


def script_build_vars(text: str) -> Dict[str, str]:
    """``{HOROVOD_X: value}`` that the cited lines of a build script set (``export X=…`` or ``X=… cmd``;
    commented lines and ``echo`` lines are skipped; quotes stripped)."""
    body = cited_text(text) or ""
    out: Dict[str, str] = {}
    for line in body.splitlines():
        code = re.sub(r"^.*?\$\s", "", line.strip()) if re.match(r"^\(?[\w.-]*\)?\s*\S*\$\s", line.strip()) else line
        code = code.strip()
        if code.startswith(("#", "echo ")):
            continue
        for name, value in _ASSIGN.findall(code):
            out[name] = value.strip("\"'")
    return out


def _norm(value: str) -> str:
    return re.sub(r"\$\{(\w+)\}", r"$\1", value).strip().upper()


def build_var_problems(spec) -> List[str]:
    """How ``flags.build_env(spec)`` differs from the HOROVOD_* set its ``horovod-build`` source sets.

    A variable the script sets must be set, to the same value where both are literal or both name a
    variable; the spec may add ``HOROVOD_WITH_X`` for what the script leaves at Horovod's default
    (built when found) and ``HOROVOD_WITHOUT_<FRAMEWORK>`` for a framework the spec does not hold;
    anything else is a difference unless :data:`BUILD_DIFFERENCES` lists it."""
    from envtool.horovod import flags
    from envtool.core import frameworks

    text = dict(spec.sources)[BUILD_SOURCE]
    script = script_build_vars(text)
    mine = dict(flags.build_env(spec))
    held = {f.build_var for f in frameworks.FRAMEWORKS if f.name in spec.horovod.frameworks}
    out = []
    for name, value in script.items():
        if (spec.name, name) in BUILD_DIFFERENCES:
            continue
        if name not in mine:
            out.append(f"{spec.name}: {text} sets {name}={value}; the spec does not")
        elif ("$" in value) == ("$" in mine[name]) and _norm(value) != _norm(mine[name]):
            out.append(f"{spec.name}: {text} sets {name}={value}; the spec {mine[name]}")
    for name, value in mine.items():
        if name in script or (spec.name, name) in BUILD_DIFFERENCES:
            continue
        m = re.match(r"HOROVOD_(WITH|WITHOUT)_(\w+)$", name)
        if m and m.group(1) == "WITH" and f"HOROVOD_WITHOUT_{m.group(2)}" not in script:
            continue
        if m and m.group(1) == "WITHOUT" and m.group(2) in {f.build_var for f in frameworks.FRAMEWORKS} \
                and m.group(2) not in held and f"HOROVOD_WITH_{m.group(2)}" not in script:
            continue
        out.append(f"{spec.name}: the spec sets {name}={value}; {text} does not")
    return out


@pytest.mark.parametrize("name", CONCRETE)
def test_horovod_build_vars_match_the_mirrored_build_script(name):
    spec = catalog.load_spec(name)
    if name in NO_BUILD_SCRIPT:
        assert spec.horovod.install == "none" or name != "nersc-pytorch-1.13.1"
        return
    assert spec.horovod.install != "none", f"{name} has no Horovod: list it in NO_BUILD_SCRIPT"
    assert BUILD_SOURCE in dict(spec.sources), f"{name}: no {BUILD_SOURCE} source (the build script it mirrors)"
    assert script_build_vars(dict(spec.sources)[BUILD_SOURCE]), f"{name}: its {BUILD_SOURCE} lines set no HOROVOD_*"
    assert build_var_problems(spec) == []


def test_the_build_var_check_finds_a_difference():
    spec = catalog.load_spec("open-ce-1.4")
    assert build_var_problems(dataclasses.replace(spec, horovod=dataclasses.replace(spec.horovod, nccl_home=None))) \
        == ["open-ce-1.4: open-ce/horovod-feedstock@open-ce-v1.4.0:recipe/build.sh#L24-L39 (the Horovod build "
            "variables) sets HOROVOD_NCCL_HOME=$CONDA_PREFIX; the spec does not"]
    out = build_var_problems(dataclasses.replace(spec, horovod=dataclasses.replace(
        spec.horovod, controllers=("mpi", "gloo"), gpu_ops=(("allreduce", "mpi"), ("broadcast", "nccl")))))
    assert any("sets HOROVOD_WITHOUT_GLOO=1; the spec does not" in p for p in out), out
    assert any("sets HOROVOD_GPU_ALLREDUCE=NCCL; the spec MPI" in p for p in out), out
    polaris = catalog.load_spec("polaris-conda-2023-10-04")
    out = build_var_problems(dataclasses.replace(polaris, horovod=dataclasses.replace(
        polaris.horovod, cuda_cc_list="80", controllers=("gloo",))))
    assert any("the spec sets HOROVOD_BUILD_CUDA_CC_LIST=80" in p for p in out), out
    assert any("sets HOROVOD_WITH_MPI=1; the spec does not" in p for p in out), out
