"""Request and response schemas, one module per resource; `common` holds what several share."""
