"""What .ci/run built ships what it should: python .ci/check_dist.py DIST_DIR.

- The wheel holds exactly the package as the clone tracks it (django_schedulinator/: the
  modules, migrations, Lua scripts, templates, static files, catalog, py.typed), plus its
  .dist-info with the license.
- The sdist holds every file the clone tracks except CI's own (.ci/, .gitignore): the
  wheel is built from it, and a packager runs the suite from it (MANIFEST.in says why).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "django_schedulinator/"
NOT_IN_THE_SDIST = (".ci/", ".gitignore")


def tracked() -> set[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True
    ).stdout
    return {name for name in out.split("\0") if name and (ROOT / name).is_file()}


def compare(what: str, expected: set[str], found: set[str]) -> list[str]:
    return [f"missing from the {what}: {name}" for name in sorted(expected - found)] + [
        f"in the {what} but not tracked by git: {name}" for name in sorted(found - expected)
    ]


def check_wheel(wheel: Path, files: set[str]) -> list[str]:
    names = set(zipfile.ZipFile(wheel).namelist())
    info = {name for name in names if name.split("/")[0].endswith(".dist-info")}
    problems = compare("wheel", {f for f in files if f.startswith(PACKAGE)}, names - info)
    if not any(name.endswith(".dist-info/licenses/LICENSE") for name in info):
        problems.append("missing from the wheel: .dist-info/licenses/LICENSE")
    return problems


def check_sdist(sdist: Path, files: set[str]) -> list[str]:
    with tarfile.open(sdist) as archive:
        members = [m.name.split("/", 1) for m in archive.getmembers() if m.isfile()]
    names = {rest for _, rest in members}
    # What setuptools writes into every sdist.
    made = {n for n in names if n in {"PKG-INFO", "setup.cfg"} or ".egg-info/" in n}
    expected = {f for f in files if not f.startswith(NOT_IN_THE_SDIST)}
    return compare("sdist", expected, names - made)


def main(dist: Path) -> int:
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    files = tracked()
    problems = check_wheel(wheel, files) + check_sdist(sdist, files)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"{wheel.name} and {sdist.name}: contents ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
