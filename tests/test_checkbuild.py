"""check-build parsing (every documented format) and comparison, through the API and the CLI."""
from pathlib import Path

import pytest

from conftest import run_envtool
from envtool.horovod import checkbuild
from envtool.spec.model import CheckBuildExpectation

DATA = Path(__file__).parent / "data" / "check_build"


def read(name):
    return (DATA / name).read_text()


def test_parse_0_28_1_cpu():
    cb = checkbuild.parse(read("v0.28.1-cpu.txt"))
    assert cb.version == "0.28.1"
    assert cb.frameworks == (("TensorFlow", False), ("PyTorch", True), ("MXNet", False))
    assert cb.controllers == (("MPI", True), ("Gloo", True))
    assert [n for n, ok in cb.tensor_operations if ok] == ["MPI", "Gloo"]
    assert [n for n, _ in cb.tensor_operations] == ["NCCL", "DDL", "CCL", "MPI", "Gloo"]


def test_parse_0_18_mlsl_line():
    cb = checkbuild.parse(read("v0.18.2-ddl.txt"))
    names = dict(cb.tensor_operations)
    assert "MLSL" in names and "CCL" not in names
    assert names["DDL"] is True and names["NCCL"] is False


def test_parse_verbose_noise_and_traceback():
    cb = checkbuild.parse(read("v0.21.0-verbose.txt"))
    assert cb.version == "0.21.0"
    assert dict(cb.frameworks) == {"TensorFlow": True, "PyTorch": True, "MXNet": False}
    assert dict(cb.controllers) == {"MPI": True, "Gloo": False}
    assert dict(cb.tensor_operations)["NCCL"] is True


def test_parse_trailing_spaces_and_crlf():
    text = read("v0.28.1-cpu.txt").replace("\n", "   \r\n")
    cb = checkbuild.parse(text)
    assert dict(cb.controllers) == {"MPI": True, "Gloo": True}


def test_parse_rejects_output_without_sections():
    with pytest.raises(checkbuild.CheckBuildParseError, match="no 'horovodrun --check-build' sections"):
        checkbuild.parse("usage: horovodrun [-h] ...\nhorovodrun: error: unrecognized arguments: -cb\n")


def test_compare_reports_missing_and_tolerates_extras():
    cb = checkbuild.parse(read("v0.28.1-cpu.txt"))
    want = CheckBuildExpectation(frameworks=("PyTorch",), controllers=("MPI",), tensor_operations=("NCCL", "MPI"))
    comparison = checkbuild.compare(cb, want)
    assert not comparison.ok
    assert [(r.section, r.name) for r in comparison.missing] == [("tensor_operations", "NCCL")]
    gloo = [r for r in comparison.rows if r.section == "controllers" and r.name == "Gloo"][0]
    assert gloo.found and not gloo.expected and gloo.ok


def test_compare_name_absent_from_old_output_counts_as_missing():
    cb = checkbuild.parse(read("v0.18.2-ddl.txt"))
    comparison = checkbuild.compare(cb, CheckBuildExpectation(tensor_operations=("CCL",)))
    assert [r.name for r in comparison.missing] == ["CCL"]


def test_cli_from_file_matches_spec():
    proc = run_envtool("check-build", "--from-file", DATA / "v0.28.1-cpu.txt", "--spec", "cpu-horovod")
    assert proc.returncode == 0, proc.stderr
    assert "PyTorch" in proc.stdout and "MISSING" not in proc.stdout


def test_cli_from_file_mismatch_exits_1_naming_capability():
    proc = run_envtool("check-build", "--from-file", DATA / "v0.28.1-cpu.txt", "--spec", "perlmutter-horovod")
    assert proc.returncode == 1
    assert "TensorFlow" in proc.stderr and "NCCL" in proc.stderr


def test_cli_json(tmp_path):
    import json

    proc = run_envtool("check-build", "--from-file", DATA / "v0.27.0-perlmutter.txt", "--spec", "perlmutter-horovod",
                       "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is True and data["found"]["version"] == "0.27.0"
    assert data["found"]["tensor_operations"]["NCCL"] is True


def test_cli_garbage_exits_2(tmp_path):
    f = tmp_path / "out.txt"
    f.write_text("Traceback (most recent call last):\nImportError: libmpi.so.40\n")
    proc = run_envtool("check-build", "--from-file", f, "--spec", "cpu-horovod")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr.split("last line:")[0]


TF_ONLY_BUILD = """Horovod v0.28.1:

Available Frameworks:
    [X] TensorFlow
    [X] PyTorch
    [ ] MXNet

Available Controllers:
    [X] MPI
    [X] Gloo

Available Tensor Operations:
    [ ] NCCL
    [ ] DDL
    [ ] CCL
    [X] MPI
    [X] Gloo
"""


def test_a_framework_listed_without_its_extension_counts_as_not_built(tmp_path):
    """What Horovod 0.28.1's check-build printed for a TensorFlow-only build (torch not installed,
    no horovod/torch/mpi_lib_v2*.so): ``[X] PyTorch``. Judged against the prefix's files: the binding
    without a compiled extension is named and marked not built; a prefix without its own horovod
    (layered over a base) is not judged."""
    found = checkbuild.parse(TF_ONLY_BUILD)
    hvd = tmp_path / "env" / "lib" / "python3.11" / "site-packages" / "horovod"
    for sub in ("tensorflow", "torch", "mxnet"):
        (hvd / sub).mkdir(parents=True)
    (hvd / "tensorflow" / "mpi_lib.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    assert checkbuild.listed_without_extension(found, tmp_path / "env") == ["PyTorch"]
    fixed = checkbuild.without_frameworks(found, ["PyTorch"])
    assert fixed.section("frameworks") == {"TensorFlow": True, "PyTorch": False, "MXNet": False}
    assert fixed.controllers == found.controllers
    (hvd / "torch" / "mpi_lib_v2.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    assert checkbuild.listed_without_extension(found, tmp_path / "env") == []
    (tmp_path / "layered" / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    assert checkbuild.listed_without_extension(found, tmp_path / "layered") == []
