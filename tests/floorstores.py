"""The floor's store as its tests need it: ``store``, each test on SQLite and on a real
PostgreSQL (tests/postgres.py). A plugin of tests/conftest.py, so every test module has it; a
module that defines a ``store`` of its own uses that."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tableside.floor.store import Store, open_store

__all__ = ["store"]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/floor.db"
    else:
        url = request.getfixturevalue("postgres")
    async with open_store(url) as opened:
        yield opened
