"""The Redis side: the due index (``due``: its shards, ``shard``, one sorted set each,
written by the Lua scripts in ``lua/``; its control plane, ``control``; the values they take
and give, ``entries``), its client (``connection``), the clock every due decision reads
(``clock``: Redis ``TIME``), and the ways rows reach it: the sync after each commit
(``receivers``, ``sync``), the rebuild from SQL (``rebuild``) and the repair of lost writes
(``reconcile``). Nothing here decides when a schedule fires (``timing``) or fires it
(``scheduler``)."""
