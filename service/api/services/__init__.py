"""Orchestration between the API, the domain and the store (one place commits)."""
