"""The group-commit writer on SQLite and PostgreSQL: batching, per-job outcomes, failures, closing.

The jobs write rows of a real table (``api_keys``, the simplest one) so that a unique constraint can
make one job fail inside a batch.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, func, insert, select
from sqlalchemy.exc import IntegrityError, OperationalError

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
