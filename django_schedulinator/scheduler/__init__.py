"""The loop behind ``manage.py run_scheduler`` (``worker``) and its stages, in the order an
occurrence passes them: claim and re-check (``claiming``), commit (``pipeline``), hand off
per dispatcher (``lanes``, holding ``leases``), record what the dispatchers return
(``progress``, ``recording``); between passes, the ``chores``. ``transient`` holds what the
threads share about the services they wait on."""
