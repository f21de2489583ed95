"""Two real releases of the tz database, to switch between: the ``tzdata`` package's
wheels of 2024b and 2025a, downloaded once (with this interpreter's pip, into
``.cache/tzdata/`` of the clone) and unpacked. America/Asuncion differs between them:
2024b keeps Paraguay's daylight saving time (-03 from the first Sunday of October to the
fourth Sunday of March, -04 otherwise), 2025a has the permanent -03 Paraguay adopted in
October 2024.

``use(path)`` points ``zoneinfo`` at one of them, as a host whose system database it is;
``PYTHONTZPATH=path`` does the same for a subprocess."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import zipfile
import zoneinfo
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django_schedulinator.timing import instants, walks, zonedata

from .processes import ROOT

RELEASES = {"2024b": "2024.2", "2025a": "2025.1"}  # IANA release -> the tzdata package's
CACHE = ROOT / ".cache" / "tzdata"


def database(release: str) -> Path:
    """The zone directory of ``release`` (downloaded and unpacked on first use)."""
    package_version = RELEASES[release]
    target = CACHE / package_version
    zones = target / "tzdata" / "zoneinfo"
    if (zones / "tzdata.zi").is_file():
        return zones
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:  # one download for the test processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (zones / "tzdata.zi").is_file():
            _download(package_version, target)
    return zones


def _download(package_version: str, target: Path) -> None:
    wheels = CACHE / "wheels"
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
        "--disable-pip-version-check", f"tzdata=={package_version}", "--dest", str(wheels),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(
            f"Could not download the tzdata package {package_version} (the tests switch "
            f"between two real tz database releases): {done.stderr.strip()}"
        )
    [wheel] = wheels.glob(f"tzdata-{package_version}-*.whl")
    with zipfile.ZipFile(wheel) as unpacked:
        unpacked.extractall(target)


@contextmanager
def use(path: Path) -> Iterator[None]:
    """``zoneinfo`` reads ``path`` as the system's database while inside."""
    before = zoneinfo.TZPATH
    switch([str(path)])
    try:
        yield
    finally:
        switch(list(before))


def switch(tzpath: list[str]) -> None:
    """``zoneinfo`` reads the databases of ``tzpath`` from now on (none: the package's)."""
    zoneinfo.reset_tzpath(to=tzpath)
    zoneinfo.ZoneInfo.clear_cache()
    # The app keeps zones and what it computed with them: a process that changes its
    # database starts afresh (a deploy restarts it).
    for cached in (instants._zone, walks.cron_next, walks.cron_prev, zonedata.release_in_use):
        cached.cache_clear()
