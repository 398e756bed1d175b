"""Several statements on an asyncio psycopg connection in one round trip, sent and read through
psycopg's libpq wrapper (``psycopg.pq``) rather than its cursors.

Why: psycopg's own pipeline sends each queued command in a turn of its wait loop of its own (an event
loop wake-up, selector registrations and a ``send`` system call per command) and routes every result
through its cursor machinery. For the measurement-ingest lock (BEGIN and two prepared statements) that
cost 0.65-0.73 ms of the process's CPU per call on a 2-core EPYC, against 0.14-0.26 ms here (the same
statements, prepared, on one connection, 2,000 calls each way, ROLLBACK's own cost taken off): here the
commands are queued in libpq's buffer, flushed once, and the results read as they arrive.

Used only by the event loop's ingest writer (``service.store.ingest``). The statements are prepared
once per connection under names of their own (never psycopg's ``_pg3_*``); results are loaded with
the connection's own loaders (``psycopg.adapt.Transformer``), in text format, as a cursor would.

Errors: the first failing statement's error is raised as psycopg raises it (``psycopg.Error``
subclasses), after every result up to the pipeline's sync point has been read (PostgreSQL skips the
rest of the pipeline after an error, so nothing after it ran; a transaction begun in it is left
failed for the caller to roll back). A wait that is cancelled or fails midway leaves the connection
closed, since its protocol state is then unknown.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq.abc import PGresult

_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_PIPELINE_SYNC = pq.ExecStatus.PIPELINE_SYNC
_FATAL_ERROR = pq.ExecStatus.FATAL_ERROR

_NAMED_PARAMETER = re.compile(r"%\((\w+)\)s")


@dataclass(frozen=True, slots=True)
class Statement:
    """A statement prepared on each connection the first time it is run there."""

    name: bytes
    #: The text with ``$n`` placeholders.
    text: bytes
    #: The parameter names, in ``$n`` order (for :meth:`bind`).
    parameters: tuple[str, ...] = ()

    @classmethod
    def from_psycopg(cls, sql: str, *, prefix: str) -> Statement:
        """From psycopg's parameter style: ``%(name)s`` (each name one ``$n``, however often it is
        used) or ``%s`` (in turn), not both. Named ``prefix`` and a digest of the text (a changed
        text is a new statement)."""
        name = f"{prefix}_{hashlib.blake2b(sql.encode(), digest_size=8).hexdigest()}"
        if "%%" in sql:
            raise ValueError(f"{name}: a literal % is not supported")
        names: list[str] = []

        def named(match: re.Match[str]) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        text = _NAMED_PARAMETER.sub(named, sql)
        if "%s" in text:
            if names:
                raise ValueError(f"{name}: named and positional parameters mixed")
            pieces = text.split("%s")
            text = pieces[0] + "".join(f"${index}{piece}" for index, piece in enumerate(pieces[1:], 1))
        if "%" in text:
            raise ValueError(f"{name}: a parameter placeholder left unconverted")
        return cls(name.encode(), text.encode(), tuple(names))

    def bind(self, values: dict[str, Any]) -> tuple[Statement, Sequence[Any]]:
        """The statement with its named parameters' values, as :func:`run` takes it."""
        return self, [values[name] for name in self.parameters]


#: A command: a statement with its parameter values, or a parameterless text (BEGIN, COMMIT) as is.
Command = tuple[Statement, Sequence[Any]] | bytes

# The statements prepared on each connection (by name); dropped with the connection.
_prepared: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], set[bytes]] = weakref.WeakKeyDictionary()


async def run(
    connection: psycopg.AsyncConnection[Any], commands: Sequence[Command]
) -> list[list[tuple[Any, ...]]]:
    """Send ``commands`` in one pipeline, ending in a sync point; return each command's rows (an
    empty list for those that return none). The connection must be idle and in autocommit mode
    (transactions are the commands' own BEGIN and COMMIT) and used by nobody else meanwhile."""
    pgconn = connection.pgconn
    prepared = _prepared.setdefault(connection, set())
    transformer = Transformer(connection)
    # Per command: whether a prepare result comes first (its name), and where its rows go.
    expected: list[bytes | None] = []
    pgconn.enter_pipeline_mode()
    try:
        for command in commands:
            if isinstance(command, bytes):
                pgconn.send_query_params(command, None)
                expected.append(None)
                continue
            statement, values = command
            preparing = statement.name not in prepared and statement.name not in expected
            if preparing:  # once per connection, the first time in this pipeline
                pgconn.send_prepare(statement.name, statement.text)
            formats = [PyFormat.TEXT] * len(values)
            parameters = transformer.dump_sequence(values, formats) if values else None
            pgconn.send_query_prepared(statement.name, parameters)
            expected.append(statement.name if preparing else None)
        pgconn.pipeline_sync()
        results = await _read_results(connection, len(commands) + sum(name is not None for name in expected))
        pgconn.exit_pipeline_mode()
    except BaseException:
        # The protocol state is unknown (a wait cancelled, a send failed): not reusable.
        _prepared.pop(connection, None)
        await connection.close()
        raise

    rows: list[list[tuple[Any, ...]]] = []
    error: psycopg.Error | None = None
    position = 0
    for name in expected:
        if name is not None:
            prepare_result = results[position]
            position += 1
            if prepare_result.status == _COMMAND_OK:
                prepared.add(name)
            elif prepare_result.status == _FATAL_ERROR and error is None:
                error = psycopg.errors.error_from_result(prepare_result, encoding=connection.info.encoding)
        result = results[position]
        position += 1
        if result.status == _TUPLES_OK:
            transformer.set_pgresult(result)
            rows.append(transformer.load_rows(0, result.ntuples, tuple))
        else:
            if result.status == _FATAL_ERROR and error is None:
                error = psycopg.errors.error_from_result(result, encoding=connection.info.encoding)
            rows.append([])
    if error is not None:
        raise error
    return rows


async def _read_results(connection: psycopg.AsyncConnection[Any], count: int) -> list[PGresult]:
    """Flush what is queued, then read ``count`` results and the sync point's (one per command; a
    command skipped after an error answers PIPELINE_ABORTED)."""
    pgconn = connection.pgconn
    loop = asyncio.get_running_loop()
    socket = pgconn.socket
    while pgconn.flush():  # 1: more to send, once the socket takes it
        await _ready(loop, socket, write=True)
    results: list[PGresult] = []
    while True:
        while pgconn.is_busy():
            await _ready(loop, socket, write=False)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:  # the end of one command's results
            continue
        if result.status == _PIPELINE_SYNC:
            if len(results) != count:
                raise psycopg.InterfaceError(f"{len(results)} results in a pipeline of {count}")
            return results
        results.append(result)


async def _ready(loop: asyncio.AbstractEventLoop, socket: int, *, write: bool) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if write:
        loop.add_writer(socket, wake)
    else:
        loop.add_reader(socket, wake)
    try:
        await ready
    finally:
        if write:
            loop.remove_writer(socket)
        else:
            loop.remove_reader(socket)
