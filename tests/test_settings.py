from __future__ import annotations

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
