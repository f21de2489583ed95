"""The REST API: ``path("api/schedulinator/", include("django_schedulinator.api.urls"))``.

Needs the ``api`` extra (Django REST framework, drf-spectacular, django-filter).
"""
