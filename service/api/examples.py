"""Examples in the published contract that Swagger UI's "Try it out" offers in its dropdowns.

Each request schema keeps its ``examples`` (ReDoc shows them beside the schema); here they are also
written as the operation's media-type ``examples``, named and summarised, which is what Swagger UI
lists. Path parameters and a few query filters get examples that answer on the demo fleet
(``teff demo``: :data:`service.usecases.demo.DEMO_RUNS`, fixed ids), so every Execute on a fresh
machine answers 2xx once the demo is loaded.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from service.usecases.demo import DEMO_RUNS, DemoRun

_METHODS = ("get", "post", "put", "patch", "delete")
#: Answers recorded on the demo fleet (``python -m tests.support.documented_examples``): each operation's
#: answer to its first example, and one problem per error status, with the request that drew it. ReDoc
#: shows them as the response samples; tests/api/test_documented_examples.py holds them to the answers
#: the demo gives now and to the published schemas.
RESPONSE_EXAMPLES_PATH = Path(__file__).with_name("response_examples.json")


@cache
def recorded_answers() -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads(RESPONSE_EXAMPLES_PATH.read_text())
    return recorded


def _add_response_examples(path: str, method: str, operation: dict[str, Any]) -> None:
    recorded = recorded_answers()
    responses = operation.get("responses", {})
    success = recorded["success"].get(f"{method.upper()} {path}")
    if success is not None:
        media = responses.get(str(success["status"]), {}).get("content", {}).get("application/json")
        if media is not None and "examples" not in media:
            media["examples"] = {
                "demo": {"summary": "recorded on the demo fleet (teff demo), lists cut to 3 items",
                         "value": success["value"]}
            }  # fmt: skip
    for status, problem in recorded["problems"].items():
        media = responses.get(status, {}).get("content", {}).get("application/problem+json")
        if media is not None and "examples" not in media:
            media["examples"] = {
                status: {"summary": f"recorded: {problem['request']}", "value": problem["value"]}
            }


def _demo_summary(run: DemoRun) -> str:
    hardware = run.body["hardware"]
    return f"demo: {run.body['model']['preset']} on {hardware['device_count']} × {hardware['accelerator']} ({run.status})"


def _run_id_examples(first: DemoRun) -> dict[str, Any]:
    ordered = [first, *(run for run in DEMO_RUNS if run is not first)]
    return {run.id: {"summary": _demo_summary(run), "value": run.id} for run in ordered}


def _named(*values: tuple[str, str]) -> dict[str, Any]:
    """Examples by name from (value, summary) pairs, each named by its value."""
    return {value: {"summary": summary, "value": value} for value, summary in values}


_RUNNING = next(run for run in DEMO_RUNS if run.status == "running")
# DELETE offers the failed run first: a visitor trying DELETE should not lose the run every other
# example reads (`teff demo` puts it back either way).
_FAILED = next(run for run in DEMO_RUNS if run.status == "failed")

#: parameter name → (examples by name); the first is what Swagger UI fills in.
_PARAMETER_EXAMPLES: dict[str, dict[str, Any]] = {
    "run_id": _run_id_examples(_RUNNING),
    "preset_id": _named(
        ("llama3-8b", "Llama 3 8B (dense, GQA)"),
        ("mixtral-8x7b", "Mixtral 8x7B (MoE, 8 experts, top-2)"),
        ("llama3.1-405b", "Llama 3.1 405B"),
    ),
    "accelerator_id": _named(
        ("h100-sxm", "NVIDIA H100 SXM5 80GB"),
        ("a100-sxm4-80gb", "NVIDIA A100 SXM4 80GB"),
        ("mi300x", "AMD Instinct MI300X"),
    ),
    "slug": _named(*((name, name) for name in ("validation-error", "implausible-result", "not-found"))),
}
#: Query filters whose example narrows the demo fleet to some of its runs (others stay empty: every
#: filter Swagger UI fills in is sent).
_QUERY_EXAMPLES: dict[tuple[str, str], dict[str, Any]] = {
    ("/v1/runs", "accelerator"): {"h100-sxm": {"summary": "the H100 runs", "value": "h100-sxm"}},
    ("/v1/runs", "status"): {"running": {"summary": "runs still running", "value": "running"}},
    ("/v1/stats/mfu", "run_id"): {
        _RUNNING.id: {"summary": f"rank {_demo_summary(_RUNNING)}", "value": _RUNNING.id}
    },
}


def _summary(value: Any, number: int) -> str:
    """A dropdown label from what a body asks about: its model and hardware, else its first fields."""
    if not isinstance(value, dict):
        return f"example {number}"
    if isinstance(value.get("items"), list):
        return f"{len(value['items'])} items"
    parts: list[str] = []
    model = value.get("model")
    if isinstance(model, dict):
        parts.append(str(model.get("preset") or model.get("dimensions", {}).get("name") or "custom model"))
    hardware = value.get("hardware") or value.get("cluster")
    if isinstance(hardware, dict):
        part = hardware.get("accelerator") or (hardware.get("custom") or {}).get("name") or "custom part"
        count = hardware.get("device_count") or hardware.get("count")
        parts.append(f"on {count} × {part}" if count else f"on {part}")
    # Then what sets this example apart: its scalar settings with their values ("kind cosine"), then
    # the names of the parts it adds ("predict", "layout").
    others = [key for key in value if key not in {"model", "hardware", "cluster"}]
    scalars = [f"{key} {_scalar(value[key])}" for key in others if not isinstance(value[key], dict | list)]
    nested = [key for key in others if isinstance(value[key], dict | list)]
    rest = (nested + scalars if nested else scalars)[: 3 if not parts else 2]
    label = " ".join(parts)
    if rest:
        label += (": " if label else "") + ", ".join(rest)
    return label or f"example {number}"


def _scalar(value: Any) -> str:
    if isinstance(value, float) and (value >= 1e5 or 0 < value < 1e-3):
        return f"{value:.3g}"
    return str(value)


def _component(schema: dict[str, Any], media: dict[str, Any]) -> dict[str, Any]:
    reference = str(media.get("schema", {}).get("$ref", ""))
    components: dict[str, Any] = schema.get("components", {}).get("schemas", {})
    return dict(components.get(reference.rsplit("/", 1)[-1], {})) if reference else {}


def add_examples(schema: dict[str, Any]) -> None:
    """Write the media-type and parameter examples into an OpenAPI document, in place."""
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in _METHODS:
                continue
            for parameter in operation.get("parameters", []):
                found = (
                    _QUERY_EXAMPLES.get((path, parameter["name"]))
                    if parameter["in"] == "query"
                    else _PARAMETER_EXAMPLES.get(parameter["name"])
                )
                if found and "examples" not in parameter:
                    if method == "delete" and parameter["name"] == "run_id":
                        found = _run_id_examples(_FAILED)
                    parameter["examples"] = found
            _add_response_examples(path, method, operation)
            for media in operation.get("requestBody", {}).get("content", {}).values():
                values = _component(schema, media).get("examples")
                if "examples" in media or not isinstance(values, list):
                    continue
                labels: dict[str, int] = {}
                named: dict[str, Any] = {}
                for number, value in enumerate(values, start=1):
                    label = _summary(value, number)
                    labels[label] = labels.get(label, 0) + 1
                    key = label if labels[label] == 1 else f"{label} ({labels[label]})"
                    named[key] = {"summary": key, "value": value}
                media["examples"] = named
