"""A publisher that is not the bottleneck: PUBLISH packets encoded before the clock starts
(mqtt/codec.py's encoder), written to a plain socket with as many QoS 1 messages in flight as
the broker's CONNACK allows (its Receive Maximum), PUBACKs counted as they come.

    python bench/rawpub.py PORT [CLIENT_ID] < lines     # each line: JSON [topic, payload, props]

Prints ``ready`` once connected and encoded, then ``done <messages> <seconds>`` when the broker
has acknowledged every one.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import time

from tableside.mqtt import codec as mqtt


def main() -> None:
    port = int(sys.argv[1])
    client_id = sys.argv[2] if len(sys.argv) > 2 else "bench-rawpub"
    lines = [json.loads(line) for line in sys.stdin if line.strip()]
    packets = [
        mqtt.publish(topic, payload.encode(), qos=1, packet_id=n % 0xFFFF + 1,
                     user_properties=[(k, v) for k, v in props])
        for n, (topic, payload, props) in enumerate(lines)
    ]  # fmt: skip
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = mqtt.Reader()
    sock.sendall(mqtt.connect(client_id, keepalive=60, clean_start=True, session_expiry=0,
                              receive_maximum=100))  # fmt: skip
    connack = None
    while connack is None:
        for packet in reader.feed(sock.recv(65536)):
            if isinstance(packet, mqtt.ConnAck):
                connack = packet
    assert connack.reason == 0, connack
    window = min(connack.receive_maximum, 60_000)
    print("ready", window, flush=True)
    start = time.perf_counter()
    sent = acked = 0
    total = len(packets)
    sock.setblocking(False)
    pending = b""
    while acked < total:
        room = window - (sent - acked)
        want_write = bool(pending) or (sent < total and room > 0)
        readable, writable, _ = select.select([sock], [sock] if want_write else [], [], 5.0)
        if writable:
            if not pending:
                n = min(room, total - sent, 500)
                pending = b"".join(packets[sent : sent + n])
                sent += n
            try:
                done = sock.send(pending)
            except BlockingIOError:
                done = 0
            pending = pending[done:]
        if readable:
            data = sock.recv(1 << 20)
            if not data:
                raise SystemExit("the broker closed the connection")
            acked += sum(1 for p in reader.feed(data) if isinstance(p, mqtt.PubAck))
    elapsed = time.perf_counter() - start
    sock.setblocking(True)
    sock.sendall(mqtt.disconnect())
    sock.close()
    print("done", total, f"{elapsed:.3f}", flush=True)


if __name__ == "__main__":
    main()
