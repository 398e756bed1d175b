"""The application layer: use cases between ``service.api`` (HTTP) and ``service.store`` (SQL).

Each use case is a keyword-only function (or, for measurement ingest, a small object the app's
lifespan owns) that loads through a unit of work, lets the domain decide, and commits. It imports
neither HTTP (FastAPI, Starlette) nor SQL (SQLAlchemy, psycopg): the store's handles
(``service.store.uow.Database``, ``Transaction``) pass through it unopened.
"""
