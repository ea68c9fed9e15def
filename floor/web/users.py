"""Who may log in to the floor's web view, and as what.

One JSON file (``--users``, mode 0600, managed with ``tableside floor user``): each user has a
role and a password hash. The running floor re-reads it when it changes (``Users.refresh``), and
the web view ends the sessions of anyone it no longer names as they were.

Hashes are scrypt (``hashlib.scrypt``, a memory-hard KDF: n=2**14, r=8, p=1, a random 16-byte
salt each), stored as ``scrypt$n$r$p$salt$hash`` (base64), compared in constant time. No
password is ever stored or logged.

A user's role is one the tables know (rules/commands.py ``Role``) or one of the floor's own:
``surveillance``, which sees everything and may do nothing, and ``supervisor``, who enrols and
revokes tables' keys (floor/web/records.py) and may send the tables nothing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tableside.rules.commands import Role

__all__ = [
    "ROLES",
    "SUPERVISOR",
    "SURVEILLANCE",
    "User",
    "Users",
    "hash_password",
    "password_matches",
]

#: sees every table and ruling, may send nothing
SURVEILLANCE = "surveillance"
#: enrols and revokes tables' keys on the floor; may send the tables nothing
SUPERVISOR = "supervisor"
ROLES = (*(role.value for role in Role), SURVEILLANCE, SUPERVISOR)

_N, _R, _P = 2**14, 8, 1
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
#: shorter than this is refused when a password is set
MIN_PASSWORD = 10


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    b64 = base64.b64encode
    return f"scrypt${_N}${_R}${_P}${b64(salt).decode()}${b64(digest).decode()}"


def password_matches(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
        )
    except ValueError:
        return False
    return hmac.compare_digest(got, expected)


@dataclass(frozen=True, slots=True)
class User:
    name: str
    role: str
    password_hash: str


class Users:
    """The users file. Another process changes it (``tableside floor user`` replaces it
    atomically), so ``refresh()`` re-reads it whenever its ``stat`` says it is another file or
    was written since; ``version`` counts every change of who is in it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._users: dict[str, User] = {}
        self._seen: tuple[int, ...] | None = None
        #: what is wrong with the file as it is now ("" when nothing): while it is unreadable,
        #: nobody is a user
        self.problem = ""
        self.version = 0
        self.refresh()
        if self.problem:
            raise ValueError(self.problem)

    def refresh(self) -> bool:
        """Re-read the file if it changed since it was last read (one ``stat`` when it did not);
        whether it changed. An unreadable file is a file with no users, and says why."""
        try:
            seen = _signature(os.stat(self.path))
        except FileNotFoundError:
            seen = None
        if seen == self._seen:
            return False
        try:
            seen, users = self._read()
            self.problem = ""
        except ValueError as exc:
            users, self.problem = {}, str(exc)
        self._seen = seen
        self._replace(users)
        return True

    def _replace(self, users: dict[str, User]) -> None:
        if users != self._users:
            self._users = users
            self.version += 1

    def _read(self) -> tuple[tuple[int, ...] | None, dict[str, User]]:
        """The file's signature and users, both from one open file (a replacement between the
        two cannot pair one file's signature with another's users)."""
        try:
            with self.path.open("rb") as file:
                seen = _signature(os.fstat(file.fileno()))
                raw = json.loads(file.read())
        except FileNotFoundError:
            return None, {}
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self.path}: not a users file: {exc}") from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("users", {}), dict):
            raise ValueError(f"{self.path}: not a users file: no users object")
        users: dict[str, User] = {}
        for name, entry in raw.get("users", {}).items():
            role = entry.get("role") if isinstance(entry, dict) else None
            if role not in ROLES:
                raise ValueError(f"{self.path}: user {name!r}: role {role!r} is not one of {ROLES}")
            users[name] = User(name, role, str(entry.get("password", "")))
        return seen, users

    def _write(self, users: dict[str, User]) -> None:
        """``users`` into the file (a new file put in its place), then into this object."""
        body = {
            "users": {u.name: {"role": u.role, "password": u.password_hash} for u in users.values()}
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(body, out, indent=2, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)
        self._seen = _signature(os.stat(self.path))
        self._replace(users)

    def set(self, name: str, role: str, password: str) -> User:
        """Add a user or change one's role and password."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"user name {name!r}: lower-case letters, digits, . _ - (max 64)")
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of: {', '.join(ROLES)}")
        if len(password) < MIN_PASSWORD:
            raise ValueError(f"the password is shorter than {MIN_PASSWORD} characters")
        user = User(name, role, hash_password(password))
        self.refresh()
        self._write({**self._users, name: user})
        return user

    def remove(self, name: str) -> None:
        self.refresh()
        if name not in self._users:
            raise ValueError(f"no user {name!r}")
        self._write({n: u for n, u in self._users.items() if n != name})

    def get(self, name: str) -> User | None:
        return self._users.get(name)

    def check(self, name: str, password: str) -> User | None:
        """The user, when the password is theirs; None otherwise (unknown names cost the same)."""
        user = self._users.get(name)
        if user is None:
            password_matches(password, _DECOY)
            return None
        return user if password_matches(password, user.password_hash) else None

    def __iter__(self) -> Iterator[User]:
        return iter(sorted(self._users.values(), key=lambda u: u.name))


def _signature(stat: os.stat_result) -> tuple[int, ...]:
    """What changes when the file is replaced or written: its inode, size and times."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


_DECOY = hash_password(secrets.token_hex(16))
