"""Use cases (the application layer): keyword-only functions over a unit of work, no HTTP, no SQL."""
