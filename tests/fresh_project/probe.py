"""Run in the fresh project: checks, migrate, then the schema and the API as a browser and
as a client ask for them. Prints one JSON line: {what: status code}."""

import json

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

call_command("check", fail_level="WARNING")
call_command("migrate", verbosity=0)
client = Client(raise_request_exception=False)
client.force_login(User.objects.create_superuser("admin", "admin@example.com", None))
API = "/api/schedulinator/"
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"  # as Firefox sends
answers = {
    "schema yaml": client.get(f"{API}schema/"),
    "schema json": client.get(f"{API}schema/?format=json"),
    "list as a browser": client.get(f"{API}schedules/", HTTP_ACCEPT=BROWSER),
    "list as a client": client.get(f"{API}schedules/", HTTP_ACCEPT="application/json"),
    "404 as a browser": client.get(f"{API}schedules/404/", HTTP_ACCEPT=BROWSER),
    "runs as a browser": client.get(f"{API}runs/", HTTP_ACCEPT=BROWSER),
}
print(json.dumps({what: response.status_code for what, response in answers.items()}))
ok = answers["schema json"].status_code == 200
print(json.dumps(sorted(json.loads(answers["schema json"].content)["paths"]) if ok else []))
