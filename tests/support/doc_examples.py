"""The configurations shown in the docs, run by the tests: a block in a page, right after a
marker line ``<!-- example: NAME -->``, is executed (Python) or read as it is (shell commands,
a module to write into a project). A test that uses it proves that the block, copied as it
is, works (it may point the block's URLs at the test's own receivers and brokers)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[2] / "docs"


def example(name: str, page: str = "dispatch.md") -> dict[str, Any]:
    """Run the Python block ``name`` and return its names."""
    namespace: dict[str, Any] = {}
    exec(compile(source(name, page), f"docs/{page} example {name}", "exec"), namespace)
    return namespace


def source(name: str, page: str = "dispatch.md") -> str:
    """The fenced block after the marker, as a user copies it (into a file of its own)."""
    text = (DOCS / page).read_text()
    match = re.search(rf"<!-- example: {re.escape(name)} -->\s*```\w*\n(.*?)\n```", text, re.DOTALL)
    if match is None:
        raise LookupError(f"docs/{page} has no example {name!r}")
    return match.group(1)
