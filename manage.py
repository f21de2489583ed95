#!/usr/bin/env python
"""Runs the example project (see README.md). With no REDIS_URL set, an embedded Valkey server
is started for the demo."""

import os
import sys

DEMO_SETTINGS = "example_project.settings"
# Commands that never touch Redis: no server is started for them. embedded_redis manages the
# server itself (`embedded_redis stop` must not start one first).
NO_REDIS_COMMANDS = {"embedded_redis", "help", "makemigrations", "--help", "-h", "--version"}


def needs_embedded_redis(argv: list[str]) -> bool:
    from example_project.embedded_redis import configured_url

    if os.environ["DJANGO_SETTINGS_MODULE"] != DEMO_SETTINGS or configured_url():
        return False
    return len(argv) > 1 and argv[1] not in NO_REDIS_COMMANDS


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", DEMO_SETTINGS)
    if needs_embedded_redis(sys.argv):
        from example_project.embedded_redis import EmbeddedRedisError, ensure_running

        try:
            ensure_running()
        except EmbeddedRedisError as exc:
            sys.exit(f"manage.py: {exc}")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
