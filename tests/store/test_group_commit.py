"""The group-commit writer on SQLite and PostgreSQL: batching, per-job outcomes, failures, closing.

The jobs write rows of a real table (``api_keys``, the simplest one) so that a unique constraint can
make one job fail inside a batch.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, func, insert, select
from sqlalchemy.exc import IntegrityError, OperationalError

from service.store import migrate
from service.store.engine import build_engine
from service.store.group_commit import GroupCommitWriter, WriterClosed
from service.store.tables import api_keys
from service.store.uow import UnitOfWork

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


class Rejected(Exception):
    """A per-job answer: the job was refused without writing."""


def _insert_prefixes(connection: Connection, jobs: Sequence[str]) -> list[Any]:
    outcomes: list[Any] = []
    for prefix in jobs:
        if prefix.startswith("reject"):
            outcomes.append(Rejected(prefix))
            continue
        connection.execute(
            insert(api_keys).values(
                prefix=prefix,
                key_hash=prefix.ljust(64, "0"),
                tenant="t",
                name="",
                scopes="read",
                created_at=NOW,
            )
        )
        outcomes.append(prefix.upper())
    return outcomes


def _stored(engine: Engine) -> set[str]:
    with UnitOfWork(engine, write=False) as uow:
        return set(uow.connection.execute(select(api_keys.c.prefix)).scalars())


async def _submit_all(writer: GroupCommitWriter[str, str], jobs: list[str]) -> list[Any]:
    return await asyncio.gather(*(writer.submit(job) for job in jobs), return_exceptions=True)


def test_concurrent_jobs_share_transactions_and_each_gets_its_own_answer(engine: Engine) -> None:
    gate = threading.Event()
    first_batch: list[int] = []

    def process(connection: Connection, jobs: Sequence[str]) -> list[Any]:
        if not first_batch:
            first_batch.append(len(jobs))
            gate.wait(10)  # hold the first transaction so the rest queue behind it
        return _insert_prefixes(connection, jobs)

    writer: GroupCommitWriter[str, str] = GroupCommitWriter(engine, process)

    async def scenario() -> list[Any]:
        first = asyncio.ensure_future(writer.submit("k000"))
        while not first_batch:
            await asyncio.sleep(0.001)
        rest = [asyncio.ensure_future(writer.submit(f"k{i:03d}")) for i in range(1, 50)]
        await asyncio.sleep(0.05)
        gate.set()
        return await asyncio.gather(first, *rest)

    try:
        answers = asyncio.run(scenario())
    finally:
        writer.close()
    assert answers == [f"K{i:03d}" for i in range(50)]
    assert _stored(engine) == {f"k{i:03d}" for i in range(50)}
    # The 49 queued behind the held transaction were committed together, not one by one.
    assert first_batch == [1]
    assert writer.jobs == 50
    assert writer.batches == 2


def test_a_rejected_job_writes_nothing_and_does_not_fail_the_others(engine: Engine) -> None:
    writer: GroupCommitWriter[str, str] = GroupCommitWriter(engine, _insert_prefixes)
    try:
        answers = asyncio.run(_submit_all(writer, ["a1", "reject-me", "a2"]))
    finally:
        writer.close()
    assert answers[0] == "A1" and answers[2] == "A2"
    assert isinstance(answers[1], Rejected)
    assert _stored(engine) == {"a1", "a2"}


def test_a_job_that_breaks_a_constraint_is_retried_alone_and_only_it_fails(engine: Engine) -> None:
    with UnitOfWork(engine, write=True) as uow:
        _insert_prefixes(uow.connection, ["taken"])
        uow.commit()
    gate = threading.Event()
    calls: list[list[str]] = []

    def process(connection: Connection, jobs: Sequence[str]) -> list[Any]:
        calls.append(list(jobs))
        if len(calls) == 1:
            gate.wait(10)
        return _insert_prefixes(connection, jobs)

    writer: GroupCommitWriter[str, str] = GroupCommitWriter(engine, process)

    async def scenario() -> list[Any]:
        hold = asyncio.ensure_future(writer.submit("b0"))
        while not calls:
            await asyncio.sleep(0.001)
        batch = [asyncio.ensure_future(writer.submit(job)) for job in ("b1", "taken", "b2")]
        await asyncio.sleep(0.05)
        gate.set()
        return await asyncio.gather(hold, *batch, return_exceptions=True)

    try:
        answers = asyncio.run(scenario())
    finally:
        writer.close()
    assert answers[0] == "B0" and answers[1] == "B1" and answers[3] == "B2"
    assert isinstance(answers[2], IntegrityError)
    # The batch of three failed as a whole, then each ran alone: the good ones are stored once.
    assert calls[1] == ["b1", "taken", "b2"]
    assert calls[2:] == [["b1"], ["taken"], ["b2"]]
    assert _stored(engine) == {"taken", "b0", "b1", "b2"}


def test_an_operational_error_fails_the_whole_batch_without_retrying(engine: Engine) -> None:
    calls: list[int] = []

    def process(connection: Connection, jobs: Sequence[str]) -> list[Any]:
        calls.append(len(jobs))
        _insert_prefixes(connection, jobs)
        raise OperationalError("SELECT 1", {}, Exception("database is locked"))

    writer: GroupCommitWriter[str, str] = GroupCommitWriter(engine, process)
    try:
        answers = asyncio.run(_submit_all(writer, ["c1", "c2", "c3"]))
    finally:
        writer.close()
    assert all(isinstance(answer, OperationalError) for answer in answers)
    assert sum(calls) == 3  # no second attempt job by job
    assert _stored(engine) == set()  # rolled back


def test_a_connection_lost_while_idle_is_replaced_and_the_batch_still_commits(postgres_url: str) -> None:
    """PostgreSQL: the writer holds its connection between batches (no pre-ping; SQLite checks one
    out per batch). One that dies meanwhile (a restart, an idle timeout; here its backend is
    terminated) fails the next batch's first statement, and the batch runs again on a new one."""
    migrate.upgrade(postgres_url)
    engine = build_engine(postgres_url, pool_size=2)
    writer: GroupCommitWriter[str, str] = GroupCommitWriter(engine, _insert_prefixes)
    try:
        assert asyncio.run(_submit_all(writer, ["l1"])) == ["L1"]
        held = writer._thread_connection
        assert held is not None
        backend_pid = held.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
        with engine.connect() as admin:
            admin.exec_driver_sql(f"SELECT pg_terminate_backend({int(backend_pid)})")
        assert asyncio.run(_submit_all(writer, ["l2", "l3"])) == ["L2", "L3"]
        assert writer._thread_connection is not held
        assert _stored(engine) == {"l1", "l2", "l3"}
    finally:
        writer.close()
        engine.dispose()


def test_batches_stop_at_the_weight_limit_but_always_take_one_job(engine: Engine) -> None:
    sizes: list[int] = []
    gate = threading.Event()

    def process(connection: Connection, jobs: Sequence[str]) -> list[Any]:
        sizes.append(len(jobs))
        if len(sizes) == 1:
            gate.wait(10)
        return _insert_prefixes(connection, jobs)

    writer: GroupCommitWriter[str, str] = GroupCommitWriter(
        engine, process, weight=lambda job: 100 if job.startswith("heavy") else 1, max_batch_weight=3
    )

    async def scenario() -> None:
        hold = asyncio.ensure_future(writer.submit("w0"))
        while not sizes:
            await asyncio.sleep(0.001)
        queued = [asyncio.ensure_future(writer.submit(job)) for job in ("heavy1", "w1", "w2", "w3", "w4")]
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.gather(hold, *queued)

    try:
        asyncio.run(scenario())
    finally:
        writer.close()
    # heavy1 alone (weight 100 ≥ 3), then w1..w3 (weight 3), then w4.
    assert sizes == [1, 1, 3, 1]
    with UnitOfWork(engine, write=False) as uow:
        assert uow.connection.execute(select(func.count()).select_from(api_keys)).scalar_one() == 6


def test_a_closed_writer_refuses_new_jobs(engine: Engine) -> None:
    writer: GroupCommitWriter[str, str] = GroupCommitWriter(engine, _insert_prefixes)
    assert asyncio.run(writer.submit("d1")) == "D1"
    writer.close()
    writer.close()  # idempotent
    with pytest.raises(WriterClosed):
        asyncio.run(writer.submit("d2"))
    assert _stored(engine) == {"d1"}


# --------------------------------------------------------------------------------------------------
# Inline batches: light jobs committed on the event loop (SQLite only)


def test_light_jobs_of_one_loop_turn_share_one_inline_transaction(engine: Engine) -> None:
    threads: list[int] = []

    def process(connection: Connection, jobs: Sequence[str]) -> list[Any]:
        threads.append(threading.get_ident())
        return _insert_prefixes(connection, jobs)

    writer: GroupCommitWriter[str, str] = GroupCommitWriter(engine, process, inline_max_weight=1)
    try:
        answers = asyncio.run(_submit_all(writer, [f"i{i}" for i in range(20)]))
        loop_thread = threading.get_ident()
    finally:
        writer.close()
    assert answers == [f"I{i}" for i in range(20)]
    assert _stored(engine) == {f"i{i}" for i in range(20)}
    if engine.dialect.name == "sqlite":
        assert writer.inline_batches == writer.batches == 1  # all twenty, on the loop's own thread
        assert threads == [loop_thread]
    else:  # PostgreSQL: each statement is a round trip the loop would wait on; always the thread
        assert writer.inline_batches == 0
        assert loop_thread not in threads


@pytest.mark.parametrize("holder", ["thread", "process"])
def test_inline_jobs_go_to_the_thread_while_the_write_lock_is_held_and_the_loop_never_waits(
    sqlite_url: str, holder: str
) -> None:
    """The write lock held by another thread of this process (its in-process lock) or by another
    connection, as another process would (SQLite's own lock): the inline unit of work gives up at
    once, the writer thread waits for the lock instead, and the loop keeps turning meanwhile."""
    from service.store import migrate
    from service.store.engine import build_engine

    migrate.upgrade(sqlite_url)
    engine = build_engine(sqlite_url, pool_size=2)
    released = threading.Event()
    holding = threading.Event()

    def hold_the_lock() -> None:
        if holder == "thread":
            with UnitOfWork(engine, write=True):
                holding.set()
                released.wait(10)
            return
        other = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        holding.set()
        released.wait(10)
        other.execute("ROLLBACK")
        other.close()

    holder_thread = threading.Thread(target=hold_the_lock)
    holder_thread.start()
    holding.wait(10)
    writer: GroupCommitWriter[str, str] = GroupCommitWriter(engine, _insert_prefixes, inline_max_weight=1)

    async def scenario() -> tuple[list[Any], int]:
        ticks = 0
        jobs = asyncio.ensure_future(_submit_all(writer, ["h1", "h2", "h3"]))
        for _ in range(20):  # the loop turns while the jobs wait for the lock in the thread
            await asyncio.sleep(0.01)
            ticks += 1
        assert not jobs.done()
        released.set()
        answers = await jobs
        # With the lock free again, the next light job is committed inline.
        answers.append(await writer.submit("h4"))
        return answers, ticks

    try:
        answers, ticks = asyncio.run(scenario())
        assert answers == ["H1", "H2", "H3", "H4"]
        assert ticks == 20
        assert writer.inline_batches == 1 and writer.batches >= 2  # h1-h3 in the thread, h4 inline
        # The inline connection's busy timeout is its usual one between its transactions.
        with UnitOfWork(engine, write=False) as uow:
            assert uow.connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
        assert _stored(engine) == {"h1", "h2", "h3", "h4"}
    finally:
        released.set()
        holder_thread.join()
        writer.close()
        engine.dispose()


def test_a_no_wait_unit_of_work_gives_up_at_once_and_restores_the_busy_timeout(sqlite_url: str) -> None:
    from service.store import migrate
    from service.store.engine import build_engine
    from service.store.uow import WriteLockBusy

    migrate.upgrade(sqlite_url)
    engine = build_engine(sqlite_url, pool_size=1)
    other = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        with engine.connect() as connection:
            other.execute("BEGIN IMMEDIATE")
            started = time.monotonic()
            with (
                pytest.raises(WriteLockBusy),
                UnitOfWork(engine, write=True, wait=False, connection=connection),
            ):
                pass
            assert time.monotonic() - started < 1.0  # not the 30 s busy timeout
            other.execute("ROLLBACK")
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
            assert not connection.closed  # a connection the caller holds stays open
            with UnitOfWork(engine, write=True, wait=False, connection=connection) as uow:
                _insert_prefixes(uow.connection, ["n1"])
                uow.commit()
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
        assert _stored(engine) == {"n1"}
    finally:
        other.close()
        engine.dispose()


def test_closing_commits_the_light_jobs_of_the_loops_last_turn(engine: Engine) -> None:
    writer: GroupCommitWriter[str, str] = GroupCommitWriter(engine, _insert_prefixes, inline_max_weight=1)

    async def scenario() -> list[Any]:
        jobs = [asyncio.ensure_future(writer.submit(f"z{i}")) for i in range(3)]
        await asyncio.sleep(0)  # they reach submit; their inline batch is not committed yet
        writer.close()  # an app's shutdown, on the loop
        return await asyncio.gather(*jobs, return_exceptions=True)

    answers = asyncio.run(scenario())
    assert answers == ["Z0", "Z1", "Z2"]
    assert _stored(engine) == {"z0", "z1", "z2"}
