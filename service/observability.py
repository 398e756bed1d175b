"""Structured logs with the request id, and the Prometheus metrics of the HTTP layer and the ingest
writer."""

from __future__ import annotations

import json
import logging
import sys
import time
from contextvars import ContextVar

from prometheus_client import Counter, Histogram

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)

LOGGER_NAME = "teff"

HTTP_REQUESTS = Counter("teff_http_requests_total", "HTTP requests answered", ["route", "method", "status"])
HTTP_LATENCY = Histogram(
    "teff_http_request_duration_seconds",
    "Time from request start to the last body byte sent",
    ["route", "method"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
MEASUREMENTS_INGESTED = Counter(
    "teff_measurements_ingested",
    "Measurements stored by this process (repeated steps, which are not stored again, not counted)",
)
INGEST_BATCH_REQUESTS = Histogram(
    "teff_ingest_batch_requests",
    "Measurement requests committed together in one group-commit transaction",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
INGEST_BATCH_SECONDS = Histogram(
    "teff_ingest_batch_seconds",
    "Duration of one group-commit transaction of measurements (BEGIN to COMMIT)",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)


def observe_ingest_batch(requests: int, seconds: float) -> None:
    INGEST_BATCH_REQUESTS.observe(requests)
    INGEST_BATCH_SECONDS.observe(seconds)


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, request_id, extras."""

    _STANDARD = set(vars(logging.makeLogRecord({})).keys()) | {
        "message",
        "asctime",
        "request_id",
        "color_message",
        "taskName",
    }

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        for key, value in vars(record).items():
            if key not in self._STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")


def configure_logging(level: str, log_format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(_RequestIdFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's own access log would duplicate ours (and lacks the request id).
    logging.getLogger("uvicorn.access").disabled = True
    # Alembic announces its dialect on every readiness probe's revision check.
    logging.getLogger("alembic.runtime.migration").setLevel(logging.WARNING)
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
