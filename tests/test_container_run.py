"""Issue 29: container runtimes' run lines (envtool.scheduler.containers), `jobscript --image` and
`doctor` inside a container."""
from __future__ import annotations

import shlex

import pytest

from envtool.core.errors import UsageError
from envtool.scheduler import containers
from envtool.spec.sites import ContainerSection

#: The KISTI Perlmutter tutorial's Shifter line
#: (hwang2006/distributed-training-with-horovod-on-perlmutter@db9db9a20292:README.md#L471).
TUTORIAL_LINE = ("srun --mpi=pmi2 -l -n 8 shifter --module=gpu,nccl-2.15 "
                 "--image=qualis2006/tensorflow-pytorch-horovod:tf2.10_pt1.13 "
                 "python KISTI-DL-tutorial-using-horovod/src/tensorflow/tf_keras_cats_dogs.py")
TUTORIAL_IMAGE = "qualis2006/tensorflow-pytorch-horovod:tf2.10_pt1.13"
TUTORIAL_ARGV = ["python", "KISTI-DL-tutorial-using-horovod/src/tensorflow/tf_keras_cats_dogs.py"]


def test_registry_has_one_runtime_per_site_file_name():
    from envtool.spec.sites import CONTAINER_RUNTIMES
    assert sorted(containers.REGISTRY) == sorted(CONTAINER_RUNTIMES)
    for name, rt in containers.REGISTRY.items():
        assert rt.name == name and rt.program and rt.source


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
