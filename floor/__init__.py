"""The floor: every table's MQTT stream collected, verified and kept (docs/floor.md).

``store`` (the audit store: SQLite or PostgreSQL), ``judge`` (what one message is, and its
proof), ``verify`` (a table's chain, and against its journal export), ``service`` (the
``tableside floor run`` service: ingest, chain walk, gap repair, metrics)."""
