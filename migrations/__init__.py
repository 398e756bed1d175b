"""Alembic migrations, shipped inside the wheel so `teff db upgrade` works from an installed package."""
