#!/usr/bin/env python
"""Runs the example project (see README.md). With no REDIS_URL set, an embedded Valkey server
is started for the demo."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
