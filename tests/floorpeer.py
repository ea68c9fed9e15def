"""A table's side of the floor's wire, for the floor's tests: a journal of records chained with
``proof.record_hash``, signed checkpoints, and (``serve``) a peer on a real broker that publishes
them with their chain entries and answers the auditor's ``replay`` requests from that journal,
as the daemon does (docs/floor.md). Not a mock: the floor cannot tell it from a table."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiomqtt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tableside.daemon.journal import Record
from tableside.floor.judge import judge
from tableside.floor.store import Message
from tableside.wire import proof
from tableside.wire.payloads import DeviceEventPayload

__all__ = ["PeerTable"]


@dataclass
class PeerTable:
    table: str = "cs-01"
    prefix: str = "tableside"
    key: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)
    records: dict[int, Record] = field(default_factory=dict)
    #: seqs this table will not send again (its journal no longer has them)
    pruned_before: int = 0
    #: seqs it will not send again for another reason (the test's "never repaired")
    withheld: set[int] = field(default_factory=set)
    #: replay requests answered: (from_seq, to_seq)
    asked: list[tuple[int, int]] = field(default_factory=list)
    _ts: float = 1764590000.0

    @property
    def head(self) -> Record | None:
        return self.records[max(self.records)] if self.records else None

    def _append(self, topic: str, payload: bytes, retain: bool = False) -> Record:
        head = self.head
        seq = head.seq + 1 if head else 0  # a table's first record is seq 0
        prev = head.hash if head else proof.GENESIS
        self._ts += 0.25
        digest = proof.record_hash(prev, seq, self._ts, topic, retain, payload)
        record = Record(seq, self._ts, topic, retain, payload, prev, digest)
        self.records[seq] = record
        return record

    def next_seq(self) -> int:
        head = self.head
        return head.seq + 1 if head else 0

    def event(self, n: int = 0) -> Record:
        """A device event, journaled."""
        seq = self.next_seq()
        payload = DeviceEventPayload(
            table=self.table, ts=time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            seq=seq, device="shuffler", device_class="shuffler", event="shuffle_complete",
            data={"shuffle_id": n or seq, "card_count": 52},
        ).model_dump_json().encode()  # fmt: skip
        return self._append(f"{self.prefix}/{self.table}/device/shuffler/event", payload)

    def message(self, kind: str, retain: bool = False, raw: bytes | None = None,
                **fields: object) -> Record:  # fmt: skip
        """A record of any of the table's topics (``kind``: ``status``, ``ruling``,
        ``device/shuffler/state``, …) with the envelope filled in, journaled; ``raw``: these
        bytes as its payload instead, chained all the same (what a table with a defect, or an
        impostor that computes hashes, would send)."""
        body = {"table": self.table, "ts": "2026-12-01T08:00:00.000Z", "seq": self.next_seq(),
                "republished": False, "redelivered": False, "test_clock": None}  # fmt: skip
        body |= fields
        payload = raw if raw is not None else json.dumps(body, separators=(",", ":")).encode()
        return self._append(f"{self.prefix}/{self.table}/{kind}", payload, retain)

    def checkpoint(self, key: Ed25519PrivateKey | None = None) -> Record:
        """A signed checkpoint of the newest record (with another key: a forged one)."""
        head = self.head
        assert head is not None
        signer = key or self.key
        body = {
            "table": self.table, "ts": "2026-12-01T08:00:00.000Z", "seq": head.seq + 1,
            "republished": False, "redelivered": False, "test_clock": None,
            "upto_seq": head.seq, "head": head.hash.hex(),
            "key": proof.public_key_hex(signer),
            "signature": proof.sign_checkpoint(signer, self.table, head.seq, head.hash).hex(),
        }  # fmt: skip
        payload = json.dumps(body, separators=(",", ":")).encode()
        return self._append(f"{self.prefix}/{self.table}/checkpoint", payload)

    @property
    def public(self) -> Ed25519PublicKey:
        return self.key.public_key()

    def wire(self, record: Record, **flags: bool) -> tuple[str, bytes, bool, list[tuple[str, str]]]:
        """(topic, payload, retain, user properties) as the table sends the record."""
        chain = proof.Chain(record.prev_hash, record.hash, record.ts)
        return (
            record.topic,
            proof.marked(record.payload, **flags),
            record.retain,
            chain.properties(),
        )

    def replay_payload(self, record: Record) -> bytes:
        return json.dumps({
            "table": self.table, "replayed": True, "seq": record.seq, "topic": record.topic,
            "retain": record.retain, "ts": record.ts, "prev": record.prev_hash.hex(),
            "hash": record.hash.hex(), "payload": record.payload.decode(),
        }).encode()  # fmt: skip

    def judged(
        self,
        record: Record,
        keys: Mapping[str, Ed25519PublicKey] | None = None,
        arrival: float | None = None,
        **flags: bool,
    ) -> Message:
        """The record as the floor makes it when it arrives live."""
        topic, payload, retain, props = self.wire(record, **flags)
        return judge(self.prefix, topic, payload, retain, props, arrival or time.time(),
                     keys or {})  # fmt: skip

    def replayed(
        self, record: Record, keys: Mapping[str, Ed25519PublicKey] | None = None
    ) -> Message:
        return judge(self.prefix, f"{self.prefix}/{self.table}/replay",
                     self.replay_payload(record), False, None, time.time(),
                     keys or {})  # fmt: skip

    # -- on a broker -------------------------------------------------------------------------

    async def publish(
        self,
        client: aiomqtt.Client,
        record: Record,
        payload: bytes | None = None,
        **flags: bool,
    ) -> None:
        topic, sent, retain, props = self.wire(record, **flags)
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.UserProperty = props
        await client.publish(
            topic, payload if payload is not None else sent, qos=1, retain=retain,
            properties=properties,
        )  # fmt: skip

    async def serve(self, url: str, ready: Callable[[aiomqtt.Client], None] | None = None) -> None:
        """Answer ``replay`` requests on ``<prefix>/<table>/command/auditor`` from this journal,
        as the daemon does, until cancelled; ``ready`` gets the connected client."""
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        base = f"{self.prefix}/{self.table}"
        async with aiomqtt.Client(
            parts.hostname or "127.0.0.1", parts.port or 1883,
            protocol=aiomqtt.ProtocolVersion.V5, identifier=f"peer-{self.table}",
        ) as client:  # fmt: skip
            await client.subscribe(f"{base}/command/auditor", qos=1)
            if ready is not None:
                ready(client)
            async for message in client.messages:
                request = json.loads(bytes(message.payload))
                if request.get("command") != "replay":
                    continue
                first, last = request["args"]["from_seq"], request["args"]["to_seq"]
                self.asked.append((first, last))
                sent = 0
                for seq in range(max(first, self.pruned_before), last + 1):
                    record = self.records.get(seq)
                    if record is None or seq in self.withheld:
                        continue
                    await client.publish(f"{base}/replay", self.replay_payload(record), qos=1)
                    sent += 1
                result = {
                    "table": self.table, "ts": "2026-12-01T08:00:00.000Z",
                    "seq": self.next_seq(), "republished": False, "redelivered": False,
                    "test_clock": None, "role": "auditor", "device": "table",
                    "command": "replay", "request_id": request.get("request_id"), "ok": True,
                    "error": None, "override": None, "replayed": sent,
                    "pruned_before": self.pruned_before if first < self.pruned_before else None,
                }  # fmt: skip
                # journaled, as the table journals every command's result
                record = self._append(
                    f"{base}/command_result", json.dumps(result, separators=(",", ":")).encode()
                )
                await self.publish(client, record)
                await asyncio.sleep(0)
