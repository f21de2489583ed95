"""The docs site as a reader meets it: built by MkDocs from mkdocs.yml as `mkdocs build
--strict` builds it, then read in headless Chromium at 1,366 px, a laptop's width. Screenshots
go under artifacts/browser/ (or $SCHEDULINATOR_ARTIFACTS).

Skipped where the docs extra is not installed (the matrix's environments run the wheel); CI
installs it beside the tests. Without Chromium the browser's tests skip, unless
SCHEDULINATOR_REQUIRE_BROWSER=1 (CI), where they fail.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import django_schedulinator

from .support.browser_support import CHROMIUM_ARGS, Artifacts, browser_required, find_chromium

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[1]
# The clone (under the matrix the suite runs in a copy without the package, and tox says
# where the clone is).
CLONE = Path(os.environ.get("SCHEDULINATOR_CLONE") or ROOT)
WIDTH, HEIGHT = 1366, 768  # a laptop's screen, less nothing: the viewport
QUICKSTART_STEPS = [
    "1. Install the app",
    "2. Have a Redis running",
    "3. Create an app for your tasks",
    "4. Configure",
    "5. Register a task",
    "6. Create the tables and a schedule",
    "7. Run the scheduler",
]


def build(destination: Path, *, formatter: bool) -> Path:
    """The site, built as CI builds it. Without ``formatter``, mkdocstrings finds neither
    Ruff nor Black (a ``ruff`` package without its binary shadows the real one), and lays
    each signature out on one line: what a docs install without Ruff gets."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    env.pop("PYTHONPATH", None)
    if not formatter:
        shadow = destination.parent / f"{destination.name}-no-formatter" / "ruff"
        shadow.mkdir(parents=True)
        (shadow / "__init__.py").write_text("")
        env["PYTHONPATH"] = str(shadow.parent)
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CLONE / "mkdocs.yml"),
         "-d", str(destination)],
        cwd=CLONE, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return destination


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("site") / "site", formatter=True)


@pytest.fixture(scope="module")
def unformatted_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("site") / "site", formatter=False)


def page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text("utf-8")


# -- what the build makes ------------------------------------------------------------------


def test_the_quick_starts_steps_are_the_table_of_contents(site: Path) -> None:
    """Each step is a heading, so the page's table of contents lists them in order."""
    html = page(site, "quickstart")
    toc = html.split('class="md-nav md-nav--secondary"', 1)[1].split("</nav>", 1)[0]
    entries = [
        re.sub(r"\s+", " ", e).strip() for e in re.findall(r'md-ellipsis">(.*?)</span>', toc, re.S)
    ]
    assert entries[: len(QUICKSTART_STEPS)] == QUICKSTART_STEPS
    assert "What next" in entries


def test_the_changelog_page_is_changelog_md_with_its_links_made_the_sites(site: Path) -> None:
    """docs/changelog.md stands for CHANGELOG.md, built from the clone's file (nothing
    copied): its headings, and its links to docs/<page>.md as links to the site's pages."""
    changelog = (CLONE / "CHANGELOG.md").read_text("utf-8")
    html = page(site, "changelog")
    for heading in re.findall(r"^##+ (.+)$", changelog, re.M)[:5]:
        assert re.sub(r"[`\[\]]", "", heading) in re.sub(r"<[^>]+>|\[|\]", "", html), heading
    linked = re.findall(r"\]\(docs/([\w-]+)\.md(#[\w-]+)?\)", changelog)
    assert linked
    for name, anchor in linked:
        assert f'href="../{name}/{anchor}"' in html, (name, anchor)
    assert "docs/" not in re.findall(r'href="([^"]*)"', html.split("md-content", 1)[1])


def test_every_page_shows_the_packages_version(site: Path) -> None:
    for name in ("quickstart", "python-api", "changelog"):
        assert f"django-schedulinator {django_schedulinator.__version__}" in page(site, name)


def load_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("site_hooks", CLONE / "docs/_hooks/site.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_repository_link_is_pyprojects(tmp_path: Path) -> None:
    """repo_url is pyproject.toml's [project.urls] Repository, the one place of it (the
    wheel's metadata has it from there too); none while the project has no public address."""
    hooks = load_hooks()
    import tomllib

    project = tomllib.loads((CLONE / "pyproject.toml").read_text())["project"]
    assert hooks.repository_url(CLONE) == project.get("urls", {}).get("Repository")

    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[project.urls]\nRepository = "https://example.org/ds"\n'
    )
    (tmp_path / "django_schedulinator").mkdir()
    (tmp_path / "django_schedulinator" / "__init__.py").write_text('__version__ = "9.1"\n')
    config: dict[str, Any] = {"repo_url": None, "repo_name": "django-schedulinator"}
    hooks.ROOT = tmp_path
    hooks.on_config(config)
    assert config["repo_url"] == "https://example.org/ds"
    assert config["copyright"] == "django-schedulinator 9.1"


# -- in a browser, at a laptop's width -------------------------------------------------------


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served(site: Path, unformatted_site: Path) -> Iterator[dict[str, str]]:
    """Both sites over HTTP (Material's navigation needs its scripts, which file:// pages
    cannot load), on free ports; the servers stop with the module."""
    servers = []
    urls = {}
    for name, root in (("formatted", site), ("unformatted", unformatted_site)):
        handler = functools.partial(QuietHandler, directory=str(root))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        urls[name] = f"http://127.0.0.1:{server.server_address[1]}"
    yield urls
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    path = find_chromium()
    if path is None:
        if browser_required():
            pytest.fail("SCHEDULINATOR_REQUIRE_BROWSER is set but no Chromium was found")
        pytest.skip("no Chromium found (set SCHEDULINATOR_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=path, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


# What a reader cannot see: the navigation's "Home" hidden (scrolled away, or under a sticky
# title: the element at its middle is not the link), code that runs out of its block (it
# scrolls sideways, or is cut off), and a page wider than the window.
LAYOUT = """() => {
  const home = [...document.querySelectorAll('.md-nav--primary .md-nav__link')]
    .find(link => link.textContent.trim() === 'Home');
  const box = home.getBoundingClientRect();
  const hit = document.elementFromPoint(box.left + 4, box.top + box.height / 2);
  const cut = [...document.querySelectorAll('.md-content pre > code')]
    .filter(code => code.scrollWidth > code.clientWidth + 1)
    .map(code => code.textContent.slice(0, 60));
  return {
    home_seen: home.contains(hit),
    cut_code: cut,
    page_width: document.scrollingElement.scrollWidth,
    signatures: document.querySelectorAll('.doc-overloads pre, .doc-signature pre').length,
  };
}"""


@pytest.mark.parametrize("build", ["formatted", "unformatted"])
def test_the_python_api_page_fits_a_laptop(
    chromium: Any, served: dict[str, str], build: str
) -> None:
    """At 1,366 px: "Home" is in sight in the navigation, and no signature (an overload's
    included) runs out of its block, whether mkdocstrings laid them out or not."""
    artifacts = Artifacts()
    view = chromium.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    try:
        view.goto(f"{served[build]}/python-api/")
        view.wait_for_load_state("networkidle")
        layout = view.evaluate(LAYOUT)
        view.screenshot(path=str(artifacts.path(f"docs-python-api-{build}.png")))
        view.goto(
            f"{served[build]}/python-api/#django_schedulinator.registry.TaskRegistry.register"
        )
        view.screenshot(path=str(artifacts.path(f"docs-python-api-overloads-{build}.png")))
    finally:
        view.close()
    assert layout["signatures"] > 0  # the page has them: the check looks at something
    assert layout["home_seen"], layout
    assert layout["cut_code"] == [], layout
    assert layout["page_width"] <= WIDTH, layout


def test_the_quick_start_fits_a_laptop(chromium: Any, served: dict[str, str]) -> None:
    artifacts = Artifacts()
    view = chromium.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    try:
        view.goto(f"{served['formatted']}/quickstart/")
        view.wait_for_load_state("networkidle")
        layout = view.evaluate(LAYOUT)
        toc = view.locator(".md-sidebar--secondary .md-nav__link").all_inner_texts()
        view.screenshot(path=str(artifacts.path("docs-quickstart.png")))
    finally:
        view.close()
    assert layout["home_seen"], layout
    assert layout["cut_code"] == [], layout
    assert [t.strip() for t in toc][: len(QUICKSTART_STEPS)] == QUICKSTART_STEPS
