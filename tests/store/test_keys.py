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


BOOTSTRAP_KEY = "teff_0123456789ab_" + "s3cret-made-by-the-operator-not-by-us-0123"


def _import(engine: Engine, key: str = BOOTSTRAP_KEY) -> bool:
    with UnitOfWork(engine, write=True) as uow:
        stored = keys.import_key(
            uow.connection, key, tenant="ml-platform", scopes=frozenset({"read", "write"})
        )
        uow.commit()
    return stored


def test_a_bootstrap_key_is_stored_once_and_authenticates_as_given(engine: Engine) -> None:
    assert _import(engine) is True
    assert _import(engine) is False  # the next deploy's upgrade changes nothing
    with UnitOfWork(engine, write=False) as uow:
        principal = keys.authenticate(uow.connection, BOOTSTRAP_KEY)
        rows = uow.connection.execute(select(api_keys.c.key_hash)).all()
    assert (
        principal is not None and principal.tenant == "ml-platform" and principal.scopes == {"read", "write"}
    )
    assert len(rows) == 1 and BOOTSTRAP_KEY not in rows[0].key_hash


def test_a_revoked_bootstrap_key_is_not_brought_back_by_the_next_deploy(engine: Engine) -> None:
    _import(engine)
    with UnitOfWork(engine, write=True) as uow:
        assert keys.revoke_key(uow.connection, prefix="0123456789ab")
        uow.commit()
    assert _import(engine) is False
    with UnitOfWork(engine, write=False) as uow:
        assert keys.authenticate(uow.connection, BOOTSTRAP_KEY) is None


def test_a_malformed_bootstrap_key_is_refused_saying_how_to_make_one(engine: Engine) -> None:
    for bad in ("hunter2", "teff_XYZ_" + "a" * 40, "teff_0123456789ab_short"):
        try:
            _import(engine, bad)
        except ValueError as err:
            assert "secrets.token_hex(6)" in str(err)
        else:
            raise AssertionError(f"{bad!r} was accepted")
