"""Container-runtime names live in one place (issue 39, item 4): the registry
``envtool.spec.registry.CONTAINER_RUNTIMES``. The site-file reader checks ``container.runtime``
against it and :func:`envtool.scheduler.containers.runtime` loads from it, so a toy runtime
registered there (one file, one registration) is one a site file can name, and unregistered it is
refused again. In-process and fast: nothing is run."""
from __future__ import annotations

import sys

import pytest

from envtool.core.errors import SpecError
from envtool.scheduler import containers
from envtool.spec import registry, sites

SITE = "name: t\nsources: {a: https://example.org/doc}\ncontainer: {runtime: toyrt, source: a, modules: [gpu]}\n"


@pytest.fixture
def toy_registered():
    registry.CONTAINER_RUNTIMES.register("toyrt", "helpers.toy_runtime:TOY", origin="tests")
    yield
    registry.CONTAINER_RUNTIMES.unregister("toyrt")


def test_a_registered_toy_runtime_is_one_a_site_file_can_name(tmp_path, toy_registered):
    site = tmp_path / "t.yaml"
    site.write_text(SITE)
    sys.modules.pop("helpers.toy_runtime", None)
    assert "toyrt" in sites.CONTAINER_RUNTIMES.names()
    section = sites.load_site(site).container
    assert section is not None and section.runtime == "toyrt"
    assert "helpers.toy_runtime" not in sys.modules  # reading the site file names the runtime, imports nothing
    assert containers.wrap(section, "img", ["python", "t.py"], binds=["/data"]) == [
        "toyrun", "--flag=gpu", "--mount", "/data:/data", "img", "python", "t.py"]
    from envtool.steps.jobscript.container_run import image_path

    assert image_path(section, "img") == str(tmp_path.cwd() / "img")  # its path_image is consulted


def test_an_unregistered_runtime_is_refused_naming_the_field_and_the_registered_ones(tmp_path):
    site = tmp_path / "t.yaml"
    site.write_text(SITE)
    with pytest.raises(SpecError) as err:
        sites.load_site(site)
    text = str(err.value)
    assert "container.runtime" in text and "toyrt" in text
    assert "shifter, podman-hpc, apptainer, charliecloud" in text
