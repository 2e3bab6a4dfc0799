"""The documentation site: ``mkdocs build --strict`` passes (warnings are errors), and strict mode
really catches a broken link, a missing anchor and a page left out of the nav; the generated
command-line reference matches the parser; every ``ENVTOOL_*`` variable the package reads and
every key the spec and site loaders accept is documented; the README's links lead to pages; the
built site loads nothing from another host (login nodes without internet), its command-line
reference lists every command in the sidebar, and no stray editor or patch file ships."""
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from helpers.speed import scaled

REPO = Path(__file__).resolve().parent.parent


def _mkdocs_build(root: Path, out: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of ``root/mkdocs.yml`` into ``out`` (a real process)."""
    pytest.importorskip("mkdocs")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(root / "mkdocs.yml"), "--site-dir", str(out)],
                          cwd=root, capture_output=True, text=True, timeout=scaled(300))


def _copy_docs(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copy2(REPO / "mkdocs.yml", root / "mkdocs.yml")
    return root


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    """The site built once from this checkout: (the ``mkdocs build`` process, its output folder)."""
    out = tmp_path_factory.mktemp("site")
    return _mkdocs_build(REPO, out), out


def test_docs_build_strict(built_site):
    proc, site = built_site
    assert proc.returncode == 0, proc.stderr
    assert (site / "index.html").is_file()
    assert (site / "reference" / "cli" / "index.html").is_file()
    assert "WARNING" not in proc.stderr, proc.stderr


class _Loads(HTMLParser):
    """What a page makes the browser fetch on its own: ``script``/``img``/``iframe``/``source``
    ``src`` and ``link`` ``href`` (stylesheets, icons, fonts), plus the ``href`` of every ``a``
    inside the element with id ``toc-collapse`` (the mkdocs theme's sidebar)."""

    def __init__(self):
        super().__init__()
        self.loads, self.sidebar, self._sidebar_depth = [], [], 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if self._sidebar_depth and tag == "div":
            self._sidebar_depth += 1
        if a.get("id") == "toc-collapse":
            self._sidebar_depth = 1
        if tag in ("script", "img", "iframe", "source", "audio", "video") and a.get("src"):
            self.loads.append(a["src"])
        if tag == "link" and a.get("href") and a.get("rel") != "canonical":
            self.loads.append(a["href"])
        if tag == "a" and self._sidebar_depth and a.get("href"):
            self.sidebar.append(a["href"])

    def handle_endtag(self, tag):
        if self._sidebar_depth and tag == "div":
            self._sidebar_depth -= 1


def _parse(page: Path) -> _Loads:
    parser = _Loads()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


#: ``url(...)`` and ``@import`` in a stylesheet that name another host (``http:``, ``https:`` or ``//``).
_CSS_EXTERNAL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])\s*(?:https?:)?//""", re.I)


def test_built_site_loads_nothing_from_another_host(built_site):
    """Air-gapped login nodes reach no CDN: no page may pull a script, stylesheet, font or image
    from another host (the mkdocs theme's highlight.js comes from cdnjs unless ``highlightjs: false``,
    https://www.mkdocs.org/user-guide/choosing-your-theme/#mkdocs)."""
    proc, site = built_site
    assert proc.returncode == 0, proc.stderr
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    external = [(str(p.relative_to(site)), url) for p in pages for url in _parse(p).loads
                if urlsplit(url).scheme in ("http", "https") or urlsplit(url).netloc]
    assert not external, f"{len(external)} external loads, e.g. {external[:3]}"
    css = [str(p.relative_to(site)) for p in site.rglob("*.css") if _CSS_EXTERNAL.search(p.read_text(errors="replace"))]
    assert not css, css


def test_cli_reference_sidebar_lists_every_command(built_site):
    from envtool.cli.main import build_parser
    import argparse

    proc, site = built_site
    assert proc.returncode == 0, proc.stderr
    sidebar = _parse(site / "reference" / "cli" / "index.html").sidebar
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [name for name in commands.choices if f"#envtool-{name}" not in sidebar]
    assert not missing, f"the sidebar of the command-line reference lacks {missing}: {sidebar}"


def test_no_stray_editor_or_patch_file_in_docs():
    """mkdocs copies every file under docs/ into the site: a ``.orig``/``.rej`` left by ``patch``,
    an editor's backup (``~``, ``.bak``, ``.swp``) would ship."""
    stray = [str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*")
             if re.search(r"(\.(orig|rej|bak|swp|swo)|~)$", p.name) or p.name.startswith(".#")]
    assert not stray, stray


@pytest.mark.parametrize("change, message", [
    ("link", "contains a link 'no-such-page.md', but the target is not found"),
    ("anchor", "does not contain an anchor '#no-such-section'"),
    ("orphan", "not included in the \"nav\" configuration"),
])
def test_strict_build_fails_on_a_broken_link_a_missing_anchor_or_a_page_outside_the_nav(tmp_path, change, message):
    root = _copy_docs(tmp_path)
    page = root / "docs" / "getting-started.md"
    if change == "link":
        page.write_text(page.read_text() + "\nSee [this](no-such-page.md).\n")
    elif change == "anchor":
        page.write_text(page.read_text() + "\nSee [this](concepts.md#no-such-section).\n")
    else:
        (root / "docs" / "forgotten.md").write_text("# Forgotten\n")
    proc = _mkdocs_build(root, tmp_path / "site")
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_committed_cli_reference_is_generated_from_the_parser():
    proc = subprocess.run([sys.executable, "scripts/gen_cli_reference.py", "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr


def test_cli_reference_names_every_command_and_option():
    from envtool.cli.main import build_parser
    import argparse

    text = (REPO / "docs" / "reference" / "cli.md").read_text()
    stack = [("envtool", build_parser())]
    while stack:
        path, parser = stack.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    assert f"`{path} {name}`" in text
                    stack.append((f"{path} {name}", sub))
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}`" in text, (path, option)


def test_every_envtool_variable_the_package_reads_is_documented():
    names = set()
    for f in (REPO / "envtool").rglob("*"):
        if f.suffix in (".py", ".sh", ".lua", ".tcl", ".j2") and f.is_file():
            names |= set(re.findall(r"(?<![A-Za-z0-9_])ENVTOOL_[A-Z0-9_]*[A-Z0-9]\b", f.read_text()))
    assert names, "no ENVTOOL_* variable found: the pattern is wrong"
    page = (REPO / "docs" / "reference" / "environment.md").read_text()
    missing = sorted(n for n in names if f"`{n}`" not in page)
    assert not missing, f"docs/reference/environment.md does not describe {missing}"


def test_every_spec_and_site_file_key_is_documented():
    from envtool.spec import load, sites

    page = (REPO / "docs" / "reference" / "schema.md").read_text()
    keys = {*load.TOP_KEYS, *load.SITE_KEYS, *load.HOROVOD_KEYS, *load.EXPECT_KEYS, *load.VENV_KEYS,
            *load.CHECK_BUILD_KEYS, *load.PIN_KEYS, *load.DISTRIBUTION_KEYS, *load.STATUS_KEYS,
            *load.PACKAGES_KEYS, *sites.SITE_FILE_KEYS, *sites.DETECT_KEYS, *sites.BATCH_KEYS, *sites.STACK_KEYS}
    missing = sorted(k for k in keys if f"`{k}`" not in page)
    assert not missing, f"docs/reference/schema.md does not name {missing}"


def test_readme_links_lead_to_pages_and_keeps_the_test_command():
    readme = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", readme)
    assert links
    missing = [l for l in links if not (REPO / l).is_file()]
    assert not missing, missing
    # .ci/run runs the README's line that ends in "# tests"
    assert re.search(r"^bash scripts/setup\.sh --test && python3 -m pytest .*# tests$", readme, re.M)


@pytest.mark.slow  # collects the whole suite
def test_the_coverage_table_in_tests_readme_is_current():
    """tests/README.md's table of real components per module is what tests/coverage_table.py prints."""
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "coverage_table.py")], capture_output=True,
                          text=True, cwd=REPO, timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout[proc.stdout.index("| module"):].strip()
    readme = (REPO / "tests" / "README.md").read_text()
    kept = readme.split("<!-- coverage-table: begin -->\n", 1)[1].split("\n<!-- coverage-table: end -->", 1)[0]
    assert kept.strip() == table, "run python3 tests/coverage_table.py and copy its table into tests/README.md"
