"""The distribution's metadata, read from the installed package (the wheel, under the
matrix): the version has one source, the license is the LICENSE file, the classifiers name
exactly the Django and Python versions the matrix in tox.ini tests, and the changelog opens
with the version in the making."""

from __future__ import annotations

import configparser
import re
import sysconfig
from importlib import metadata
from pathlib import Path

from trove_classifiers import classifiers as known_classifiers

import django_schedulinator

PROJECT = Path(__file__).resolve().parent.parent  # the clone: LICENSE, tox.ini
DISTRIBUTION = "django-schedulinator"


def installed() -> metadata.Distribution:
    """The distribution pip installed (the wheel's metadata, or an editable install's), not
    the ``.egg-info`` an editable build leaves in the clone, which is on ``sys.path`` when
    the suite runs there and carries no license file."""
    site = sysconfig.get_paths()["purelib"]
    (found,) = metadata.distributions(name=DISTRIBUTION, path=[site])
    return found


def test_the_version_is_the_installed_distributions() -> None:
    assert django_schedulinator.__version__ == metadata.version(DISTRIBUTION)


def test_the_license_metadata_is_the_license_file() -> None:
    meta = installed().metadata
    assert meta["License-Expression"] == "BSD-3-Clause"
    assert meta.get_all("License-File") == ["LICENSE"]
    text = (PROJECT / "LICENSE").read_text("utf-8")
    assert text.startswith("BSD 3-Clause License\n")
    # The third clause, the one that makes it BSD-3 rather than BSD-2.
    assert "3. Neither the name of the copyright holder nor the names of its" in text
    shipped = installed().read_text("licenses/LICENSE")
    assert shipped == text


def _classifiers() -> list[str]:
    return metadata.metadata(DISTRIBUTION).get_all("Classifier") or []


def test_the_classifiers_are_pypis() -> None:
    assert [c for c in _classifiers() if c not in known_classifiers] == []


def _tested_versions() -> tuple[set[str], set[str]]:
    """The Python and Django versions of tox.ini's environments (py312-django61-sqlite)."""
    tox = configparser.ConfigParser()
    tox.read(PROJECT / "tox.ini", encoding="utf-8")
    pythons, djangos = set(), set()
    for env in tox["tox"]["env_list"].split():
        python = re.search(r"(?:^|-)py3(\d+)(?:-|$)", env)
        django = re.search(r"(?:^|-)django(\d)(\d+)(?:-|$)", env)
        assert python, f"tox.ini: {env} names no Python"
        assert django, f"tox.ini: {env} names no Django"
        pythons.add(f"3.{python[1]}")
        djangos.add(f"{django[1]}.{django[2]}")
    return pythons, djangos


def test_the_classifiers_name_each_tested_version_and_no_other() -> None:
    pythons, djangos = _tested_versions()
    assert pythons == {"3.11", "3.12", "3.13"}
    assert djangos == {"5.2", "6.0", "6.1"}
    assert metadata.metadata(DISTRIBUTION)["Requires-Python"] == ">=3.11"  # the oldest tested
    classified = _classifiers()
    assert {
        c.removeprefix("Programming Language :: Python :: ")
        for c in classified
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    } == pythons
    assert {
        c.removeprefix("Framework :: Django :: ")
        for c in classified
        if re.fullmatch(r"Framework :: Django :: \d+\.\d+", c)
    } == djangos


def test_the_changelog_opens_with_the_version_in_the_making() -> None:
    """The changelog is Keep a Changelog's: while the version is X.Y.Z.devN, its first section
    is ``## [Unreleased]``, the notes of the release being prepared, which name X.Y.Z; once
    released, a section ``## [X.Y.Z]`` exists."""
    text = (PROJECT / "CHANGELOG.md").read_text("utf-8")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    assert sections
    headings = [section.partition("\n")[0] for section in sections]
    in_the_making = re.sub(r"\.dev\d+$", "", django_schedulinator.__version__)
    if in_the_making != django_schedulinator.__version__:
        assert headings[0] == "[Unreleased]"
        assert re.search(rf"\b{re.escape(in_the_making)}\b", sections[0])
    else:
        assert any(heading.startswith(f"[{in_the_making}]") for heading in headings)
