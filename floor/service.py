"""``tableside floor run``: subscribe to every table, store what comes, check the chain as it is
stored, and ask the tables for what is missing (docs/floor.md).

Named tasks in one TaskGroup:

* ``floor-receive``: the floor's own MQTT v5 client (floor/link.py) with a persistent session
  (clean start off, the session kept for a day) subscribed to ``<prefix>/+/#`` (or
  ``$share/<group>/<prefix>/+/#`` when several floors share the load) with retain-as-published,
  so the retain flag a record's hash covers arrives as the table set it. Each message is judged
  (floor/judge.py) as its socket read is parsed, and held, not yet acknowledged.
* ``floor-write``: takes whatever is held (a batch: one transaction), stores it, acknowledges
  it to the broker once committed (so a floor killed at any moment loses nothing the broker
  delivered: the broker sends it again), and walks the chain of each table it touched
  (floor/verify.py) as far as its records are contiguous and linked: at a record that does not
  link, the seq goes to the conflict the chain vouches for, or the walk waits there for the
  table's own record as at a gap (``Floor.walk``); a withheld stand-in (a record larger than
  the broker's limit, its chain entry without its content) links only at both ends, so the
  walk takes it with the record after it.
* ``floor-repair``: every ``interval_s`` looks for gaps in the store (the store, not this
  instance's own view: floors sharing a subscription each see part of every table) and asks the
  table for each missing range (and each seq a walk waits at) with the ``replay`` command as
  ``auditor``, at most ``rate_per_s``
  requests a second, again after ``retry_s`` (doubling, at most ``max_retry_s``) while the range
  is still missing, for as long as it is.
* ``floor-tail``: once, at start: asks each known table for what came after the highest seq
  stored (what the floor missed while it was down, when its broker session did not keep it),
  sharing the request rate with the repair.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tableside.drivers.backoff import Backoff
from tableside.floor.judge import judge
from tableside.floor.link import Link, Subscription
from tableside.floor.metrics import FloorMetrics
from tableside.floor.order import SeqOrder, live
from tableside.floor.store import (
    FAILED,
    Message,
    Progress,
    Store,
    StoreError,
    Written,
    stands_in,
)
from tableside.floor.verify import vouched, waits, walk
from tableside.mqtt import codec as mqtt
from tableside.mqtt.connection import MqttError
from tableside.rules.commands import Role
from tableside.wire import proof
from tableside.wire.payloads import CommandRequest, CommandResult, parse_payload
from tableside.wire.topics import TopicKind, Topics, every_table

__all__ = [
    "MAX_REPLAY",
    "SESSION_EXPIRY_S",
    "SHARED_SESSION_EXPIRY_S",
    "Floor",
    "RepairPolicy",
    "default_client_id",
]

log = structlog.get_logger("tableside.floor")

#: how long the broker keeps the floor's session (and queues for it) while it is away
SESSION_EXPIRY_S = 24 * 3600
#: in a shared group: a floor that is gone stops taking its share after this
SHARED_SESSION_EXPIRY_S = 60
#: the most replay requests whose answers a floor waits for (the oldest is forgotten first)
MAX_REPLAYS_WAITING = 10_000
#: the most records one replay request asks for (the table refuses more: rules/commands.py)
MAX_REPLAY = 5_000
#: how long a stopping floor waits for the store to take what it still holds
FLUSH_S = 5.0
#: records read per step of the chain walk
WALK_PAGE = 5_000
#: the most QoS 1 messages the broker may have out to a floor, unacknowledged (MQTT v5 Receive
#: Maximum): the floor acknowledges only what it has stored, so this is what it may hold
RECEIVE_MAXIMUM = 50_000
#: held beyond this (QoS 0 messages, which no Receive Maximum bounds), the floor stops reading
HOLD_MAX = 60_000


def default_client_id() -> str:
    """One stable session per host; a second floor on the same host needs ``--client-id``."""
    return f"tableside-floor-{socket.gethostname()}"


@dataclass(frozen=True)
class RepairPolicy:
    interval_s: float = 2.0
    retry_s: float = 10.0
    max_retry_s: float = 60.0
    rate_per_s: float = 5.0
    #: requests for one range before it is noted as a problem (it is still asked for)
    note_after: int = 5
    #: at start, ask each known table for what came after its highest stored seq
    tail: bool = True


@dataclass
class _Ask:
    tries: int = 0
    next_at: float = 0.0


@dataclass
class Floor:
    store: Store
    url: str
    prefix: str = "tableside"
    share: str | None = None
    client_id: str = field(default_factory=default_client_id)
    username: str | None = None
    password: str | None = None
    repair: RepairPolicy = field(default_factory=RepairPolicy)
    metrics: FloorMetrics = field(default_factory=FloorMetrics)
    #: how long the broker keeps this floor's session while it is away (None: a day alone, a
    #: minute in a shared group, where an absent member's session would take its share of
    #: the group's messages for as long as it is kept: repair fetches them from the tables)
    session_expiry: int | None = None
    #: the most messages stored in one transaction
    batch_max: int = 20_000
    #: called after each batch is stored and its chain walked (and after each repair pass's
    #: walks) with what the store now vouches for, in seq order per table (the web view's feed:
    #: ``_vouched``); what it raises is logged, never the floor's end
    on_stored: Callable[[list[Message]], Awaitable[None]] | None = None
    #: set while subscribed
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)
    #: the broker may have this many messages out to this floor unacknowledged
    receive_maximum: int = RECEIVE_MAXIMUM
    #: holding more than this (not stored yet), the floor stops reading until below half
    hold_max: int = HOLD_MAX
    #: judged messages not stored yet, each with what acknowledges it (connection, packet id)
    _held: deque[tuple[Message, int, int | None]] = field(default_factory=deque)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _keys: dict[str, Ed25519PublicKey] = field(default_factory=dict)
    _link: Link | None = None
    _asks: dict[tuple[str, int, int], _Ask] = field(default_factory=dict)
    #: per table, where this floor's last chain walk stopped, and the chain's start
    _walked: dict[str, tuple[Progress, int]] = field(default_factory=dict)
    _requests: int = 0
    #: the replay requests this floor sent and has not heard answered: request id -> table
    _replays: dict[str, str] = field(default_factory=dict)
    _rate: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: per table, the newest record chained to what is verified (floor/order.py)
    _order: SeqOrder = field(default_factory=SeqOrder)
    #: records the chain walks linked since the feed last took them (``on_stored``)
    _linked: list[Message] = field(default_factory=list)
    #: per table, the seq its walk waits at: a record stored there does not link, and the
    #: table's own record of that seq may still come (repair asks the table for it)
    _held_at: dict[str, int] = field(default_factory=dict)
    #: (table, seq) of each seq a walk waits at that the table answered a replay for
    _told: set[tuple[str, int]] = field(default_factory=set)
    #: the tables whose walk waits at a withheld stand-in the record after it does not link
    #: to: the repair asks for that record too (the stand-in's own may be too large to replay)
    _far: set[str] = field(default_factory=set)
    #: per table, the withheld stand-in its walk stopped before: nothing after it is stored yet
    _standing: dict[str, int] = field(default_factory=dict)

    @property
    def session_expiry_s(self) -> int:
        if self.session_expiry is not None:
            return self.session_expiry
        return SHARED_SESSION_EXPIRY_S if self.share else SESSION_EXPIRY_S

    @property
    def topic(self) -> str:
        wanted = every_table(self.prefix)
        return f"$share/{self.share}/{wanted}" if self.share else wanted

    async def run(self) -> None:
        await self._load_keys()
        async with asyncio.TaskGroup() as group:
            group.create_task(self._receive(), name="floor-receive")
            group.create_task(self._write(), name="floor-write")
            group.create_task(self._repair(), name="floor-repair")
            if self.repair.tail:
                group.create_task(self._tail(), name="floor-tail")

    async def keys_changed(self) -> None:
        """A key was enrolled or revoked (the web view's supervisor): trusted, or no more, from
        the next message on, not only from the next look for gaps."""
        await self._load_keys()

    async def _load_keys(self) -> None:
        keys: dict[str, Ed25519PublicKey] = {}
        for table, text in (await self.store.keys()).items():
            try:
                keys[table] = proof.trusted_key(text)
            except ValueError as exc:
                log.error("floor_key_unreadable", table=table, error=str(exc))
        self._keys = keys

    # -- receiving -------------------------------------------------------------------------------

    async def _receive(self) -> None:
        subscriptions = [Subscription(self.topic)]
        if self.share:  # replays, and the answers to each floor's requests, reach every floor
            subscriptions.append(Subscription(every_table(self.prefix, TopicKind.REPLAY)))
            subscriptions.append(Subscription(every_table(self.prefix, TopicKind.COMMAND_RESULT)))
        self._link = Link(
            self.url, self.client_id, subscriptions, self._take, self.session_expiry_s,
            username=self.username, password=self.password,
            receive_maximum=self.receive_maximum, subscribed=self.subscribed,
            on_subscribed=lambda: log.info("floor_subscribed", broker=self.url, topic=self.topic),
        )  # fmt: skip
        await self._link.run()

    def _take(self, publishes: list[mqtt.Publish], connection: int) -> None:
        """The messages of one socket read: judged now, held until stored and acknowledged."""
        now = time.time()
        held = self._held
        for p in publishes:
            held.append((self._judge(p, now), connection, p.packet_id))
        self._arrived.set()
        if len(held) > self.hold_max and self._link is not None:
            self._link.pause()  # the writer resumes it

    def _judge(self, p: mqtt.Publish, now: float) -> Message:
        try:
            return judge(self.prefix, p.topic, p.payload, p.retain, p.user_properties, now,
                         self._keys)  # fmt: skip
        except Exception as exc:  # a bug in judging must not lose the message: kept, flagged
            log.exception("floor_judge_failed", topic=p.topic)
            return Message("", p.topic, "rejected", None, p.payload, p.retain, now, "rejected",
                           f"the floor could not judge it: {exc!r}")  # fmt: skip

    # -- storing ---------------------------------------------------------------------------------

    async def _write(self) -> None:
        held = self._held
        batch: list[tuple[Message, int, int | None]] = []
        try:
            while True:
                while not held:
                    self._arrived.clear()
                    await self._arrived.wait()
                n = min(len(held), self.batch_max)
                batch = self._marked([held.popleft() for _ in range(n)])
                if self._link is not None and len(held) < self.hold_max // 2:
                    self._link.resume()
                messages = [m for m, _, _ in batch]
                written = await self._store(messages)
                self._ack(batch)
                batch = []
                await self._stored(written, messages)
        except asyncio.CancelledError:
            # stopping: what this floor holds is stored now if the store takes it within a few
            # seconds (and acknowledged if the connection is still up); what is not, the broker
            # sends again to this session, and repair covers the rest
            batch.extend(self._marked(list(held)))
            held.clear()
            if batch:
                with contextlib.suppress(StoreError, TimeoutError):
                    async with asyncio.timeout(FLUSH_S):
                        await self.store.write([m for m, _, _ in batch])
                        log.info("floor_flushed", messages=len(batch))
                        self._ack(batch)
            raise

    def _marked(
        self, taken: list[tuple[Message, int, int | None]]
    ) -> list[tuple[Message, int, int | None]]:
        """What was taken from the hold, each live record whose seq went backwards marked so
        (floor/order.py), once: in the order the messages arrived."""
        marked = self._order.mark(m for m, _, _ in taken)
        return [
            (m, connection, packet_id)
            for m, (_, connection, packet_id) in zip(marked, taken, strict=True)
        ]

    def _ack(self, batch: list[tuple[Message, int, int | None]]) -> None:
        """PUBACK what a committed batch held, on the connection it came on (one gone: the
        broker sends those again, and the store counts them as duplicates)."""
        if self._link is None:
            return
        by_connection: dict[int, list[int]] = {}
        for _, connection, packet_id in batch:
            if packet_id is not None:
                by_connection.setdefault(connection, []).append(packet_id)
        for connection, ids in by_connection.items():
            self._link.ack(connection, ids)

    async def _stored(self, written: Written, batch: list[Message]) -> None:
        """After a batch: metrics, flags, replay results, the chain walk."""
        self._count(batch, written)
        told = [(m.table, m.seq) for m in batch if m.replayed and m.kind == "record"
                and m.seq is not None and self._held_at.get(m.table) == m.seq]  # fmt: skip
        self._told.update(told)
        # each record the batch stored, as the store kept it: the first of its seq the order
        # judge did not hold apart (not a copy held apart, nor a later one kept as a conflict);
        # and a record that took its seq from the withheld stand-in it was sent as
        stored = set(written.stored) | set(written.filled)
        kept: list[Message] = []
        for m in batch:
            key = (m.table, m.seq)
            if m.kind == "record" and key in stored and m.ahead is None and m.behind is None:
                stored.discard(key)
                kept.append(m)
        fresh: dict[str, list[Message]] = {}
        for m in kept:  # a record of the table's chain, stored as it: not one held apart
            if m.what is TopicKind.COMMAND_RESULT and m.verdict == "ok":
                await self._answered(m)
            fresh.setdefault(m.table, []).append(m)  # the walk need not read them back
        advanced: dict[str, Progress] = {}
        # a conflict, or an answer, at the seq a walk waits at may settle it
        touched = _by_table([*written.stored, *written.conflicts, *written.filled, *told])
        for table, seqs in sorted(touched.items()):
            known = self._walked.get(table)
            cont = known[0].contiguous_upto if known else None
            first = cont + 1 if cont is not None else known[1] if known else 0
            # the walk stopped before a withheld stand-in, or waits at one: the record after
            # it may settle it
            stopped = first in (self._standing.get(table), self._held_at.get(table))
            if known is None or first in seqs or (stopped and first + 1 in seqs):
                records = sorted(fresh.get(table, ()), key=lambda m: m.seq or 0)
                await self.walk(table, fresh=False, records=records, advanced=advanced)
            # else: it extends no chain this floor knows of; the repair loop's walk (of
            # the tables with gaps, from their state) takes it up
        if advanced:  # every table's progress in one transaction, not one each
            await self.store.advance_all(advanced)
        await self._feed(await self._vouched(batch, written))

    async def _vouched(self, batch: list[Message], written: Written) -> list[Message]:
        """What the store vouches for after a batch, for the feed: the records the chain walks
        linked, in seq order; the last wills (the broker's word that a table vanished: no
        journal record, but its status); and, for a view that starts after the floor stored
        them, the retained states that came again exactly as stored, linked then (the first
        subscription after a restart brings each one again)."""
        shown = [m for m in batch if m.kind == "will" and m.verdict == "unverifiable"]
        again = set(written.repeated)
        retained = [m for m in batch if m.kind == "record" and (m.table, m.seq or 0) in again
                    and (m.retain or m.republished) and m.verdict == "ok"]  # fmt: skip
        for m in retained:
            walked = self._walked.get(m.table)
            if walked is None:  # not walked by this floor yet (it has just started)
                state = await self.store.state(m.table, with_gaps=False)
                walked = (state.progress, state.pruned_before or 0) if state else None
            upto = walked[0].verified_upto if walked else None
            if upto is None or (m.seq or 0) > upto:
                continue  # not walked yet: its turn comes in the walk
            stored = await self.store.records(m.table, m.seq or 0, m.seq or 0, 1)
            if stored and stored[0].verdict == "ok" and stored[0].hash == m.hash:
                shown.append(m)
        return [*shown, *self._linked_since()]

    async def _feed(self, shown: list[Message]) -> None:
        if self.on_stored is None or not shown:
            return
        try:
            await self.on_stored(shown)
        except Exception:
            log.exception("floor_on_stored_failed", messages=len(shown))

    async def _store(self, batch: list[Message]) -> Written:
        """The batch stored; while the store fails (a database restarting, a disk full), tried
        again and again, the broker's queue and this floor's holding what comes meanwhile."""
        backoff = Backoff(initial=0.2, maximum=10.0)
        while True:
            try:
                return await self.store.write(batch)
            except StoreError as exc:
                delay = backoff.next()
                log.error("floor_store_failed", error=str(exc), batch=len(batch), retry_s=delay)
                await asyncio.sleep(delay)

    def _count(self, batch: list[Message], written: Written) -> None:
        met = self.metrics
        stored = {key for key in written.stored}
        now = time.time()
        for m in batch:
            if m.kind != "record":
                met.stored.labels(m.kind).inc()
            elif (m.table, m.seq) in stored:
                met.stored.labels("record").inc()
                if m.replayed:
                    met.replays_received.inc()
                elif m.chain_ts is not None and live(m):
                    met.lag.observe(max(0.0, now - m.chain_ts))
                if stands_in(m):
                    met.withheld.labels("stand-in").inc()
            if m.verdict in FAILED:
                met.failures.labels(m.verdict).inc()
        met.duplicates.inc(sum(written.duplicates.values()))
        met.withheld.labels("filled-in").inc(len(written.filled))
        met.stored.labels("conflict").inc(len(written.conflicts))
        met.stored.labels("rejected").inc(len(written.backwards) + len(written.ahead))
        met.failures.labels("seq-backwards").inc(len(written.backwards))
        met.failures.labels("seq-ahead").inc(len(written.ahead))

    async def _answered(self, m: Message) -> None:
        """The answer to a replay request of this floor's: the table's journal may start later
        than asked. Believed only from the table asked, to a request id this floor sent (a
        random part each: not one another client can guess), and only as far as the answer's
        own seq (the journal holds the answer itself)."""
        try:
            answer = parse_payload(CommandResult, proof.unmarked(m.payload))
        except ValueError:
            return
        rid = answer.request_id
        if rid is None or self._replays.get(rid) != m.table:
            return
        del self._replays[rid]
        if answer.command != "replay" or answer.role != "auditor":
            return
        pruned = answer.pruned_before
        if pruned is not None and m.seq is not None and pruned <= m.seq:
            await self.store.note_pruned(m.table, pruned)
            self._walked.pop(m.table, None)

    def _linked_since(self) -> list[Message]:
        linked, self._linked = self._linked, []
        return linked

    async def walk(
        self,
        table: str,
        *,
        fresh: bool = True,
        records: list[Message] | None = None,
        advanced: dict[str, Progress] | None = None,
    ) -> None:
        """Check the table's chain from where the last walk stopped, as far as it is stored.
        ``fresh=False``: from where this floor's own last walk stopped (no read of the table's
        state; another floor may have walked further, and this walk then repeats its work).
        ``records``: the table's records just stored, in seq order, walked first without
        reading them back (if they start where the walk does); ``advanced``: the progress is
        put there for the caller to save with others', not saved here."""
        known = None if fresh else self._walked.get(table)
        if known is None:
            state = await self.store.state(table, with_gaps=False)
            if state is None:
                return
            known = (state.progress, state.pruned_before or 0)
        before, start = known
        passes: set[int] = set()  # seqs settled as breaks
        held: int | None = None
        standing: list[int] = []
        while True:
            cont = before.contiguous_upto
            first = cont + 1 if cont is not None else start
            from_batch = bool(records) and records is not None and records[0].seq == first
            if records and from_batch:
                records = [m for m in records if (m.seq or 0) < first + WALK_PAGE]
            else:
                records = await self.store.records(table, first, first + WALK_PAGE - 1, WALK_PAGE)
            if not records or records[0].seq != first:
                break  # the next record (or the chain's start) is not stored yet
            linked = self._linked if self.on_stored is not None else None
            contested: list[int] = []
            standing.clear()
            progress, findings = walk(before, records, start, linked=linked, contested=contested,
                                      passes=passes, standing=standing)  # fmt: skip
            for finding in findings:
                if finding.verdict is not None:
                    await self.store.flag(table, finding.seq, finding.verdict, finding.what)
                    self.metrics.failures.labels(finding.verdict).inc()
                else:
                    await self.store.problem(table, finding.seq, finding.what)
            moved = progress != before
            if moved:
                if not progress.broken and progress.contiguous_hash is not None:
                    self._order.verified(
                        table, progress.contiguous_upto or 0, progress.contiguous_hash
                    )
                if advanced is None:
                    await self.store.advance(table, progress)
                else:
                    advanced[table] = progress
                before = progress
            if contested:
                seq = contested[0]
                settled = await self._settle(table, seq, before, start, records)
                if settled == "waits":
                    held = seq
                    break
                self._far.discard(table)
                if settled == "passes":
                    passes.add(seq)
                    records = [m for m in records if (m.seq or 0) >= seq]
                else:  # promoted: the seq's record is another now, read it back
                    records = None
                continue
            # stopped before a withheld stand-in that ends the batch or the page: the record
            # after it may be in the store
            then = bool(standing) and standing[0] == records[-1].seq
            if not moved:
                if from_batch and then:
                    records = None
                    continue
                break
            if from_batch and progress.contiguous_upto != records[-1].seq:
                records = None  # a seq the batch lacks: the store may have it (stored before)
                continue
            if then and len(records) == WALK_PAGE:
                records = None
                continue
            if progress.contiguous_upto != records[-1].seq or len(records) < WALK_PAGE:
                break
            records = None  # the next page, from the store
        self._walked[table] = (before, start)
        if standing:
            self._standing[table] = standing[0]
        else:
            self._standing.pop(table, None)
        if held is not None:
            self._held_at[table] = held
        elif self._held_at.pop(table, None) is not None:
            self._told = {(t, s) for t, s in self._told if t != table}
            self._far.discard(table)

    async def _settle(
        self, table: str, seq: int, walked: Progress, start: int, page: list[Message]
    ) -> Literal["promoted", "waits", "passes"]:
        """A record the walk could not link (``walked``: the progress up to the seq before
        it): the seq goes to the conflict kept for it that the chain vouches for; or the walk
        waits there for the table's own record, as at a gap; or passes it as a break
        (floor/verify.py ``vouched``, ``waits``)."""
        stored = {m.seq: m for m in page}
        found = await self.store.records(table, seq, seq, 1)  # as stored (a batch's has no id)
        walked_it = stored[seq]
        if not found or (found[0].hash, found[0].payload) != (walked_it.hash, walked_it.payload):
            return "promoted"  # another floor sharing the store settled it: read it back
        occupant = found[0]
        before = proof.GENESIS if seq == 0 else walked.contiguous_hash
        after_it = await self.store.records(table, seq + 1, seq + 1, 1)
        after = after_it[0] if after_it else None
        # a withheld stand-in that links to the record before it, contested because the record
        # after it does not link to it: which of the two is not the table's?
        far = stands_in(occupant) and before is not None and occupant.prev == before
        if far and after is not None and occupant.hash is not None:
            claim = vouched(self.prefix, occupant.hash, await self.store.claims(table, seq + 1),
                            self._keys)  # fmt: skip
            if claim is not None:  # a record of the next seq that links to it: the table's
                await self._promote(table, seq + 1, after, claim)
                return "promoted"
        if before is not None:
            claim = vouched(self.prefix, before, await self.store.claims(table, seq), self._keys,
                            after=after.prev if after is not None else None)  # fmt: skip
            if claim is not None:
                await self._promote(table, seq, occupant, claim)
                return "promoted"
        previous = stored.get(seq - 1)
        if previous is None and seq > start:
            found = await self.store.records(table, seq - 1, seq - 1, 1)
            previous = found[0] if found else None
        rivals = await self.store.claims(table, seq - 1) if occupant.hash is not None else []
        told = (table, seq) in self._told
        if waits(occupant, previous, rivals, start=start, told=told):
            if far:
                self._far.add(table)
            return "waits"
        self._told.discard((table, seq))
        return "passes"

    async def _promote(self, table: str, seq: int, occupant: Message, claim: Message) -> None:
        """The seq goes from the record stored under it to the claim the chain vouches for."""
        await self.store.promote(occupant, claim)
        if claim.what is TopicKind.COMMAND_RESULT and claim.verdict == "ok":
            await self._answered(claim)  # the answer to a replay request, it may be
        self.metrics.failures.labels("unvouched").inc()
        log.warning("floor_claim_gave_way", table=table, seq=seq,
                    chained=occupant.hash is not None)  # fmt: skip
        self._told.discard((table, seq))

    # -- repairing -------------------------------------------------------------------------------

    async def _tail(self) -> None:
        """Once connected: ask every known table for what came after its highest stored seq
        (what this floor missed while away, if its broker session did not keep it)."""
        await self.subscribed.wait()
        for table in await self.store.tables():
            state = await self.store.state(table, with_gaps=False)
            if state is not None and state.highest_seq is not None:
                high = state.highest_seq
                while not await self._ask(table, high + 1, high + MAX_REPLAY):
                    await asyncio.sleep(1.0 / self.repair.rate_per_s)
                    await self.subscribed.wait()  # the broker went away: when it is back

    async def _repair(self) -> None:
        policy = self.repair
        await self.subscribed.wait()
        seen: set[tuple[str, int, int]] = set()
        while True:
            await asyncio.sleep(policy.interval_s)
            await self._load_keys()
            now = time.monotonic()
            missing = 0
            current: set[tuple[str, int, int]] = set()
            for table in await self.store.incomplete():
                await self.walk(table)  # a batch another floor stored may have closed a gap
                for first, last in await self.store.gaps(table):
                    missing += last - first + 1
                    for low in range(first, last + 1, MAX_REPLAY):
                        current.add((table, low, min(last, low + MAX_REPLAY - 1)))
                held = self._held_at.get(table)
                if held is not None:  # the table's own record of the seq the walk waits at
                    current.add((table, held, held))
                    if table in self._far:  # and of the one after the stand-in held there
                        current.add((table, held + 1, held + 1))
            self.metrics.missing.set(missing)
            await self._feed(self._linked_since())
            for key in sorted(current):
                if key not in seen:
                    continue  # seen once: it may be a batch still being stored; ask next time
                ask = self._asks.setdefault(key, _Ask())
                if now < ask.next_at:
                    continue
                table, first, last = key
                if not await self._ask(table, first, last):
                    break  # no broker: try again next time
                ask.tries += 1
                delay = min(policy.max_retry_s, policy.retry_s * 2 ** (ask.tries - 1))
                ask.next_at = now + delay
                if ask.tries == policy.note_after:
                    await self.store.problem(
                        table, first, f"seq {first}..{last} still missing after {ask.tries} "
                        "replay requests (the table is down, or its journal lacks them)",
                    )  # fmt: skip
            self._asks = {k: v for k, v in self._asks.items() if k in current}
            seen = current

    async def _ask(self, table: str, first: int, last: int) -> bool:
        """Ask the table to send ``first..last`` again; False when there is no broker."""
        async with self._rate:  # one request at a time, the tail's and the repair's together
            link = self._link
            if link is None or not self.subscribed.is_set():
                return False
            self._requests += 1
            rid = f"floor-{self.client_id[:64]}-{self._requests}-{secrets.token_hex(8)}"
            body = CommandRequest(command="replay", device="table", request_id=rid,
                                  args={"from_seq": first, "to_seq": last})  # fmt: skip
            self._replays[rid] = table
            while len(self._replays) > MAX_REPLAYS_WAITING:  # unanswered: forget the oldest
                del self._replays[next(iter(self._replays))]
            topic = Topics(self.prefix, table).command(Role.AUDITOR)
            try:
                await link.publish(topic, body.model_dump_json().encode())
            except MqttError:
                return False
            self.metrics.replays_requested.inc()
            log.info("floor_replay_requested", table=table, first=first, last=last)
            await asyncio.sleep(1.0 / self.repair.rate_per_s)  # the bound on the request rate
            return True


def _by_table(keys: list[tuple[str, int]]) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for table, seq in keys:
        found.setdefault(table, set()).add(seq)
    return found
