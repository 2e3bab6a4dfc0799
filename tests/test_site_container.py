"""The site file's ``container`` section (issue 29): parsed into ContainerSection, bad values exit 2
naming ``container.<field>``."""
import json
import subprocess
import sys

import pytest

from envtool.spec import sites
from helpers.speed import scaled


def test_perlmutter_names_the_tutorials_shifter_line():
    site = sites.load_site(sites.find("perlmutter"))
    c = site.container
    assert c is not None and c.runtime == "shifter" and c.modules == ("gpu", "nccl-2.15")
    assert c.mpi == "pmi2" and c.mpi_abi == "mpich"
    assert "README.md#L465" in dict(site.sources)[c.source]


@pytest.mark.parametrize("body, field", [
    ("{runtime: docker, source: a}", "container.runtime"),
    ("{source: a}", "container.runtime"),
    ("{runtime: apptainer}", "container.source"),
    ("{runtime: apptainer, source: nope}", "container.source"),
    ("{runtime: apptainer, source: a, mpi_abi: intel}", "container.mpi_abi"),
    ("{runtime: apptainer, source: a, base: 'docker://ubuntu'}", "container.base"),
    ("{runtime: apptainer, source: a, bind: [relative/dir]}", "container.bind"),
    ("{runtime: apptainer, source: a, modules: ['gpu;rm']}", "container.modules"),
    ("{runtime: apptainer, source: a, surprise: 1}", "container.surprise"),
    ("[shifter]", "container"),
])
def test_bad_container_section_is_exit_2_naming_the_field(tmp_path, body, field):
    f = tmp_path / "t.yaml"
    f.write_text(f"name: t\nsources: {{a: https://example.org/doc}}\ncontainer: {body}\n")
    p = subprocess.run([sys.executable, "-m", "envtool", "show", "cpu-horovod", "--site-file", str(f), "--json"],
                       capture_output=True, text=True, timeout=scaled(60))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert field in json.loads(p.stdout)["error"]


def test_good_container_section_parses(tmp_path):
    f = tmp_path / "t.yaml"
    f.write_text("name: t\nsources: {a: https://example.org/doc}\n"
                 "container: {runtime: charliecloud, source: a, base: 'dir:/srv/base', bind: [/scratch]}\n")
    c = sites.load_site(f).container
    assert (c.runtime, c.base, c.bind, c.mpi_abi) == ("charliecloud", "dir:/srv/base", ("/scratch",), "openmpi")
