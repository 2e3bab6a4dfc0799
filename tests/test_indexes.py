"""Package indexes and their mirrors (issue 38): the ``index_mirrors`` setting, the spec's ``index:``,
the lock's record of them, how a locked install adds them, and the hint when a locked version is
nowhere. Fast: pure functions, a loopback HTTP index, a few CLI calls."""
from __future__ import annotations

import functools
import hashlib
import http.server
import json
import socket
import threading
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, run_envtool
from envtool.lock import indexes, lockio
from envtool.lock.indexes import MirrorError, parse_mirrors, through_mirror, to_public

COMMITTED = REPO / "lockfiles" / "cpu-horovod.conda-lock.yml"
PUBLIC = "https://download.pytorch.org/whl/cpu"


# --- the setting ---------------------------------------------------------------------------------

def test_mirrors_parse_to_canonical_roots():
    table = parse_mirrors(f"https://Download.PyTorch.org/whl/cpu/=file:///srv/pt-cpu/, "
                          f"https://pypi.org/simple=https://mirror.example/pypi/simple")
    assert table == {PUBLIC: "file:///srv/pt-cpu", "https://pypi.org/simple": "https://mirror.example/pypi/simple"}
    assert through_mirror("https://download.pytorch.org/whl/cpu/", table) == "file:///srv/pt-cpu"
    assert through_mirror("https://example.org/simple", table) == "https://example.org/simple"


@pytest.mark.parametrize("text, words", [
    ("nonsense", "expected PUBLIC=MIRROR"),
    ("http://pypi.org/simple=https://m/x", "must be an https:// URL"),
    (f"{PUBLIC}=ftp://m/x", "http(s):// URL or a file:// folder"),
    (f"{PUBLIC}=file:///", "http(s):// URL or a file:// folder"),
    ("https://[x=https://m", "not a URL"),
    (f"{PUBLIC}=https://m:99999/x", "not a URL"),
    (f"{PUBLIC}=https://me:s3cret@mirror.example/whl/cpu", "no user name or password"),
])
def test_bad_mirrors_are_refused_with_what_was_expected(text, words):
    with pytest.raises(MirrorError) as exc:
        parse_mirrors(text)
    assert words in str(exc.value)
    assert "s3cret" not in str(exc.value)


def test_a_bad_mirror_variable_is_exit_2_for_every_command_and_config_refuses_it(tmp_path):
    proc = run_envtool("specs", "--json", env={"ENVTOOL_INDEX_MIRRORS": "https://[x=https://m"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "ENVTOOL_INDEX_MIRRORS" in json.loads(proc.stdout)["error"]
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = run_envtool("config", "set", "index_mirrors", f"{PUBLIC}=https://me:s3cret@m/x", env=env)
    assert proc.returncode == 2 and "s3cret" not in proc.stderr + proc.stdout
    assert not (tmp_path / "config" / "envtool" / "config.yaml").exists()
    proc = run_envtool("config", "set", "index_mirrors", f"{PUBLIC}=file:///srv/pt-cpu", env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "config" / "envtool" / "config.yaml").stat().st_mode & 0o077 == 0  # new file: 0600


def test_to_public_maps_only_files_under_a_mirror_root():
    table = {"https://pub.example/x": "https://mirror.example/x"}
    assert to_public("https://mirror.example/x/a-1.0.whl", table) == "https://pub.example/x/a-1.0.whl"
    assert to_public("https://MIRROR.example/x/a-1.0.whl", table) == "https://pub.example/x/a-1.0.whl"
    assert to_public("https://mirror.example/xy/a-1.0.whl", table) is None  # not under x/
    assert to_public("https://mirror.example/x", table) is None  # the root itself is no file
    assert to_public("https://other.example/x/a-1.0.whl", table) is None


# --- the spec and the lock ------------------------------------------------------------------------

@pytest.mark.parametrize("pin, field, words", [
    ('{spec: "torch==2.13.0+cpu", index: "http://download.pytorch.org/whl/cpu"}', "packages.pip[0].index",
     "https:// URL of a public package index"),
    ('{spec: "torch==2.13.0+cpu", index: "https://u:p@download.pytorch.org/whl/cpu"}', "packages.pip[0].index",
     "without credentials"),
])
def test_a_spec_index_must_be_a_public_https_index(tmp_path, pin, field, words):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "ix.yaml").write_text(textwrap.dedent(f"""\
        name: ix
        engine: venv
        packages:
          pip:
            - {pin}
        horovod: {{install: none}}
        """))
    proc = run_envtool("show", "ix", env={"ENVTOOL_SPEC_PATH": str(specs)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert field in proc.stderr and words in proc.stderr and "ix.yaml" in proc.stderr


def test_a_conda_pin_names_no_index(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "ixc.yaml").write_text("name: ixc\nengine: conda\nchannels: [conda-forge]\npackages:\n  conda:\n"
                                    f'    - {{spec: "python 3.11.*", index: "{PUBLIC}"}}\nhorovod: {{install: none}}\n')
    proc = run_envtool("show", "ixc", env={"ENVTOOL_SPEC_PATH": str(specs)})
    assert proc.returncode == 2 and "packages.conda[0].index" in proc.stderr and "only a pip package" in proc.stderr


@pytest.mark.parametrize("value", [
    '[[[[' * 20000,
    '{"torch": "https://[x/"}',
    '{"torch": "https://u:p@download.pytorch.org/whl/cpu"}',
    '{"to\\u001b[31mrch": "https://download.pytorch.org/whl/cpu"}',
    '{"torch": "http://download.pytorch.org/whl/cpu"}',
    '["https://download.pytorch.org/whl/cpu"]',
], ids=["nested-past-the-recursion-limit", "bad-ipv6", "credentials", "escape-in-name", "http", "a-list"])
def test_a_lock_with_bad_index_metadata_is_exit_2(tmp_path, value):
    text = COMMITTED.read_text()
    old = next(line for line in text.splitlines() if "envtool.pip_indexes:" in line)
    lock = tmp_path / "bad.conda-lock.yml"
    lock.write_text(text.replace(old, "    envtool.pip_indexes: " + json.dumps(value)))
    proc = run_envtool("diff", "--prefix", tmp_path, "--lock", lock, "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "envtool.pip_indexes" in json.loads(proc.stdout)["error"] and "\x1b" not in proc.stdout + proc.stderr


# --- a locked install ------------------------------------------------------------------------------

def test_index_options_go_before_the_requirements_file_and_join_uvs_variables():
    from envtool.steps.create.from_lock import _split_index_args, _with_index_args

    argv = ("uv", "pip", "install", "--python", "py", "--require-hashes", "-r", "req.txt")
    assert _with_index_args(argv, ["--extra-index-url", "https://i/x"]) == (
        "uv", "pip", "install", "--python", "py", "--require-hashes", "--extra-index-url", "https://i/x", "-r", "req.txt")
    args = ["--extra-index-url", "http://m/x", "--trusted-host", "m", "--find-links", "file:///w"]
    # credentials of pip's own extra index reach uv in UV_EXTRA_INDEX_URL, which an option would override
    assert _split_index_args(args, {"UV_EXTRA_INDEX_URL": "https://site/simple"}) == (
        ["--trusted-host", "m", "--find-links", "file:///w"], {"UV_EXTRA_INDEX_URL": "https://site/simple http://m/x"})
    assert _split_index_args(args, {}) == (args, {})


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def loopback_index(tmp_path):
    """A PEP 503 index in PyTorch's layout on loopback holding one small file: ``(root URL, sha256)``."""
    files = tmp_path / "idx" / "whl" / "cpu"
    (files / "demo").mkdir(parents=True)
    wheel = files / "demo-1.0+cpu-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (files / "demo" / "index.html").write_text(
        f'<html><body><a href="../demo-1.0%2Bcpu-py3-none-any.whl#sha256={digest}">demo</a></body></html>')
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_Quiet, directory=str(tmp_path / "idx")))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu", digest
    server.shutdown()
    server.server_close()
    thread.join(10)


def test_reachable_indexes_are_added_and_an_unreachable_one_is_named(loopback_index, tmp_path):
    url, _ = loopback_index
    table = {PUBLIC: url}
    args, notes = indexes.extra_index_args({"demo": PUBLIC}, table)
    assert args == ["--extra-index-url", url, "--trusted-host", "127.0.0.1"] and notes == []
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/whl/cpu"
    args, notes = indexes.extra_index_args({"demo": PUBLIC}, {PUBLIC: closed})
    assert args == [] and len(notes) == 1
    assert PUBLIC in notes[0] and "cannot be reached" in notes[0] and "index_mirrors" in notes[0]
    # a folder of wheels is a --find-links source; an index folder an --extra-index-url one
    house = tmp_path / "house"
    house.mkdir()
    (house / "demo-1.0-py3-none-any.whl").write_bytes(b"x")
    assert indexes.extra_index_args({"demo": PUBLIC}, {PUBLIC: f"file://{house}"})[0] == ["--find-links", f"file://{house}"]


def test_an_html_index_is_read_for_hashes_and_mapped_back_to_the_public_url(loopback_index):
    from envtool.lock.model import LockedPackage
    from envtool.lock.portable import NotPublic, _index_files, make_portable

    url, digest = loopback_index
    assert _index_files("demo", url) == {digest: f"{url}/demo-1.0%2Bcpu-py3-none-any.whl"}
    # a copy found in a local wheel folder is recorded at the public index, looked up through its mirror
    local = LockedPackage(manager="pip", name="demo", version="1.0+cpu", platform="linux-64",
                          url="file:///opt/wheels/demo-1.0%2Bcpu-py3-none-any.whl", sha256=digest)
    out, _ = make_portable([local], indexes={"demo": PUBLIC}, mirror_table={PUBLIC: url}, strict=True)
    assert out[0].url == f"{PUBLIC}/demo-1.0%2Bcpu-py3-none-any.whl"
    other = LockedPackage(manager="pip", name="demo", version="1.0+cpu", platform="linux-64",
                          url="file:///opt/wheels/demo-1.0%2Bcpu-py3-none-any.whl", sha256="0" * 64)
    with pytest.raises(NotPublic) as exc:
        make_portable([other], indexes={"demo": PUBLIC}, mirror_table={PUBLIC: url}, strict=True)
    assert exc.value.entries[0][0] == "demo"


def test_a_missing_locked_version_names_the_index_that_has_it():
    uv = ("  × No solution found when resolving dependencies:\n  ╰─▶ Because there is no version of "
          "torch==2.13.0+cpu and you require torch==2.13.0+cpu, we can conclude that your requirements are "
          "unsatisfiable.")
    hint = indexes.hint_for_missing(uv, {"torch": PUBLIC}, {})
    assert hint.startswith(f"torch is on {PUBLIC}, the index its spec names") and "index_mirrors" in hint
    pip = "ERROR: No matching distribution found for torch==2.13.0+cpu"
    assert indexes.hint_for_missing(pip, {"torch": PUBLIC}, {PUBLIC: "https://m/x"}).startswith(
        f"torch is on {PUBLIC} (through its mirror https://m/x)")
    registry = "Because demo was not found in the package registry and you require demo, we can conclude"
    assert "pip configuration" in indexes.hint_for_missing(registry, {}, {})
    assert indexes.hint_for_missing("error: something else entirely", {"torch": PUBLIC}, {}) == ""


def test_uv_trusts_the_systems_certificates_as_pip_does(monkeypatch):
    from envtool.engines.installer import uv_arguments

    for var in ("UV_NATIVE_TLS", "UV_SYSTEM_CERTS", "SSL_CERT_FILE"):
        monkeypatch.delenv(var, raising=False)
    assert dict(uv_arguments({})[1]).get("UV_NATIVE_TLS") == "1"
    env = dict(uv_arguments({"cert": "/etc/site-ca.pem"})[1])
    assert env.get("SSL_CERT_FILE") == "/etc/site-ca.pem" and "UV_NATIVE_TLS" not in env
    monkeypatch.setenv("UV_SYSTEM_CERTS", "0")  # the user's own choice stands
    assert "UV_NATIVE_TLS" not in dict(uv_arguments({})[1])
