"""The web view's sessions without a server, a clock or a users file (floor/web/sessions.py):
tokens, the idle limit, logout, the users file's changes, and the CSRF token."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from tableside.floor.web.sessions import SESSION_IDLE_S, Sessions
from tableside.floor.web.users import User

BOB = User("bob", "floorperson", "scrypt$bob")
ANN = User("ann", "dealer", "scrypt$ann")


@dataclass
class Roster:
    users: dict[str, User] = field(default_factory=lambda: {"bob": BOB, "ann": ANN})
    version: int = 1

    def get(self, name: str) -> User | None:
        return self.users.get(name)

    def change(self, **users: User | None) -> None:
        for name, user in users.items():
            if user is None:
                self.users.pop(name, None)
            else:
                self.users[name] = user
        self.version += 1


def sessions() -> Sessions:
    counter = itertools.count()
    return Sessions(token=lambda: f"t{next(counter)}")


def test_a_session_is_found_by_its_token_and_ends_idle() -> None:
    store = sessions()
    bob = store.open(BOB, now=100.0)
    assert (bob.token, bob.csrf) == ("t0", "t1")
    assert store.get(bob.token, now=100.0 + SESSION_IDLE_S) is bob  # seen: idle from now
    assert store.get(None, now=0) is None and store.get("", now=0) is None
    assert store.get("nobody's", now=0) is None
    assert store.take_ended() == []
    assert store.get(bob.token, now=100.0 + 2 * SESSION_IDLE_S + 1) is None
    assert store.take_ended() == [(bob, "idle")] and not bob.live
    assert store.take_ended() == [], "each ending is told once"
    assert store.get(bob.token, now=0) is None and len(store) == 0


def test_logout_ends_only_that_session() -> None:
    store = sessions()
    first, second = store.open(BOB, 0), store.open(BOB, 0)
    store.end(first.token, "logout")
    store.end(first.token, "logout")  # twice: told once
    store.end("unknown", "logout")
    assert store.take_ended() == [(first, "logout")]
    assert store.get(second.token, 1) is second


def test_a_user_changed_in_the_users_file_is_logged_out() -> None:
    store, roster = sessions(), Roster()
    bob, ann = store.open(BOB, 0), store.open(ANN, 0)
    store.check_users(roster)
    assert store.take_ended() == []
    roster.change(bob=User("bob", "pit_boss", "scrypt$bob"))  # another role
    store.check_users(roster)
    assert store.take_ended() == [(bob, "user-changed")]
    roster.users.pop("ann")  # not a new version: not looked at
    store.check_users(roster)
    assert store.take_ended() == []
    roster.change()
    store.check_users(roster)
    assert store.take_ended() == [(ann, "user-changed")] and len(store) == 0


def test_the_csrf_token_must_match_whatever_bytes_are_sent() -> None:
    session = sessions().open(BOB, 0)
    assert session.csrf_matches(session.csrf)
    assert not session.csrf_matches("")
    assert not session.csrf_matches(session.csrf + "x")
    assert not session.csrf_matches("\udcff")  # a header's undecodable byte: no crash
