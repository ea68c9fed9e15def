"""Proof across the wire: what a table sends beside each message so that a receiver (the floor,
docs/floor.md) can check that nothing was altered, inserted, dropped or forged.

The journal chains every record: ``hash = SHA-256(prev_hash ‖ seq ‖ ts ‖ topic ‖ retain ‖
payload)`` (``record_hash``, declared here for the journal and every receiver alike). A table
connected with MQTT v5 sends each journaled message with three user properties, its record's
chain entry:

* ``chain-prev``: the previous record's hash (64 hex digits),
* ``chain-hash``: this record's hash,
* ``chain-ts``: the record's journal time, ``repr`` of the float the hash covers.

The payload on the wire is the journaled payload, except for the envelope's flags a resend sets
(``republished``, ``redelivered``): ``marked`` sets them by replacing their ``false`` in place,
and ``unmarked`` restores the journaled bytes exactly, so a receiver can recompute the hash.

Every so often (and on a clean stop) the table publishes a signed checkpoint on
``<prefix>/<table>/checkpoint``: the seq and hash of its newest record, signed with the table's
Ed25519 key (made at first start, ``<state_dir>/<table>/table-key.pem``). The floor trusts the
public key enrolled for that table; a chain that reaches a signed head is the table's own.

Pure: no I/O but the key file (``load_or_create_key``).
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "CHAIN_HASH",
    "CHAIN_PREV",
    "CHAIN_RETAIN",
    "CHAIN_TS",
    "FINGERPRINT_GROUPS",
    "FLAGS",
    "GENESIS",
    "KEY_FILE",
    "Chain",
    "checkpoint_message",
    "fingerprint",
    "load_or_create_key",
    "marked",
    "public_key_hex",
    "record_hash",
    "sign_checkpoint",
    "trusted_key",
    "unmarked",
    "verify_checkpoint",
]

CHAIN_PREV = "chain-prev"
CHAIN_HASH = "chain-hash"
CHAIN_TS = "chain-ts"
#: ``true`` on a record journaled retained and sent unretained (a broker that keeps none)
CHAIN_RETAIN = "chain-retain"
#: the hash a table's first record chains from
GENESIS = b"\x00" * 32
#: the table's signing key, beside its journal
KEY_FILE = "table-key.pem"
#: envelope flags a resend sets; each is ``false`` in every journaled payload
FLAGS = ("republished", "redelivered")

_HEX64 = re.compile(r"[0-9a-f]{64}")


def record_hash(
    prev: bytes, seq: int, ts: float, topic: str, retain: bool, payload: bytes
) -> bytes:
    """A journal record's chain hash: SHA-256(prev ‖ seq ‖ ts ‖ retain ‖ len(topic) ‖ topic ‖
    payload), the fixed fields big-endian; what a receiver recomputes from the wire."""
    topic_bytes = topic.encode()
    head = struct.pack(">qd?I", seq, ts, retain, len(topic_bytes))
    return hashlib.sha256(prev + head + topic_bytes + payload).digest()


def _flag(name: str, value: bool) -> bytes:
    return f'"{name}":{"true" if value else "false"}'.encode()


def marked(payload: bytes, **flags: bool) -> bytes:
    """The journaled payload with envelope flags set (``redelivered=True``, ``republished=True``).

    The envelope's fields come first in every payload (pydantic dumps a base class's fields
    first, and ``table`` and ``ts`` hold no quotes), so the first ``"<flag>":false`` is the
    envelope's own."""
    for name, value in flags.items():
        if name not in FLAGS:
            raise ValueError(f"not an envelope flag: {name}")
        if value:
            before = _flag(name, False)
            if before not in payload:
                raise ValueError(f"payload has no {before.decode()}")
            payload = payload.replace(before, _flag(name, True), 1)
    return payload


def unmarked(payload: bytes) -> bytes:
    """The payload as journaled: every flag a resend set, cleared again (the inverse of
    ``marked``)."""
    for name in FLAGS:
        payload = payload.replace(_flag(name, True), _flag(name, False), 1)
    return payload


class Chain:
    """One message's chain entry, as its user properties carry it."""

    __slots__ = ("hash", "prev", "ts")

    def __init__(self, prev: bytes, hash: bytes, ts: float) -> None:
        self.prev, self.hash, self.ts = prev, hash, ts

    def properties(self) -> list[tuple[str, str]]:
        """MQTT v5 user properties, as (key, value) pairs in order."""
        return [
            (CHAIN_PREV, self.prev.hex()),
            (CHAIN_HASH, self.hash.hex()),
            (CHAIN_TS, repr(self.ts)),
        ]

    @classmethod
    def from_properties(cls, pairs: list[tuple[str, str]] | None) -> Chain | None:
        """The chain entry a message carries, or None when it carries none (an MQTT 3.1.1
        table, a will, a message that is not a journal record). Malformed values raise
        ValueError, saying which."""
        found = dict(pairs or [])
        if not {CHAIN_PREV, CHAIN_HASH, CHAIN_TS} <= found.keys():
            return None
        for name in (CHAIN_PREV, CHAIN_HASH):
            if not _HEX64.fullmatch(found[name]):
                raise ValueError(f"{name} is not 64 lower-case hex digits: {found[name]!r}")
        prev, digest = bytes.fromhex(found[CHAIN_PREV]), bytes.fromhex(found[CHAIN_HASH])
        return cls(prev, digest, float(found[CHAIN_TS]))

    def holds(self, seq: int, topic: str, retain: bool, payload: bytes) -> bool:
        """Whether this entry's hash is the hash of this message (flags cleared first)."""
        return record_hash(self.prev, seq, self.ts, topic, retain, unmarked(payload)) == self.hash


# -- checkpoints ------------------------------------------------------------------------------


def checkpoint_message(table: str, seq: int, head: bytes) -> bytes:
    """The bytes a checkpoint's signature covers."""
    return f"tableside-checkpoint/1\n{table}\n{seq}\n{head.hex()}".encode()


def sign_checkpoint(key: Ed25519PrivateKey, table: str, seq: int, head: bytes) -> bytes:
    return key.sign(checkpoint_message(table, seq, head))


def verify_checkpoint(
    public: Ed25519PublicKey, table: str, seq: int, head: bytes, signature: bytes
) -> bool:
    try:
        public.verify(signature, checkpoint_message(table, seq, head))
    except InvalidSignature:
        return False
    return True


def public_key_hex(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The raw 32-byte public key in hex: what an operator enrols on the floor."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


#: a key's fingerprint: its 64 hex digits in this many groups of four, numbered from 1
FINGERPRINT_GROUPS = 16


def fingerprint(key_hex: str) -> list[str]:
    """A public key's 64 hex digits in 16 groups of four: what ``tableside key`` prints
    numbered and the floor's enrolment page asks a supervisor to compare (docs/floor.md)."""
    return [key_hex[i : i + 4] for i in range(0, 4 * FINGERPRINT_GROUPS, 4)]


def trusted_key(text: str) -> Ed25519PublicKey:
    """A public key as enrolled: 64 hex digits, or a PEM ``PUBLIC KEY`` block. ValueError says
    what is wrong with it."""
    text = text.strip()
    if _HEX64.fullmatch(text.lower()):
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(text))
    if text.startswith("-----BEGIN PUBLIC KEY-----"):
        loaded = serialization.load_pem_public_key(text.encode())
        if isinstance(loaded, Ed25519PublicKey):
            return loaded
        raise ValueError("the PEM block is not an Ed25519 public key")
    raise ValueError("a table's key is 64 hex digits or a PEM PUBLIC KEY block")


def load_or_create_key(directory: Path) -> Ed25519PrivateKey:
    """The table's signing key from ``directory/table-key.pem``, made (mode 0600, the file and
    its directory synced) when absent."""
    path = directory / KEY_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
            out.flush()
            os.fsync(out.fileno())
        # the file's name too: a power cut before the directory reaches the disk would lose
        # it, and the next start would make another key, one the floor never enrolled
        where = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(where)
        finally:
            os.close(where)
        return key
    loaded = serialization.load_pem_private_key(data, password=None)
    if not isinstance(loaded, Ed25519PrivateKey):
        raise ValueError(f"{path}: not an Ed25519 private key")
    return loaded
