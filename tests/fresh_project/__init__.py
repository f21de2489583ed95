"""A new project that follows README.md's REST API paragraph and nothing more: no
REST_FRAMEWORK setting, neither rest_framework, django_filters nor drf_spectacular in
INSTALLED_APPS. tests/test_api.py runs it in a subprocess (DRF reads DEFAULT_SCHEMA_CLASS when
the API's views are imported, so it must be a process of its own)."""
