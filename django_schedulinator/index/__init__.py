"""The Redis side: the due index (``due``: one sorted set per shard, written by the Lua
scripts in ``lua/``), its client (``connection``), the clock every due decision reads
(``clock``: Redis ``TIME``), and the ways rows reach it: the sync after each commit
(``receivers``, ``sync``), the rebuild from SQL (``rebuild``) and the repair of lost writes
(``reconcile``). Nothing here decides when a schedule fires (``timing``) or fires it
(``scheduler``)."""
