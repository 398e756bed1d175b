from __future__ import annotations

from sqlalchemy import Engine, select

from service.store import keys
from service.store.tables import api_keys
from service.store.uow import UnitOfWork


def _create(engine: Engine, tenant: str, scopes: str) -> str:
    with UnitOfWork(engine, write=True) as uow:
        key = keys.create_key(uow.connection, tenant=tenant, scopes=keys.parse_scopes(scopes), name="ci")
        uow.commit()
    return key


def test_a_created_key_authenticates_as_its_tenant_with_its_scopes(engine: Engine) -> None:
    key = _create(engine, "team-a", "read,write")
    with UnitOfWork(engine, write=False) as uow:
        principal = keys.authenticate(uow.connection, key)
    assert principal is not None
    assert principal.tenant == "team-a"
    assert principal.scopes == {"read", "write"}


def test_only_a_hash_of_the_key_is_stored(engine: Engine) -> None:
    key = _create(engine, "team-a", "read")
    with UnitOfWork(engine, write=False) as uow:
        stored = [tuple(row) for row in uow.connection.execute(select(api_keys))]
    assert all(
        key not in str(value) and key.split("_", 2)[2] not in str(value) for row in stored for value in row
    )


def test_a_revoked_key_no_longer_authenticates(engine: Engine) -> None:
    key = _create(engine, "team-a", "read")
    prefix = key.split("_")[1]
    with UnitOfWork(engine, write=True) as uow:
        assert keys.revoke_key(uow.connection, prefix=prefix)
        uow.commit()
    with UnitOfWork(engine, write=False) as uow:
        assert keys.authenticate(uow.connection, key) is None


def test_a_key_with_a_known_prefix_but_wrong_secret_is_refused(engine: Engine) -> None:
    key = _create(engine, "team-a", "read")
    forged = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    with UnitOfWork(engine, write=False) as uow:
        assert keys.authenticate(uow.connection, forged) is None
        assert keys.authenticate(uow.connection, "not-a-key") is None


def test_unknown_scopes_are_refused() -> None:
    try:
        keys.parse_scopes("read,superuser")
    except ValueError as exc:
        assert "superuser" in str(exc)
    else:
        raise AssertionError("an unknown scope must be refused")
