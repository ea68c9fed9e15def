"""The web view's sessions, with no I/O: who is logged in under which token, their CSRF token,
when a session ends (idle, logged out, its user changed in the users file) and why.

A session is a random token the browser keeps in a cookie (floor/web/app.py sets it) and a
CSRF token each state-changing request sends back. Time comes in with each call, and what ended
is taken with ``take_ended`` (h11's way: the caller hangs up the ended sessions' streams, counts
and logs them), so every rule here is tested without a server, a clock or a file.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tableside.floor.web.users import User

__all__ = ["COOKIE", "SESSION_IDLE_S", "Roster", "Session", "Sessions"]

#: the cookie that carries a session's token
COOKIE = "tableside_session"
#: a session ends after this long without a request
SESSION_IDLE_S = 8 * 3600


@dataclass(slots=True)
class Session:
    user: User
    token: str
    csrf: str
    last_seen: float
    #: False once the session ended (a stream it opens after that ends at once)
    live: bool = True

    def csrf_matches(self, sent: str) -> bool:
        """Whether ``sent`` (a request's ``X-CSRF-Token``, whatever bytes it holds) is this
        session's CSRF token, compared in constant time."""
        return secrets.compare_digest(sent.encode("utf-8", "surrogateescape"), self.csrf.encode())


class Roster(Protocol):
    """Who the users file names now (floor/web/users.py ``Users``), and its version."""

    @property
    def version(self) -> int: ...

    def get(self, name: str) -> User | None: ...


def _token() -> str:
    return secrets.token_urlsafe(32)


class Sessions:
    """The live sessions, by token."""

    def __init__(self, idle_s: float = SESSION_IDLE_S, token: Callable[[], str] = _token) -> None:
        self.idle_s = idle_s
        self._token = token
        self._by_token: dict[str, Session] = {}
        self._ended: list[tuple[Session, str]] = []
        #: the users file's version the sessions were last checked against
        self._users_version = -1

    def __len__(self) -> int:
        return len(self._by_token)

    def open(self, user: User, now: float) -> Session:
        """A new session for ``user``, with its own token and CSRF token."""
        session = Session(user, self._token(), self._token(), now)
        self._by_token[session.token] = session
        return session

    def get(self, token: str | None, now: float) -> Session | None:
        """The live session of ``token``, seen now; None for no token, an unknown one, or a
        session idle for longer than ``idle_s`` (which ends, "idle")."""
        session = self._by_token.get(token) if token else None
        if session is None:
            return None
        if now - session.last_seen > self.idle_s:
            self.end(session.token, "idle")
            return None
        session.last_seen = now
        return session

    def end(self, token: str, why: str) -> None:
        """The session of ``token`` is over (nothing if there is none)."""
        session = self._by_token.pop(token, None)
        if session is not None:
            session.live = False
            self._ended.append((session, why))

    def check_users(self, users: Roster) -> None:
        """A session whose user the users file no longer names as they were (removed, another
        role, a new password) ends, "user-changed"; nothing to do while its version is the one
        last checked."""
        if users.version == self._users_version:
            return
        self._users_version = users.version
        for token, session in list(self._by_token.items()):
            if users.get(session.user.name) != session.user:
                self.end(token, "user-changed")

    def take_ended(self) -> list[tuple[Session, str]]:
        """The sessions that ended since last asked, each with why, in the order they ended."""
        ended, self._ended = self._ended, []
        return ended
