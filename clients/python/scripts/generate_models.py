#!/usr/bin/env python3
"""Write teff_client/models.py from the service's contract (openapi.yaml): one TypedDict per component
schema, plus the operation table the client's tests check their methods against.

    python clients/python/scripts/generate_models.py [path/to/openapi.yaml]

TypedDicts (not classes) because an answer is JSON the client hands on as it came: no copying, no
pydantic, and a field the service adds later does not break an older client. Component names the
contract qualifies with a module path (``service__api__schemas__runs__ParameterCountsRead``) get the
last part, prefixed with the module's (``RunsParameterCountsRead``) so that two stay two.
"""

from __future__ import annotations

import keyword
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
DEFAULT_CONTRACT = HERE.parents[2] / "openapi.yaml"
TARGET = HERE.parent / "teff_client" / "models.py"


def class_name(component: str) -> str:
    if "__" not in component:
        return component
    parts = component.split("__")
    return parts[-2].capitalize() + parts[-1]


def annotation(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return class_name(schema["$ref"].rsplit("/", 1)[1])
    if schema.get("type") == "object" and schema.get("title") and "properties" in schema:
        return str(schema["title"])  # an inline object the contract names (emitted by inline_objects)
    if "anyOf" in schema or "oneOf" in schema:
        options = [annotation(option) for option in schema.get("anyOf", schema.get("oneOf", []))]
        unique = list(dict.fromkeys(options))
        return " | ".join(unique)
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(annotation({**schema, "type": one}) for one in kind)
    if "enum" in schema and kind == "string":
        return "Literal[" + ", ".join(repr(value) for value in schema["enum"]) + "]"
    if kind == "string":
        return "str"
    if kind == "integer":
        return "int"
    if kind == "number":
        return "float"
    if kind == "boolean":
        return "bool"
    if kind == "null":
        return "None"
    if kind == "array":
        return f"list[{annotation(schema.get('items', {}))}]"
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return f"dict[str, {annotation(extra)}]"
        return "dict[str, Any]"
    return "Any"


def typed_dict(component: str, schema: dict[str, Any]) -> list[str]:
    name = class_name(component)
    lines = [f"class {name}(TypedDict, total=False):"]
    description = (schema.get("description") or schema.get("title") or component).strip()
    first = description.splitlines()[0].replace('"""', "'''").replace("\\", "\\\\")
    lines.append(f'    """{first}"""')
    lines.append("")
    required = set(schema.get("required", []))
    properties = schema.get("properties", {})
    if not properties:
        lines.append("    pass")
    for field, spec in properties.items():
        if not field.isidentifier() or keyword.iskeyword(field):
            continue  # not representable as a TypedDict field; it stays readable as a key
        hint = annotation(spec)
        hint = f"Required[{hint}]" if field in required else hint
        lines.append(f"    {field}: {hint}")
    return [*lines, "", ""]


def inline_objects(schema: Any, found: dict[str, dict[str, Any]]) -> None:
    """Titled object schemas written inline in request bodies (MeasurementIn, ThroughputItem)."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" and schema.get("title") and "properties" in schema:
            found.setdefault(str(schema["title"]), schema)
        for value in schema.values():
            inline_objects(value, found)
    elif isinstance(schema, list):
        for value in schema:
            inline_objects(value, found)


def operations(contract: dict[str, Any]) -> list[str]:
    lines = [
        "#: operationId -> (method, path) of every operation in the contract",
        "OPERATIONS: dict[str, tuple[str, str]] = {",
    ]
    for path, methods in contract["paths"].items():
        for method, operation in methods.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                lines.append(f'    "{operation["operationId"]}": ("{method.upper()}", "{path}"),')
    return [*lines, "}", ""]


def render(contract: dict[str, Any]) -> str:
    header = [
        '"""Request and answer shapes of the training-efficiency service, generated from its openapi.yaml',
        "by clients/python/scripts/generate_models.py (do not edit by hand; run it again).",
        f"Contract version: {contract['info'].get('version', '?')}.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any, Literal, Required, TypedDict",
        "",
        "",
    ]
    schemas = dict(contract["components"]["schemas"])
    inline: dict[str, dict[str, Any]] = {}
    for methods in contract["paths"].values():
        for operation in methods.values():
            if isinstance(operation, dict) and "requestBody" in operation:
                inline_objects(operation["requestBody"], inline)
    for title, schema in inline.items():
        schemas.setdefault(title, schema)
    body: list[str] = []
    for component, schema in sorted(schemas.items(), key=lambda kv: class_name(kv[0])):
        body += typed_dict(component, schema)
    text = "\n".join(header + body + operations(contract))
    # Formatted as the repository formats (ruff), so that the freshness test compares like with like.
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--line-length", "110", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return formatted.stdout


def main() -> int:
    contract_path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CONTRACT
    contract = yaml.safe_load(contract_path.read_text())
    TARGET.write_text(render(contract))
    print(f"wrote {TARGET} ({len(contract['components']['schemas'])} schemas)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
