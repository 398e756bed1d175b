from __future__ import annotations

from pathlib import Path

import pytest

from service.settings import SettingsError, load_settings


def test_a_bad_port_stops_with_a_message_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEFF_PORT", "eighty")
    with pytest.raises(SettingsError, match="TEFF_PORT"):
        load_settings()


def test_an_unknown_database_scheme_names_the_database_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://localhost/x")
    with pytest.raises(SettingsError, match="TEFF_DATABASE_URL"):
        load_settings()


def test_the_default_database_is_a_sqlite_file_in_the_data_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.delenv("TEFF_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("TEFF_DATA_DIR", str(tmp_path))
    settings = load_settings()
    assert settings.effective_database_url == f"sqlite:///{tmp_path}/teff.db"
    assert settings.is_sqlite


def test_a_plain_postgres_url_is_routed_to_psycopg_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@db:5432/teff")
    assert load_settings().effective_database_url == "postgresql+psycopg://u@db:5432/teff"


def test_cors_origins_are_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEFF_CORS_ORIGINS", "https://a.example, https://b.example")
    assert load_settings().cors_origins == ["https://a.example", "https://b.example"]


def test_a_bad_log_format_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEFF_LOG_FORMAT", "xml")
    with pytest.raises(SettingsError, match="TEFF_LOG_FORMAT"):
        load_settings()


@pytest.mark.parametrize("variable", ["TEFF_DATABASE_URL", "DATABASE_URL"])
def test_an_invalid_database_url_never_echoes_its_password(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.delenv("TEFF_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv(variable, "mysql://admin:hunter2-very-secret@db.internal:3306/teff")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    message = str(raised.value)
    assert "hunter2-very-secret" not in message
    assert "admin:***@db.internal" in message  # the rest still says what was given
    assert "TEFF_DATABASE_URL (or DATABASE_URL)" in message
    assert "TEFF_TEFF_" not in message


def test_the_default_data_directory_does_not_depend_on_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`teff keys create` run from another directory must write the database the server reads
    (a relative `data` default made a new, empty one in each directory)."""
    for name in ("TEFF_DATABASE_URL", "DATABASE_URL", "TEFF_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    urls = set()
    for directory in ("a", "b"):
        (tmp_path / directory).mkdir()
        monkeypatch.chdir(tmp_path / directory)
        urls.add(load_settings().effective_database_url)
    assert urls == {f"sqlite:///{tmp_path / 'xdg' / 'teff' / 'teff.db'}"}


def test_a_relative_data_directory_is_resolved_once_from_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TEFF_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TEFF_DATA_DIR", "here")
    settings = load_settings()
    assert settings.data_dir == tmp_path / "here"
    assert settings.data_dir.is_absolute()
