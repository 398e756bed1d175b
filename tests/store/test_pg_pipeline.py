"""The loop writer's one-round-trip pipeline (service.store._pg_pipeline) on a real PostgreSQL:
results and their types, statements prepared once per connection, errors part-way, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from service.store import _pg_pipeline
from service.store._pg_pipeline import Statement


def test_psycopg_placeholders_become_numbered_ones() -> None:
    named = Statement.from_psycopg("SELECT %(a)s::int + %(b)s::int + %(a)s::int", prefix="t")
    assert named.text == b"SELECT $1::int + $2::int + $1::int"
    assert named.parameters == ("a", "b")
    assert named.bind({"b": 2, "a": 1, "c": 3}) == (named, [1, 2])
    positional = Statement.from_psycopg("SELECT %s::int, %s::text", prefix="t")
    assert positional.text == b"SELECT $1::int, $2::text"
    # Named for the text: the same text the same name, another text another.
    assert Statement.from_psycopg("SELECT %s::int, %s::text", prefix="t").name == positional.name
    assert positional.name != named.name and positional.name.startswith(b"t_")
    with pytest.raises(ValueError, match="mixed"):
        Statement.from_psycopg("SELECT %(a)s, %s", prefix="t")
    with pytest.raises(ValueError, match="literal"):
        Statement.from_psycopg("SELECT 'a%%' || %s", prefix="t")


def _on_connection(postgres_url: str, body: Callable[[psycopg.AsyncConnection[Any]], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        connection = await psycopg.AsyncConnection.connect(
            postgres_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
        )
        try:
            await connection.execute(
                "CREATE TABLE IF NOT EXISTS probe (id integer PRIMARY KEY, at timestamptz)"
            )
            return await body(connection)
        finally:
            await connection.close()

    return asyncio.run(main())


INSERT = Statement.from_psycopg(
    "INSERT INTO probe (id, at) VALUES (%(id)s::int, %(at)s::timestamptz)", prefix="t"
)
SELECT = Statement.from_psycopg(
    "SELECT id, at, %s::json FROM probe WHERE id = ANY(%s::int[]) ORDER BY id", prefix="t"
)


async def _prepared_here(connection: psycopg.AsyncConnection[Any]) -> list[str]:
    cursor = await connection.execute("SELECT name FROM pg_prepared_statements ORDER BY name")
    return [row[0] for row in await cursor.fetchall()]


def test_a_transaction_in_one_pipeline_returns_each_statements_rows_typed(postgres_url: str) -> None:
    at = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)

    async def body(connection: psycopg.AsyncConnection[Any]) -> None:
        rows = await _pg_pipeline.run(
            connection,
            [
                b"BEGIN",
                INSERT.bind({"id": 1, "at": at}),
                INSERT.bind({"id": 2, "at": at}),
                (SELECT, ['{"k": [1, 2]}', [1, 2, 3]]),
                b"COMMIT",
            ],
        )
        assert rows == [[], [], [], [(1, at, {"k": [1, 2]}), (2, at, {"k": [1, 2]})], []]
        assert connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        # Prepared once each, under their own names; a second run sends no second Parse (which
        # PostgreSQL would refuse: the names exist).
        assert await _prepared_here(connection) == sorted([INSERT.name.decode(), SELECT.name.decode()])
        rows = await _pg_pipeline.run(connection, [INSERT.bind({"id": 3, "at": at}), (SELECT, ["null", [3]])])
        assert rows == [[], [(3, at, None)]]

    _on_connection(postgres_url, body)


def test_an_error_part_way_raises_it_and_runs_nothing_after_it(postgres_url: str) -> None:
    at = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)

    async def body(connection: psycopg.AsyncConnection[Any]) -> None:
        await _pg_pipeline.run(connection, [INSERT.bind({"id": 1, "at": at})])
        with pytest.raises(psycopg.errors.UniqueViolation):
            await _pg_pipeline.run(
                connection,
                [b"BEGIN", INSERT.bind({"id": 2, "at": at}), INSERT.bind({"id": 1, "at": at}), b"COMMIT"],
            )
        # The transaction is left failed, COMMIT skipped: the caller rolls it back; nothing stayed.
        assert connection.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        await connection.rollback()
        rows = await _pg_pipeline.run(connection, [(SELECT, ["1", [1, 2]])])
        assert [row[0] for row in rows[0]] == [1]

    _on_connection(postgres_url, body)


def test_a_statement_that_fails_to_prepare_is_prepared_again_next_time(postgres_url: str) -> None:
    later = Statement.from_psycopg("SELECT count(*) FROM created_later WHERE n > %s::int", prefix="t")

    async def body(connection: psycopg.AsyncConnection[Any]) -> None:
        with pytest.raises(psycopg.errors.UndefinedTable):
            await _pg_pipeline.run(connection, [(later, [0])])
        # A statement prepared in a pipeline that then failed stays prepared (and is not sent again).
        with pytest.raises(psycopg.errors.UndefinedTable):
            await _pg_pipeline.run(connection, [(SELECT, ["1", [1]]), (later, [0])])
        assert SELECT.name.decode() in await _prepared_here(connection)
        await connection.execute("CREATE TABLE created_later (n integer)")
        assert await _pg_pipeline.run(connection, [(SELECT, ["1", [1]]), (later, [0])]) == [[], [(0,)]]

    _on_connection(postgres_url, body)


def test_a_cancelled_wait_closes_the_connection(postgres_url: str) -> None:
    sleep = Statement.from_psycopg("SELECT pg_sleep(%s::float8)", prefix="t")

    async def body(connection: psycopg.AsyncConnection[Any]) -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(_pg_pipeline.run(connection, [(sleep, [5])]), timeout=0.2)
        # Its protocol state is unknown part-way: it is not left for reuse.
        assert connection.closed

    _on_connection(postgres_url, body)
