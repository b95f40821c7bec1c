"""Databases for the tests on the session's PostgreSQL server, created once and reused.

Creating a database costs about 0.1 s here (it copies the template's catalogs through the
WAL, which the server then has to checkpoint); emptying one costs milliseconds. So a test
takes the databases it needs from the pool, gives them back when it is done, and the next
test that takes one gets it empty: every connection still open to it ended, its ``public``
schema dropped and created again. The service then migrates it at startup, as it would a
new database. (Tests about migrations and brand-new databases use ``create_database``.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import asyncpg

from tests.support.pg_server import PostgresServer

T = TypeVar("T")
_EMPTY = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid();
DROP SCHEMA public CASCADE;
CREATE SCHEMA public;
"""


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion from sync code, even inside a running event loop
    (on a thread of its own)."""
    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


class DatabasePool:
    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.free: list[str] = []
        self.created = 0

    def take(self) -> str:
        """The URL of an empty database that no one else uses until it is given back."""
        if self.free:
            name = self.free.pop()
            run_blocking(self._empty(name))
            return self.server.url_for(name)
        self.created += 1
        return self.server.create_database(f"pool_{self.created}")

    def give_back(self, url: str) -> None:
        self.free.append(url.rsplit("/", 1)[1])

    async def _empty(self, name: str) -> None:
        conn = await asyncpg.connect(self.server.url_for(name))
        try:
            await conn.execute(_EMPTY)
        finally:
            await conn.close()
