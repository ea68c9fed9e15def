"""MQTT for every part of tableside, on no MQTT library: ``codec`` the packets as bytes (no I/O),
``connection`` one client connection on ``asyncio.Protocol``, ``window`` the table's in-flight
window (records in, publishes out, PUBACKs in, acknowledged seqs out; no I/O). docs/mqtt.md says
why our own: each part needs something a library gives only through its internals (the floor's
acknowledgement after its commit, the table's publish straight from the journal's callback)."""
