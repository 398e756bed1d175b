"""`teff`: the one command-line entry point.

    teff serve                      start the HTTP server (uvicorn) on TEFF_HOST:TEFF_PORT
    teff db upgrade [REVISION]      run the migrations (a deploy step of its own); stores
                                    TEFF_BOOTSTRAP_API_KEY when set and new
    teff db downgrade REVISION      roll back (e.g. `base`)
    teff db current                 print the schema revision and whether it is current
    teff openapi export [PATH]      write the OpenAPI contract (default: openapi.yaml)
    teff keys create --tenant T --scopes read,write [--name N]
    teff keys list [--tenant T]
    teff keys revoke PREFIX
    teff demo                       load the demo fleet (idempotent) and print a new key for it

Exit codes: 0 ok, 1 failure, 2 bad usage or settings.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import yaml

from service.settings import Settings, SettingsError, load_settings, redact_url

if TYPE_CHECKING:
    from service.store.records import RunRecord


def _fail(message: str, code: int = 1) -> int:
    print(f"teff: {message}", file=sys.stderr)
    return code


def _serve(settings: Settings) -> int:
    import uvicorn

    from service.store import migrate
    from service.store.engine import build_engine

    if settings.check_schema_on_start:
        engine = build_engine(settings.effective_database_url, pool_size=1)
        try:
            migrate.ensure_schema_current(engine)
        except migrate.SchemaBehind as exc:
            return _fail(str(exc))
        except Exception as exc:
            return _fail(f"cannot reach the database: {type(exc).__name__}: {redact_url(exc)}")
        finally:
            engine.dispose()
    # Without the check a replica starts during a database outage: the stateless endpoints answer,
    # the store's answer 503 until the database is back.
    try:
        # Bind first, here, so that a busy port is one clear line and exit 1 (uvicorn logs a
        # traceback-free error but exits 1 only after its start-up, and not with workers).
        probe = socket.create_server((settings.host, settings.port))
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        return _fail(f"cannot listen on {settings.host}:{settings.port}: {reason}")
    probe.close()
    base = f"http://{settings.host}:{settings.port}"
    print(
        f"teff: serving on {base} — docs at {base}/docs (ReDoc at {base}/redoc)", file=sys.stderr, flush=True
    )
    uvicorn.run(
        "service.app:app_from_environment",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_config=None,
        access_log=False,
        proxy_headers=False,
        server_header=False,
        # Read deadlines and the header cap (service.http_protocol); idle keep-alive connections.
        http="service.http_protocol:DeadlineHttpProtocol",
        timeout_keep_alive=settings.keep_alive_timeout_seconds,  # type: ignore[arg-type]
    )
    return 0


def _bootstrap_key(settings: Settings) -> int:
    """Store TEFF_BOOTSTRAP_API_KEY (a deploy's first key, from a Secret) when its prefix is new."""
    from service.store import keys
    from service.store.engine import build_engine
    from service.store.uow import UnitOfWork

    assert settings.bootstrap_api_key is not None
    engine = build_engine(settings.effective_database_url, pool_size=1)
    try:
        scopes = keys.parse_scopes(settings.bootstrap_scopes)
        with UnitOfWork(engine, write=True) as uow:
            stored = keys.import_key(
                uow.connection,
                settings.bootstrap_api_key.get_secret_value(),
                tenant=settings.bootstrap_tenant,
                scopes=scopes,
            )
            uow.commit()
    except ValueError as err:
        print(f"teff: TEFF_BOOTSTRAP_API_KEY: {err}", file=sys.stderr)
        return 2
    finally:
        engine.dispose()
    what = "stored" if stored else "already known (left as it is, revoked or not)"
    print(f"teff: bootstrap key for tenant {settings.bootstrap_tenant!r} {what}", file=sys.stderr)
    return 0


def _db(settings: Settings, args: argparse.Namespace) -> int:
    from service.store import migrate
    from service.store.engine import build_engine

    url = settings.effective_database_url
    if args.db_command == "upgrade":
        migrate.upgrade(url, args.revision)
        print(f"teff: database at {', '.join(migrate.head_revisions())} (head)", file=sys.stderr)
        if settings.bootstrap_api_key is not None:
            return _bootstrap_key(settings)
        return 0
    if args.db_command == "downgrade":
        migrate.downgrade(url, args.revision)
        return 0
    engine = build_engine(url, pool_size=1)
    try:
        current = migrate.current_revisions(engine)
    finally:
        engine.dispose()
    heads = migrate.head_revisions()
    state = "current" if current == heads else "behind"
    print(f"{', '.join(current) or '(empty)'} ({state}; head {', '.join(heads)})")
    return 0 if state == "current" else 1


def export_openapi_text() -> str:
    from service.app import create_app

    app = create_app(load_settings(check_schema_on_start=False))
    return yaml.safe_dump(app.openapi(), sort_keys=False, allow_unicode=True, width=100)


def _openapi(args: argparse.Namespace) -> int:
    text = export_openapi_text()
    if args.path == "-":
        sys.stdout.write(text)
    else:
        Path(args.path).write_text(text, encoding="utf-8")
        print(f"teff: wrote {args.path}", file=sys.stderr)
    return 0


def _keys(settings: Settings, args: argparse.Namespace) -> int:
    from service.store import keys
    from service.store.engine import build_engine
    from service.store.uow import UnitOfWork

    engine = build_engine(settings.effective_database_url, pool_size=1)
    try:
        if args.keys_command == "create":
            try:
                scopes = keys.parse_scopes(args.scopes)
            except ValueError as exc:
                return _fail(str(exc), 2)
            with UnitOfWork(engine, write=True) as uow:
                key = keys.create_key(uow.connection, tenant=args.tenant, scopes=scopes, name=args.name)
                uow.commit()
            print(key)
            print(
                f"teff: key for tenant {args.tenant!r} with scopes {','.join(sorted(scopes))}; "
                "it is shown only now, store it safely",
                file=sys.stderr,
            )
            return 0
        if args.keys_command == "list":
            with UnitOfWork(engine, write=False) as uow:
                records = keys.list_keys(uow.connection, tenant=args.tenant)
            print(f"{'prefix':<14} {'tenant':<20} {'scopes':<18} {'created':<26} {'revoked':<26} name")
            for record in records:
                print(
                    f"{record.prefix:<14} {record.tenant:<20} {','.join(sorted(record.scopes)):<18} "
                    f"{record.created_at.isoformat(timespec='seconds'):<26} "
                    f"{record.revoked_at.isoformat(timespec='seconds') if record.revoked_at else '-':<26} "
                    f"{record.name}"
                )
            return 0
        prefix = args.prefix
        if prefix.startswith(keys.KEY_PREFIX + "_"):
            prefix = prefix.split("_")[1]
        with UnitOfWork(engine, write=True) as uow:
            revoked = keys.revoke_key(uow.connection, prefix=prefix)
            uow.commit()
        if not revoked:
            return _fail(f"no active key with prefix {prefix!r}")
        print(f"teff: revoked {prefix}", file=sys.stderr)
        return 0
    finally:
        engine.dispose()


class _ApiRecorder:
    """The API's own computations for the demo (``service.usecases.demo.RunRecorder``): a run body as
    ``POST /v1/runs`` validates and prepares it, measurements as ``POST .../measurements`` parses and
    computes them (the JSON paths themselves: the bodies are encoded and decoded as requests are)."""

    def prepare_run(
        self, body: Mapping[str, Any], *, now: datetime
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        from service.api.run_request import prepare_run
        from service.api.schemas.runs import RunCreate

        prepared = prepare_run(RunCreate.model_validate_json(orjson.dumps(body)), now=now)
        return prepared.values, prepared.tags

    def measurement_values(
        self, run: RunRecord, items: Sequence[Mapping[str, Any]], *, now: datetime
    ) -> list[tuple[Any, ...]]:
        from service.api.measurement_request import parse_measurements
        from service.usecases.ingest import measurement_values

        parsed = parse_measurements(orjson.dumps(list(items)), max_items=max(len(items), 1))
        return measurement_values(run, parsed, now=now)


def _percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.1f} %"


def _demo(settings: Settings) -> int:
    from service.store import migrate
    from service.store.engine import build_engine
    from service.usecases import demo

    url = settings.effective_database_url
    engine = build_engine(url, pool_size=1)
    try:
        try:
            behind = migrate.current_revisions(engine) != migrate.head_revisions()
        except Exception as exc:
            return _fail(f"cannot reach the database: {type(exc).__name__}: {redact_url(exc)}")
        if behind:
            migrate.upgrade(url)
            print(f"teff: database migrated to {', '.join(migrate.head_revisions())} (head)", file=sys.stderr)
        loaded = demo.load_demo(engine, recorder=_ApiRecorder())
    finally:
        engine.dispose()
    created = sum(run.created for run in loaded.runs)
    base = f"http://{settings.host}:{settings.port}"
    lines = [
        f"teff demo: {len(loaded.runs)} runs for tenant {demo.DEMO_TENANT!r} at {redact_url(url)}: "
        f"{created} created, {len(loaded.runs) - created} already there; "
        f"{loaded.measurements_stored} measurements and {loaded.events_stored} events stored "
        f"({loaded.seconds:.1f} s)",
        "",
        f"  {'run id':<25} {'status':<9} {'median MFU':>10} {'published':>13}  run",
    ]
    for run in loaded.runs:
        low, high = run.demo.mfu_range
        lines.append(
            f"  {run.demo.id:<25} {run.status:<9} {_percent(run.median_mfu):>10} "
            f"{f'{100 * low:.1f}-{100 * high:.1f} %':>13}  {run.title}"
        )
    again = (
        f"; the {loaded.earlier_keys} made before stay valid (`teff keys list --tenant demo`, revoke with "
        "`teff keys revoke PREFIX`)"
        if loaded.earlier_keys
        else ""
    )
    lines += [
        "",
        "They count in the fleet statistics and calibrations as any tenant's runs do: load them into a "
        "database of your own, not a shared one.",
        "",
        "A new API key for these runs (read, write). Keys are stored only as hashes, so each `teff demo` "
        f"makes a fresh one{again}:",
        "",
        f"  {loaded.key}",
        "",
        "Try it (with `teff serve` running):",
        "",
        f"  export TEFF_API_KEY={loaded.key}",
        f'  curl -s -H "X-API-Key: $TEFF_API_KEY" {base}/v1/runs/{loaded.runs[0].demo.id}/efficiency',
        "",
        f"or open {base}/docs, press Authorize and paste the key.",
    ]
    print("\n".join(lines))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="teff", description="Training-efficiency service")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("serve", help="start the HTTP server")
    db = commands.add_parser("db", help="database schema")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_commands.add_parser("upgrade", help="migrate to the newest schema")
    upgrade.add_argument("revision", nargs="?", default="head")
    downgrade = db_commands.add_parser("downgrade", help="migrate down to REVISION")
    downgrade.add_argument("revision")
    db_commands.add_parser("current", help="print the schema revision; exit 1 when behind")
    openapi = commands.add_parser("openapi", help="the OpenAPI contract")
    openapi_commands = openapi.add_subparsers(dest="openapi_command", required=True)
    export = openapi_commands.add_parser("export", help="write openapi.yaml")
    export.add_argument("path", nargs="?", default="openapi.yaml")
    keys_parser = commands.add_parser("keys", help="API keys")
    keys_commands = keys_parser.add_subparsers(dest="keys_command", required=True)
    create = keys_commands.add_parser("create", help="create a key (printed once)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--scopes", default="read,write", help="comma-separated: read, write, admin")
    create.add_argument("--name", default="")
    list_parser = keys_commands.add_parser("list", help="list keys (never the keys themselves)")
    list_parser.add_argument("--tenant")
    revoke = keys_commands.add_parser("revoke", help="revoke a key by its prefix")
    revoke.add_argument("prefix")
    commands.add_parser(
        "demo",
        help="load a small demo fleet (runs and measurements; idempotent) and print a new key for it",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "openapi":
        return _openapi(args)
    try:
        settings = load_settings()
    except SettingsError as exc:
        return _fail(str(exc), 2)
    if args.command == "serve":
        return _serve(settings)
    if args.command == "db":
        return _db(settings, args)
    if args.command == "demo":
        return _demo(settings)
    return _keys(settings, args)


if __name__ == "__main__":
    sys.exit(main())
