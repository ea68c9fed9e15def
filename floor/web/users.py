"""Who may log in to the floor's web view, and as what.

One JSON file (``--users``, mode 0600, managed with ``tableside floor user``): each user has a
role and a password hash. Hashes are scrypt (``hashlib.scrypt``, a memory-hard KDF: n=2**14,
r=8, p=1, a random 16-byte salt each), stored as ``scrypt$n$r$p$salt$hash`` (base64), compared
in constant time. No password is ever stored or logged.

A user's role is one the tables know (rules/commands.py ``Role``) or ``surveillance``, which
sees everything and may do nothing.
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

__all__ = ["ROLES", "SURVEILLANCE", "User", "Users", "hash_password", "password_matches"]

#: sees every table and ruling, may send nothing
SURVEILLANCE = "surveillance"
ROLES = (*(role.value for role in Role), SURVEILLANCE)

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
    """The users file: read at start and after each change made through this class."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._users: dict[str, User] = {}
        if path.exists():
            self._users = self._read()

    def _read(self) -> dict[str, User]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self.path}: not a users file: {exc}") from exc
        users: dict[str, User] = {}
        for name, entry in raw.get("users", {}).items():
            role = entry.get("role")
            if role not in ROLES:
                raise ValueError(f"{self.path}: user {name!r}: role {role!r} is not one of {ROLES}")
            users[name] = User(name, role, str(entry.get("password", "")))
        return users

    def _write(self) -> None:
        body = {
            "users": {
                u.name: {"role": u.role, "password": u.password_hash} for u in self._users.values()
            }
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(body, out, indent=2, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)

    def set(self, name: str, role: str, password: str) -> User:
        """Add a user or change one's role and password."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"user name {name!r}: lower-case letters, digits, . _ - (max 64)")
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of: {', '.join(ROLES)}")
        if len(password) < MIN_PASSWORD:
            raise ValueError(f"the password is shorter than {MIN_PASSWORD} characters")
        user = User(name, role, hash_password(password))
        self._users[name] = user
        self._write()
        return user

    def remove(self, name: str) -> None:
        if self._users.pop(name, None) is None:
            raise ValueError(f"no user {name!r}")
        self._write()

    def check(self, name: str, password: str) -> User | None:
        """The user, when the password is theirs; None otherwise (unknown names cost the same)."""
        user = self._users.get(name)
        if user is None:
            password_matches(password, _DECOY)
            return None
        return user if password_matches(password, user.password_hash) else None

    def __iter__(self) -> Iterator[User]:
        return iter(sorted(self._users.values(), key=lambda u: u.name))


_DECOY = hash_password(secrets.token_hex(16))
