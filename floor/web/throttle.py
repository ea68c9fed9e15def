"""How many wrong passwords the web view's login takes, and from where (sans-IO: no clock of
its own, no sleeping, no logging; floor/web/app.py does those).

Two budgets, each counted over a window and each locking for a while once spent:

* **per address** (the TCP peer; an IPv6 address by its /64, which one machine holds whole):
  every login from an address that spent its budget is refused, whatever the user name;
* **per user name**, from every address together (a guesser spread over many addresses): a
  name that spent its budget is refused, except from the addresses that name has logged in
  from since the floor started (so the attacker who locks a name does not lock its owner out of
  the terminal they use; those addresses still have their own per-address budget).

A try counts against both budgets while its password is being checked (so a burst of parallel
tries cannot all get past a budget before the first answer), and stays counted if it was
wrong. A right password takes its try back. Nothing is counted for a refused try: a locked
address or name costs the server no password hash.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass, field

__all__ = ["LoginPolicy", "LoginThrottle", "address_of"]


@dataclass(frozen=True, slots=True)
class LoginPolicy:
    """The numbers (docs/floor.md says why these)."""

    #: wrong passwords one address may send in ``window_s`` before it is locked
    per_address: int = 10
    #: wrong passwords one user name may take, from all addresses, before it is locked
    per_user: int = 20
    window_s: float = 15 * 60
    lock_s: float = 15 * 60
    #: every wrong password is answered this much later
    delay_s: float = 1.0
    #: addresses remembered per user as where they logged in from
    known_per_user: int = 16
    #: names and addresses followed at once (the oldest are forgotten first)
    followed: int = 10_000


@dataclass(slots=True)
class _Budget:
    since: float
    wrong: int = 0
    checking: int = 0
    locked_until: float = 0.0


@dataclass(slots=True)
class _Budgets:
    limit: int
    policy: LoginPolicy
    budgets: dict[str, _Budget] = field(default_factory=dict)

    def wait(self, key: str, now: float) -> float:
        """Seconds before ``key`` may try again; 0 when it may now."""
        budget = self.budgets.get(key)
        if budget is None:
            return 0.0
        if budget.locked_until > now:
            return budget.locked_until - now
        if now - budget.since > self.policy.window_s and not budget.checking:
            del self.budgets[key]
            return 0.0
        if budget.wrong + budget.checking >= self.limit:  # spent by tries still being checked
            return self.policy.delay_s
        return 0.0

    def take(self, key: str, now: float) -> None:
        budget = self.budgets.get(key)
        if budget is None:
            if len(self.budgets) >= self.policy.followed:
                del self.budgets[next(iter(self.budgets))]
            budget = self.budgets[key] = _Budget(since=now)
        budget.checking += 1

    def settle(self, key: str, now: float, *, wrong: bool) -> bool:
        """The try's answer; whether it locked ``key``."""
        budget = self.budgets.get(key)
        if budget is None:  # forgotten meanwhile (``followed`` were busier)
            return False
        budget.checking = max(0, budget.checking - 1)
        if not wrong:
            return False
        budget.wrong += 1
        if budget.wrong < self.limit:
            return False
        budget.wrong, budget.since, budget.locked_until = 0, now, now + self.policy.lock_s
        return True


class LoginThrottle:
    """Decides, before a password is checked, whether it may be; told each answer after."""

    def __init__(self, policy: LoginPolicy | None = None) -> None:
        self.policy = policy or LoginPolicy()
        self._addresses = _Budgets(self.policy.per_address, self.policy)
        self._users = _Budgets(self.policy.per_user, self.policy)
        self._known: dict[str, deque[str]] = {}

    def wait(self, user: str, address: str, now: float) -> float:
        """Seconds before this user may try from this address (0: now, and the try is
        counted: ``answer`` must follow)."""
        waits = [self._addresses.wait(address, now)]
        if address not in self._known.get(user, ()):
            waits.append(self._users.wait(user, now))
        wait = max(waits)
        if not wait:
            self._addresses.take(address, now)
            self._users.take(user, now)
        return wait

    def answer(self, user: str, address: str, now: float, *, right: bool) -> list[str]:
        """The checked password was right or wrong; what that locked (``address``, ``user``)."""
        both = (("address", self._addresses, address), ("user", self._users, user))
        locked = [
            scope for scope, budgets, key in both if budgets.settle(key, now, wrong=not right)
        ]
        if right:
            known = self._known.setdefault(user, deque(maxlen=self.policy.known_per_user))
            if address not in known:
                known.append(address)
        return locked


def address_of(remote: str | None) -> str:
    """Whose budget a peer spends: its IP address, or its /64 for IPv6."""
    if not remote:
        return "unknown"
    try:
        ip = ipaddress.ip_address(remote)
    except ValueError:
        return remote
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)
