"""A small Django project that uses django-schedulinator as an application would."""
