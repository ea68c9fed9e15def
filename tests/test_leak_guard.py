"""The leaked-task guard must itself be able to fail a test."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = (Path(__file__).parent / "conftest.py").read_text(encoding="utf-8")


def test_guard_fails_a_test_that_leaks_a_task(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.replace('pytest_plugins = ["pytester"]', ""))
    pytester.makepyfile(
        test_leaky="""
import asyncio

async def test_leaks():
    asyncio.get_running_loop().create_task(asyncio.sleep(60), name="forgotten")

async def test_tidy():
    task = asyncio.get_running_loop().create_task(asyncio.sleep(60))
    task.cancel()
    await asyncio.wait({task})
"""
    )
    result = pytester.runpytest(
        "-p",
        "asyncio",
        "-o",
        "asyncio_mode=auto",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
    )
    # test_leaks itself ran, then its teardown failed it: pytest counts that as an error.
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.re_match_lines([r".*leaked 1 task\(s\): \['forgotten'\].*"])
