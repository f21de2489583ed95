"""Integrations with other services, each switched on by a setting (docs/sentry.md)."""
