"""Presenters: domain objects -> response schemas, and request schemas -> domain objects, shared by
routers (a router never imports another router)."""
