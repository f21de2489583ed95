"""Helpers of the tests: one module per concept (schedules, processes, a private Redis,
receivers, the docs' examples...). Fixtures and hooks stay in tests/conftest.py; what
Django looks for (settings, urls, models, management/, scheduled_tasks.py) stays in
tests/."""
