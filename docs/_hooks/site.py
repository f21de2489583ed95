"""The docs site's hooks (mkdocs.yml's ``hooks:``; MkDocs runs them, nothing imports them).

- The version: read from the package's ``__version__``, the one place it is written, and
  shown in every page's footer.
- The repository's link (``repo_url``): ``[project.urls] Repository`` of pyproject.toml,
  where the package's metadata takes it from too; the site has none while that is unset.
- The changelog page: docs/changelog.md stands for CHANGELOG.md, which the site builds from
  the file at the root of the clone as it is (nothing copied into docs/), its links to
  ``docs/<page>.md`` made links between the site's pages.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG_PAGE = "changelog.md"
# A link of CHANGELOG.md to a page of the docs: ](docs/scheduling.md#cron)
DOCS_LINK = re.compile(r"\]\(docs/([\w./-]+\.md(?:#[\w-]+)?)\)")


def package_version(root: Path = ROOT) -> str:
    """``__version__`` of django_schedulinator/__init__.py, read as setuptools reads it
    (the docs' build needs no Django)."""
    tree = ast.parse((root / "django_schedulinator" / "__init__.py").read_text("utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [
            "__version__"
        ]:
            return str(ast.literal_eval(node.value))
    raise LookupError("django_schedulinator/__init__.py sets no __version__")


def repository_url(root: Path = ROOT) -> str | None:
    """pyproject.toml's ``[project.urls] Repository``, or None while the project has none."""
    project = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))["project"]
    url = project.get("urls", {}).get("Repository")
    return str(url) if url else None


def changelog_markdown(text: str) -> str:
    """CHANGELOG.md as a page of the site: its links to ``docs/<page>.md`` are links to
    ``<page>.md``, beside it."""
    return DOCS_LINK.sub(r"](\1)", text)


def on_config(config: Any) -> Any:
    config["copyright"] = f"django-schedulinator {package_version(ROOT)}"
    url = repository_url(ROOT)
    if url:
        config["repo_url"] = url
        config["repo_name"] = config["repo_name"] or "django-schedulinator"
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri == CHANGELOG_PAGE:
        return changelog_markdown((ROOT / "CHANGELOG.md").read_text("utf-8"))
    return markdown
