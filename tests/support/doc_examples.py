"""The configurations shown in the docs, run by the tests: a block in a page, right after a
marker line ``<!-- example: NAME -->``, is executed (Python) or read as it is (shell commands,
a module to write into a project). A test that uses it proves that the block, copied as it
is, works (it may point the block's URLs at the test's own receivers and brokers).

A block that no test can run says why in a marker line ``<!-- not run: REASON -->`` instead;
tests/test_docs.py checks that every block a user would copy has one or the other.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .commits import committed

DOCS = Path(__file__).resolve().parents[2] / "docs"

# The opening line of a fenced block, maybe indented (in a list item), with its language.
OPENING = re.compile(r"(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^`]*")
MARKER = re.compile(r"<!-- (?P<kind>example|not run): (?P<what>.*?) -->")


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page: its language, its text (dedented), its marker."""

    page: str
    line: int
    lang: str
    text: str
    kind: str | None  # "example", "not run" or None (no marker)
    what: str  # the example's name, or the reason it is not run

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.lang or 'no language'})"


def blocks(page: str) -> list[Block]:
    """Every fenced block of ``page`` (a path under docs/), in order."""
    lines = (DOCS / page).read_text("utf-8").splitlines()
    found = []
    before = ""  # the last line that is not blank
    number = 0
    while number < len(lines):
        opening = OPENING.fullmatch(lines[number])
        if opening is None:
            before = lines[number].strip() or before
            number += 1
            continue
        closing = opening["indent"] + "```"
        end = next(i for i in range(number + 1, len(lines)) if lines[i].rstrip() == closing)
        marker = MARKER.fullmatch(before)
        found.append(
            Block(
                page, number + 1, opening["lang"],
                textwrap.dedent("\n".join(lines[number + 1 : end])),
                marker["kind"] if marker else None, marker["what"] if marker else "",
            )
        )  # fmt: skip
        before = closing
        number = end + 1
    return found


def example(name: str, page: str = "dispatch.md") -> dict[str, Any]:
    """Run the Python block ``name`` and return its names. What it writes commits when it is
    done (``committed``), as in the user's process."""
    namespace: dict[str, Any] = {}
    with committed():
        exec(compile(source(name, page), f"docs/{page} example {name}", "exec"), namespace)
    return namespace


def source(name: str, page: str = "dispatch.md") -> str:
    """The fenced block after the marker, as a user copies it (into a file of its own)."""
    named = [b for b in blocks(page) if b.kind == "example" and b.what == name]
    if not named:
        raise LookupError(f"docs/{page} has no example {name!r}")
    return named[0].text
