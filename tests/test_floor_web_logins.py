"""Who the web view still believes (issue 21, attack 5 and the wrong passwords of 6): a user
removed, demoted or given a new password by ``tableside floor user`` (another process) while
the floor runs is out at once, sessions and streams; logout ends its streams; wrong passwords
are slowed and locked per address and per user name."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import pytest
from playwright.async_api import expect

from tableside.floor.web.throttle import LoginPolicy, LoginThrottle, address_of

from .browser import chromium
from .test_floor_web import PASSWORD, Floor, _logged_in, _login, floor
from .test_floor_web_cli import _tableside

__all__ = ["floor"]  # the fixture, imported for these tests

pytestmark = pytest.mark.slow


def _jar() -> aiohttp.CookieJar:
    return aiohttp.CookieJar(unsafe=True)  # the floor listens on an address, not a name


async def _stream_ends(http: aiohttp.ClientSession, url: str, change: Callable[[], None]) -> None:
    """Open ``/events``, read its snapshot, run ``change`` in a thread, and read to its end."""
    async with http.get(url + "/events") as stream:
        assert stream.status == 200
        assert (await stream.content.readline()).startswith(b"event: snapshot")
        await asyncio.to_thread(change)
        async with asyncio.timeout(10):
            while await stream.content.readline():
                pass


@pytest.mark.parametrize("how", ["remove", "demote", "new password"])
async def test_a_user_the_floor_no_longer_trusts_is_out_at_once(floor: Floor, how: str) -> None:
    users = str(floor.app.users.path)

    def change() -> None:
        if how == "remove":
            done = _tableside("floor", "user", "--users", users, "remove", "bob")
        else:
            role, password = ("dealer", PASSWORD) if how == "demote" else ("floorperson", "x" * 12)
            done = _tableside("floor", "user", "--users", users, "add", "bob", "--role", role,
                              "--password-stdin", stdin=password + "\n")  # fmt: skip
        assert done.returncode == 0, done.stderr

    async with aiohttp.ClientSession(headers={"Origin": floor.url}, cookie_jar=_jar()) as http:
        await _logged_in(http, floor.url, "bob")
        await _stream_ends(http, floor.url, change)  # with no request of bob's
        async with http.get(floor.url + "/api/floor") as old_session:
            assert old_session.status == 401
    async with aiohttp.ClientSession(cookie_jar=_jar()) as http:
        form = {"username": "bob", "password": PASSWORD}
        async with http.post(floor.url + "/login", data=form, allow_redirects=False) as again:
            assert again.status == (303 if how == "demote" else 401)
    assert floor.app.metrics.sessions_ended.labels("user-changed")._value.get() == 1


async def test_logout_ends_the_streams_it_opened(floor: Floor) -> None:
    async with aiohttp.ClientSession(headers={"Origin": floor.url}, cookie_jar=_jar()) as http:
        csrf = await _logged_in(http, floor.url, "bob")
        async with http.get(floor.url + "/events") as stream:
            assert (await stream.content.readline()).startswith(b"event: snapshot")
            logout = {"X-CSRF-Token": csrf}
            async with http.post(floor.url + "/logout", headers=logout, allow_redirects=False):
                pass
            async with asyncio.timeout(10):
                while await stream.content.readline():
                    pass
        async with http.get(floor.url + "/events") as after:
            assert after.status == 401


async def test_a_removed_users_open_page_stops_and_goes_to_the_login(floor: Floor) -> None:
    async with chromium() as browser:
        page = await browser.new_page()
        await _login(page, floor.url, "bob")
        users = str(floor.app.users.path)
        removed = await asyncio.to_thread(
            _tableside, "floor", "user", "--users", users, "remove", "bob"
        )
        assert removed.returncode == 0, removed.stderr
        await expect(page.locator("#username")).to_be_visible(timeout=10_000)
        assert page.url.endswith("/login")


async def test_wrong_passwords_lock_the_address_and_a_burst_gets_no_more_tries(
    floor: Floor,
) -> None:
    form = {"username": "bob", "password": "not the password"}
    async with aiohttp.ClientSession(cookie_jar=_jar()) as http:

        async def wrong() -> int:
            async with http.post(floor.url + "/login", data=form) as answer:
                return answer.status

        answers = await asyncio.gather(*(wrong() for _ in range(600)))
        right = {"username": "bob", "password": PASSWORD}
        async with http.post(floor.url + "/login", data=right, allow_redirects=False) as locked:
            assert locked.status == 429 and int(locked.headers["Retry-After"]) > 60
            assert "Too many wrong passwords" in await locked.text()
    limit = floor.app.throttle.policy.per_address
    assert answers.count(401) == limit and answers.count(429) == 600 - limit
    logins = floor.app.metrics.logins
    assert logins.labels("wrong")._value.get() == limit
    assert logins.labels("locked")._value.get() == 600 - limit + 1
    assert floor.app.metrics.login_locks.labels("address")._value.get() == 1


async def test_a_csrf_header_that_is_not_ascii_is_refused_not_500(floor: Floor) -> None:
    async with aiohttp.ClientSession(headers={"Origin": floor.url}, cookie_jar=_jar()) as http:
        await _logged_in(http, floor.url, "bob")
        async with http.post(floor.url + "/logout", headers={"X-CSRF-Token": "é"}) as answer:
            assert answer.status == 403
        for kind in ("multipart/form-data", "application/json"):
            async with http.post(floor.url + "/login", data=b"--x\r\nzz",
                                 headers={"Content-Type": kind}) as login:  # fmt: skip
                assert login.status == 400


def test_a_name_locked_from_everywhere_still_logs_in_where_its_owner_did() -> None:
    policy = LoginPolicy()
    throttle = LoginThrottle(policy)
    assert throttle.wait("bob", "10.0.0.1", 0.0) == 0
    throttle.answer("bob", "10.0.0.1", 0.0, right=True)  # bob's terminal
    for n in range(policy.per_user):  # guessed from many addresses, each within its own budget
        address = f"10.9.{n // 5}.{n}"
        assert throttle.wait("bob", address, 1.0) == 0
        locked = throttle.answer("bob", address, 1.0, right=False)
    assert locked == ["user"]
    assert throttle.wait("bob", "10.7.7.7", 2.0) == pytest.approx(policy.lock_s - 1)
    assert throttle.wait("ann", "10.7.7.7", 2.0) == 0  # other names are not locked
    throttle.answer("ann", "10.7.7.7", 2.0, right=True)
    assert throttle.wait("bob", "10.0.0.1", 2.0) == 0  # bob at his terminal
    throttle.answer("bob", "10.0.0.1", 2.0, right=True)
    assert throttle.wait("bob", "10.7.7.7", 1.0 + policy.lock_s + 0.1) == 0  # and it expires


def test_an_ipv6_machine_spends_one_budget_for_its_whole_64() -> None:
    assert address_of("2001:db8::1") == address_of("2001:db8::ffff:1") == "2001:db8::/64"
    assert address_of("::ffff:10.0.0.1") == "10.0.0.1" and address_of(None) == "unknown"
    throttle = LoginThrottle()
    for n in range(throttle.policy.per_address):  # a new address and a new name each time
        address = address_of(f"2001:db8::{n + 1}")
        assert throttle.wait(f"user{n}", address, 0.0) == 0
        throttle.answer(f"user{n}", address, 0.0, right=False)
    assert throttle.wait("cy", address_of("2001:db8::99"), 0.0) > 0
    assert throttle.wait("cy", address_of("2001:db8:0:1::1"), 0.0) == 0
